// The host-side runtime wrappers of cuda/device_runtime.hpp: memory, streams, graphs, copies.
#include <utility>

#include "cuda/common.cuh"
#include "cuda/device_runtime.hpp"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "cuda";

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (data_) cudaFree(data_);
}

Status DeviceMemory::Allocate(const char* what, int64_t bytes) {
  if (data_) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
  const cudaError_t error = cudaMalloc(&data_, static_cast<size_t>(bytes > 0 ? bytes : 1));
  if (error != cudaSuccess) {
    data_ = nullptr;
    cudaGetLastError();  // not sticky, but leave nothing for the next launch check to find
    return FromCuda(error, what, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  }
  bytes_ = bytes;
  return Status::Ok();
}

PinnedMemory::PinnedMemory(PinnedMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)) {}

PinnedMemory& PinnedMemory::operator=(PinnedMemory&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

PinnedMemory::~PinnedMemory() {
  if (data_) cudaFreeHost(data_);
}

Status PinnedMemory::Allocate(const char* what, int64_t bytes) {
  if (data_) cudaFreeHost(data_);
  data_ = nullptr;
  const cudaError_t error = cudaMallocHost(&data_, static_cast<size_t>(bytes > 0 ? bytes : 1));
  if (error != cudaSuccess) {
    data_ = nullptr;
    cudaGetLastError();
    return FromCuda(error, what, "cudaMallocHost");
  }
  return Status::Ok();
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(AsStream(stream_));
}

Status Stream::Create() {
  cudaStream_t stream = nullptr;
  SSMKIT_CUDA_RETURN_IF_ERROR(kOp, "cudaStreamCreateWithFlags",
                              cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (stream_) cudaStreamDestroy(AsStream(stream_));
  stream_ = stream;
  return Status::Ok();
}

Graph::Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

Status Graph::BeginCapture(void* stream) {
  return FromCuda(cudaStreamBeginCapture(AsStream(stream), cudaStreamCaptureModeThreadLocal), kOp,
                  "cudaStreamBeginCapture");
}

Status Graph::EndCapture(void* stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(AsStream(stream), &graph);
  if (ended != cudaSuccess) {
    cudaGetLastError();
    return FromCuda(ended, kOp, "cudaStreamEndCapture (a call during the capture failed)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  SSMKIT_CUDA_RETURN_IF_ERROR(kOp, "cudaGraphInstantiate", made);
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  exec_ = exec;
  return Status::Ok();
}

Status Graph::Launch(void* stream) const {
  if (!exec_) return Status::Internal("cuda: launching a graph that was never captured");
  return FromCuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), AsStream(stream)), kOp,
                  "cudaGraphLaunch");
}

Status CopyToDevice(void* dst, const void* src, int64_t bytes, void* stream) {
  return FromCuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                  AsStream(stream)),
                  kOp, "cudaMemcpyAsync (to the device)");
}

Status CopyToHost(void* dst, const void* src, int64_t bytes, void* stream) {
  return FromCuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                  AsStream(stream)),
                  kOp, "cudaMemcpyAsync (to the host)");
}

Status CopyOnDevice(void* dst, const void* src, int64_t bytes, void* stream) {
  return FromCuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                  AsStream(stream)),
                  kOp, "cudaMemcpyAsync (on the device)");
}

Status ZeroOnDevice(void* dst, int64_t bytes, void* stream) {
  return FromCuda(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), AsStream(stream)), kOp,
                  "cudaMemsetAsync");
}

Status SynchronizeStream(void* stream) {
  return FromCuda(cudaStreamSynchronize(AsStream(stream)), kOp, "cudaStreamSynchronize");
}

}  // namespace ssmkit::cuda

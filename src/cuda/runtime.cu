// Host-side pieces of the CUDA backend: the per-thread stream, status conversion, workspaces,
// shared-memory limits, and the deterministic partial-sum kernel every backward uses.
#include <algorithm>
#include <mutex>

#include "cuda/common.cuh"
#include "ssmkit/cuda.hpp"

namespace ssmkit {
namespace {
thread_local cudaStream_t g_stream = nullptr;
}  // namespace

bool CudaBuilt() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return count;
}

void SetCudaStream(void* stream) { g_stream = static_cast<cudaStream_t>(stream); }
void* GetCudaStream() { return g_stream; }

Status CudaSynchronize() {
  return cuda::FromCuda(cudaStreamSynchronize(g_stream), "CudaSynchronize", "stream");
}

namespace cuda {

cudaStream_t CurrentStream() { return g_stream; }

Status FromCuda(cudaError_t error, const char* op, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  const std::string message = std::string(op) + ": " + what + ": " + cudaGetErrorName(error) +
                              " (" + cudaGetErrorString(error) + ")";
  if (error == cudaErrorMemoryAllocation) return Status::OutOfMemory(message);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) {
    return Status::Unsupported(message);
  }
  return Status::Internal(message);
}

Status MaxSharedMemoryPerBlock(const char* op, int* bytes) {
  int device = 0;
  SSMKIT_CUDA_RETURN_IF_ERROR(op, "cudaGetDevice", cudaGetDevice(&device));
  return FromCuda(cudaDeviceGetAttribute(bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                  op, "cudaDeviceGetAttribute");
}

Status AllowSharedMemory(const char* op, const void* kernel, int bytes) {
  if (bytes <= 48 * 1024) return Status::Ok();
  return FromCuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                  op, "cudaFuncSetAttribute");
}

namespace {

// Raises the release threshold of each device's default pool once, so freed workspaces stay
// cached for the next call instead of going back to the driver at every synchronisation.
Status KeepPoolCached(const char* op) {
  constexpr int kMaxDevices = 64;
  static std::once_flag flags[kMaxDevices];
  int device = 0;
  SSMKIT_CUDA_RETURN_IF_ERROR(op, "cudaGetDevice", cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) return Status::Ok();
  cudaError_t error = cudaSuccess;
  std::call_once(flags[device], [&] {
    cudaMemPool_t pool;
    error = cudaDeviceGetDefaultMemPool(&pool, device);
    if (error != cudaSuccess) return;
    uint64_t threshold = UINT64_MAX;
    error = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  });
  return FromCuda(error, op, "configuring the memory pool");
}

}  // namespace

Workspace::~Workspace() {
  if (data_) cudaFreeAsync(data_, stream_);
}

Status Workspace::Allocate(const char* op, int64_t bytes) {
  SSMKIT_RETURN_IF_ERROR(KeepPoolCached(op));
  if (data_) {
    cudaFreeAsync(data_, stream_);
    data_ = nullptr;
  }
  stream_ = CurrentStream();
  const size_t size = static_cast<size_t>(RoundUp(bytes > 0 ? bytes : 1, 256));
  return FromCuda(cudaMallocAsync(&data_, size, stream_), op, "workspace (cudaMallocAsync)");
}

namespace {

__global__ void SumPartialsKernel(const float* __restrict__ partial, int64_t groups, int64_t parts,
                                  int64_t group_stride, StridedOut out) {
  const int64_t count = out.count();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < groups * count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / count, r = i % count;
    float sum = 0.0f;
    for (int64_t p = 0; p < parts; ++p) sum += partial[(g * parts + p) * count + r];
    const int64_t i2 = r % out.dims[2], i1 = (r / out.dims[2]) % out.dims[1];
    const int64_t i0 = r / (out.dims[2] * out.dims[1]);
    StoreF32(out.data, out.dtype,
             g * group_stride + i0 * out.strides[0] + i1 * out.strides[1] + i2 * out.strides[2],
             sum);
  }
}

}  // namespace

Status SumPartials(const char* op, const float* partial, int64_t parts, const StridedOut& out) {
  return SumGroupedPartials(op, partial, 1, parts, 0, out);
}

Status SumGroupedPartials(const char* op, const float* partial, int64_t groups, int64_t parts,
                          int64_t group_stride, const StridedOut& out) {
  const int64_t count = groups * out.count();
  if (!out.data || count == 0) return Status::Ok();
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>(CeilDiv(count, threads), 65535);
  SumPartialsKernel<<<static_cast<unsigned>(blocks), threads, 0, CurrentStream()>>>(
      partial, groups, parts, group_stride, out);
  return CheckLaunch(op, "SumPartialsKernel");
}

}  // namespace cuda
}  // namespace ssmkit

#include "cuda_call.hpp"

#include "ssmkit/cuda.hpp"

namespace ssmkit::python {

std::string CudaMessage(const char* what, const char* call, cudaError_t e) {
  return std::string(what) + ": " + call + " failed: " + cudaGetErrorString(e);
}

ScopedCudaCall::ScopedCudaCall(cudaStream_t stream) : previous_stream_(GetCudaStream()) {
  SetCudaStream(stream);
}

ScopedCudaCall::~ScopedCudaCall() {
  if (previous_device_ >= 0) cudaSetDevice(previous_device_);
  SetCudaStream(previous_stream_);
}

cudaError_t ScopedCudaCall::UseDevice(int device) {
  int current = 0;
  if (cudaError_t e = cudaGetDevice(&current); e != cudaSuccess) return e;
  if (current == device) return cudaSuccess;
  if (previous_device_ < 0) previous_device_ = current;
  return cudaSetDevice(device);
}

cudaError_t ScopedCudaCall::UseStreamDevice(cudaStream_t stream) {
  int device = 0;
  if (cudaError_t e = cudaStreamGetDevice(stream, &device); e != cudaSuccess) return e;
  return UseDevice(device);
}

}  // namespace ssmkit::python

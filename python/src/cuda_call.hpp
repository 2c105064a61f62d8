// One call's CUDA context on the calling thread: a stream becomes the thread's ssmkit stream
// and a device the current device for the call (the ops launch on that stream and take their
// workspaces from the current device's pool); both are restored afterwards. Used by the XLA
// FFI handlers (XLA's stream) and by the array binding (torch's current stream). Compiled only
// when the library has the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace ssmkit::python {

// "<what>: <call> failed: <CUDA's description of e>".
std::string CudaMessage(const char* what, const char* call, cudaError_t e);

class ScopedCudaCall {
 public:
  explicit ScopedCudaCall(cudaStream_t stream);
  ~ScopedCudaCall();
  ScopedCudaCall(const ScopedCudaCall&) = delete;
  ScopedCudaCall& operator=(const ScopedCudaCall&) = delete;

  // Makes `device` current for the call.
  cudaError_t UseDevice(int device);
  // Makes the stream's device current (XLA may call on a thread whose device is another).
  cudaError_t UseStreamDevice(cudaStream_t stream);

 private:
  void* previous_stream_;
  int previous_device_ = -1;  // -1: the current device was left as it was
};

}  // namespace ssmkit::python

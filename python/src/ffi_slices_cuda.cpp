// The CUDA side of ffi_slices.hpp, compiled only when the library has the CUDA backend: XLA's
// stream becomes the calling thread's ssmkit stream for the call, and the stream's device the
// current device (the ops take their workspaces from the current device's pool).
#include <string>

#include "ffi_slices.hpp"
#include "ssmkit/cuda.hpp"

namespace ssmkit::python {
namespace {

std::string CudaMessage(const char* what, const char* call, cudaError_t e) {
  return std::string(what) + ": " + call + " failed: " + cudaGetErrorString(e);
}

// Sets the thread's ssmkit stream and current device for one FFI call; restores both after.
class ScopedCudaCall {
 public:
  explicit ScopedCudaCall(cudaStream_t stream) : previous_stream_(GetCudaStream()) {
    SetCudaStream(stream);
  }
  ~ScopedCudaCall() {
    if (previous_device_ >= 0) cudaSetDevice(previous_device_);
    SetCudaStream(previous_stream_);
  }
  ScopedCudaCall(const ScopedCudaCall&) = delete;
  ScopedCudaCall& operator=(const ScopedCudaCall&) = delete;

  // Makes the stream's device current (XLA may call on a thread whose device is another).
  cudaError_t UseStreamDevice(cudaStream_t stream) {
    int device = 0;
    if (cudaError_t e = cudaStreamGetDevice(stream, &device); e != cudaSuccess) return e;
    int current = 0;
    if (cudaError_t e = cudaGetDevice(&current); e != cudaSuccess) return e;
    if (current == device) return cudaSuccess;
    previous_device_ = current;
    return cudaSetDevice(device);
  }

 private:
  void* previous_stream_;
  int previous_device_ = -1;  // -1: the current device was left as it was
};

}  // namespace

ffi::Error RunOverSlices(const char* op, cudaStream_t stream, ffi::RemainingArgs args,
                         ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                         size_t n_out, const SliceFn& fn) {
  ScopedCudaCall call(stream);
  if (cudaError_t e = call.UseStreamDevice(stream); e != cudaSuccess) {
    return ffi::Error::Internal(CudaMessage(op, "selecting XLA's stream's device", e));
  }
  return RunSlices(op, Device::kCuda, args, rets, ranks, n_in, n_out, fn);
}

Status CopyOnCudaStream(const Tensor& src, const Tensor& dst, int64_t bytes, const char* what) {
  const cudaError_t e =
      cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                      static_cast<cudaStream_t>(GetCudaStream()));
  if (e != cudaSuccess) return Status::Internal(CudaMessage(what, "cudaMemcpyAsync", e));
  return Status::Ok();
}

}  // namespace ssmkit::python

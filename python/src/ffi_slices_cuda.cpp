// The CUDA side of ffi_slices.hpp, compiled only when the library has the CUDA backend: XLA's
// stream becomes the calling thread's ssmkit stream for the call, and the stream's device the
// current device (the ops take their workspaces from the current device's pool).
#include "cuda_call.hpp"
#include "ffi_slices.hpp"
#include "ssmkit/cuda.hpp"

namespace ssmkit::python {

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

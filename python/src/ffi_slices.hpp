// XLA FFI calls as ssmkit views: operand and result buffers become Tensors, looping over the
// leading dimensions that jax.vmap adds (vmap_method="expand_dims": every operand gains the
// same number of leading dims, of size 1 where it is not batched, which broadcasts). On the
// CPU the op's parallel loops run on XLA's intra-op thread pool; on CUDA (built with the CUDA
// backend, ffi_slices_cuda.cpp) the views are device buffers and the slices are launched one
// after another on XLA's stream.
#pragma once

#include <functional>
#include <span>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"
#include "xla/ffi/api/ffi.h"

#ifdef SSMKIT_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace ssmkit::python {

namespace ffi = xla::ffi;

// fn(inputs, outputs) runs the op on one slice. An operand or result with no elements is
// absent (an undefined Tensor): the JAX wrappers pass a (0,) array for a missing optional. So is
// one whose rank in `ranks` is -1, whatever its shape: Nx has no empty tensors, so EXLA's callers
// (bindings/elixir, Ssmkit.EXLA) pass a scalar there.
using SliceFn = std::function<Status(std::span<const Tensor> in, std::span<const Tensor> out)>;

// ranks: the unbatched rank of every operand, then of every result (the leading dims beyond
// them are vmap's). n_in, n_out: the counts the op expects. `op` names it in messages.
// The buffers are views on `device`; the caller has set where the op runs (executor, stream).
ffi::Error RunSlices(const char* op, Device device, ffi::RemainingArgs args,
                     ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                     size_t n_out, const SliceFn& fn);

// RunSlices on host buffers with the ops' parallel loops on XLA's intra-op thread pool.
ffi::Error RunOverSlices(const char* op, ffi::ThreadPool pool, ffi::RemainingArgs args,
                         ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                         size_t n_out, const SliceFn& fn);

#ifdef SSMKIT_HAS_CUDA
// RunSlices on device buffers: the calling thread's ssmkit stream is XLA's `stream` (and the
// current device the stream's) for the call, both restored after it.
ffi::Error RunOverSlices(const char* op, cudaStream_t stream, ffi::RemainingArgs args,
                         ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                         size_t n_out, const SliceFn& fn);

// An asynchronous device-to-device copy of `bytes` on the calling thread's ssmkit stream.
Status CopyOnCudaStream(const Tensor& src, const Tensor& dst, int64_t bytes, const char* what);
#endif

// Copies src into dst, two dense row-major views of one shape, dtype and device (a state that
// an op updates in place, taken from an input into its output); on CUDA, on the stream.
Status CopyInto(const Tensor& src, const Tensor& dst, const char* what);

}  // namespace ssmkit::python

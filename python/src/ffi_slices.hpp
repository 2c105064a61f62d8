// XLA FFI calls as ssmkit views: operand and result buffers become Tensors, looping over the
// leading dimensions that jax.vmap adds (vmap_method="expand_dims": every operand gains the
// same number of leading dims, of size 1 where it is not batched, which broadcasts), with the
// op's parallel loops on XLA's intra-op thread pool.
#pragma once

#include <functional>
#include <span>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"
#include "xla/ffi/api/ffi.h"

namespace ssmkit::python {

namespace ffi = xla::ffi;

// fn(inputs, outputs) runs the op on one slice. An operand or result with no elements is
// absent (an undefined Tensor): the JAX wrappers pass a (0,) array for a missing optional.
using SliceFn = std::function<Status(std::span<const Tensor> in, std::span<const Tensor> out)>;

// ranks: the unbatched rank of every operand, then of every result (the leading dims beyond
// them are vmap's). n_in, n_out: the counts the op expects. `op` names it in messages.
ffi::Error RunOverSlices(const char* op, ffi::ThreadPool pool, ffi::RemainingArgs args,
                         ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                         size_t n_out, const SliceFn& fn);

// Copies src into dst, two dense row-major views of one shape and dtype (a state that an op
// updates in place, taken from an input into its output).
Status CopyInto(const Tensor& src, const Tensor& dst, const char* what);

}  // namespace ssmkit::python

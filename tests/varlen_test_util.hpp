// Views into packed (variable-length) batches for the varlen tests: a packed tensor's slice
// for one sequence, or one row of a per-sequence state tensor.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::testing {

// Elements [start, start + len) of dimension `dim`, the rest of the view unchanged.
inline Tensor Narrow(Tensor t, int dim, int64_t start, int64_t len) {
  t.data = static_cast<char*>(t.data) + start * t.strides[dim] * DTypeSize(t.dtype);
  t.shape[dim] = len;
  return t;
}

// Row r of an (R, ...) tensor (a per-sequence state, a batch row) as a (1, ...) one.
inline Tensor Row(const Tensor& t, int64_t r) { return Narrow(t, 0, r, 1); }

}  // namespace ssmkit::testing

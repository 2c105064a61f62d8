// The fp64 oracle of LinearForward with a quantized weight (include/ssmkit/linear.hpp): the
// weight decoded exactly (core/quant.hpp), then the product in double. The fast kernels also
// quantize x (to 8 bits per element), which this oracle does not: tests bound that error.
// Dimension legend: T rows, K input features, M output features.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit::ref {

// out[t, m] = sum_k x[t, k] * dequant(w)[m, k] + bias[m]. x (T, K), w: M rows of
// DTypeRowBytes(w_dtype, K) bytes (K a multiple of the block), bias (M) or nullptr, out (T, M).
void QuantLinear(int64_t T, int64_t K, int64_t M, const double* x, DType w_dtype, const void* w,
                 const double* bias, double* out);

}  // namespace ssmkit::ref

// CPU linear layer: a Highway matrix-vector kernel for a few rows (decode; quant_linear.hpp for
// a quantized weight), OpenBLAS sgemm over panels of the weight for many (prefill).
// Dimension legend: T rows, K in, M out features.
#pragma once

#include <cstdint>

#include "params/linear_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status Linear(const LinearParams& p);

// dx, dweight and dbias (those not nullptr) of the forward's p; an f32 weight
// (linear_backward.cpp).
Status LinearBackward(const LinearBackwardParams& p);

// The matrix-vector kernel on its own (T <= kLinearGemvMaxRows, x row-major, out row-major or
// feature-major, an f32, bf16 or f16 weight), output rows [m_begin, m_end) only; on the calling
// thread.
void LinearGemvRows(const LinearParams& p, int64_t m_begin, int64_t m_end);

// Output features [m_begin, m_end) on the calling thread: the matrix-vector kernel when Linear
// would take it (for a quantized weight x is quantized on this thread first), else one sgemm
// per weight panel (OpenBLAS as the caller set it up: inside a parallel region, under
// blas::SingleThread). May throw std::bad_alloc (the per-thread panel of a bf16/f16 or
// quantized weight, or quantized x, kept between calls).
void LinearRows(const LinearParams& p, int64_t m_begin, int64_t m_end);

// dst[i] = W[i] as f32 for i < n: widens a panel of a bf16/f16 (or copies an f32) weight, or
// decodes one of a quantized weight (n then a whole number of blocks, src on a block).
void WidenToF32(const void* src, DType dtype, int64_t n, float* dst);

}  // namespace ssmkit::cpu

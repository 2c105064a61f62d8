// llama.cpp's quantized weight formats (DType::kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K,
// kQ6_K; the block layouts in docs/quantization.md): an f32 matrix encoded row by row as GGML's
// reference quantizers do (the bytes llama.cpp's quantizer writes without an importance matrix;
// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 bit for bit), and decoded back to f32 as GGML does (bit for bit).
// LinearForward takes a quantized weight directly; these are for making one, or for reading one as
// floats.
//
// Dimension legend: M rows, K elements per row (a multiple of the dtype's block: 32 for Q8_0,
// Q4_0, Q4_1, Q5_0 and Q5_1, 256 for the K-quants). A quantized (M, K) tensor is contiguous: M rows
// of DTypeRowBytes(dtype, K) bytes.
#pragma once

#include <string>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// q = x encoded. x: (M, K) f32 contiguous; q: (M, K) of a quantized dtype. Rows are split over
// the library's threads; each row's bytes do not depend on the thread count.
Status QuantizeWeight(const Tensor& x, const Tensor& q);

// x = q decoded. q: (M, K) of a quantized dtype; x: (M, K) f32 contiguous.
Status DequantizeWeight(const Tensor& q, const Tensor& x);

// The dtype whose DTypeName is `name` ("q4_k", "bf16", ...); false when there is none.
bool DTypeFromName(const std::string& name, DType* dtype);

}  // namespace ssmkit

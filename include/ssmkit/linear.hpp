// A linear layer with PyTorch's nn.Linear semantics (F.linear): the matrix product that every
// Mamba projection (in_proj, x_proj, dt_proj, out_proj) and the LM head is made of.
//
// Dimension legend: T rows (tokens: batch * length), K input features, M output features.
//
//   out[t, m] = sum_k x[t, k] * W[m, k] + bias[m]
//
// W keeps the checkpoint's layout (M, K) and dtype (f32, bf16 or f16) and is widened to f32 as
// it is read; x, out and the accumulation are f32. W may also be in one of llama.cpp's block
// formats (DType::kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K; K a multiple of the
// block; rows of DTypeRowBytes(dtype, K) bytes): then the few-rows kernel quantizes x to 8
// bits per element (a scale per block, as llama.cpp does) and multiplies integers, and the
// many-rows path decodes panels of W to f32 for sgemm (docs/quantization.md). x and out may each
// be stored feature-major (strides (1, ld): the transpose of a (K, T) or (M, T) buffer), which
// lets the Mamba-1 block go between its (B*L, features) and (B, features, L) layouts without a
// copy.
//
// Few rows (T <= kLinearGemvMaxRows, both row-major: decode batches) run a SIMD kernel that reads
// W from memory once for all rows: bandwidth-bound at one row, a register-tiled small matrix
// product at more (for T >= 2 a row's result does not depend on the other rows); more rows
// (prefill) run OpenBLAS's sgemm over panels of W (bf16/f16 panels widened to f32 first). Rows of W
// are split over threads, each output element summed by one thread in a fixed order: the same
// inputs and thread count give the same bits. No heap allocation once warm (per-thread panel
// buffers are kept between calls).
//
// On the GPU (every tensor a CUDA one; forward only) it is one cuBLAS GEMM with f32 accumulation:
// W bf16 or f16, x in W's dtype, out f32 or W's dtype, both row-major; f32 and quantized weights
// are Unsupported there (the engine uploads its matrices as bf16: docs/cuda.md).
//
// The backward (F.linear's): dx = dout W, dW = dout^T x, dbias = sum over rows of dout, each an
// OpenBLAS sgemm (or a sum) split over threads by output rows, each output element computed by
// one thread: deterministic for a thread count.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

inline constexpr int64_t kLinearGemvMaxRows = 64;

struct LinearInputs {
  Tensor x;       // (T, K) f32 (on CUDA: the weight's dtype); strides (ldx, 1) or (1, ldx)
  Tensor weight;  // (M, K) f32 | bf16 | f16 | a quantized dtype (q8_0, q5_0, q4_k, ...), contiguous
  Tensor bias;    // optional (M) f32
};

// out: (T, M) f32 (on CUDA: f32 or the weight's dtype), strides (ldo, 1) or (1, ldo); must not
// overlap x.
Status LinearForward(const LinearInputs& inputs, const Tensor& out);

// Opt-in bf16 products (off by default): with a bf16 W, two or more rows of x (prefill and
// decode batches) and x row-major, x is rounded to bf16 and each product of two bf16 elements
// (exact in f32) is summed in f32 by AVX-512 BF16's vdpbf16ps, as llama.cpp and PyTorch's bf16
// matmuls do: about twice the f32 kernels' multiply-adds per second, x's rounding (relative
// 2^-9 per element) in the result. On a CPU with AMX's bf16 tiles (Sapphire Rapids and later
// Xeons), 2 or more rows of x take them instead, 64 at a time, in either layout of x and out and
// for any K: several times the multiply-adds again, W read as it lies (windows such as the policy
// network's, decode batches, prefill). One row of x (batch-1 decode, bound by W's bytes)
// keeps x in f32. A quantized W's prefill (more than kLinearGemvMaxRows rows, out row-major) takes
// the same kernel on its panels decoded and rounded to bf16; its decode keeps the 8-bit kernels. A
// process-wide setting like the thread count; its default is the environment variable
// SSMKIT_BF16_PRODUCTS=1. Returns whether the products are now in use: false where the CPU lacks
// AVX-512 BF16 (then nothing changes).
bool SetBf16Products(bool enable);
bool Bf16Products();

// Gradients of LinearForward, each optional (absent: not computed), overwritten.
struct LinearGrads {
  Tensor dx;       // (T, K) f32; strides (ld, 1) or (1, ld), like x
  Tensor dweight;  // (M, K) f32, row-major contiguous
  Tensor dbias;    // (M) f32; only when bias is given
};

// dout: (T, M) f32, strides (ld, 1) or (1, ld). The weight must be f32 here (not quantized). No
// gradient may overlap an input or another gradient.
Status LinearBackward(const LinearInputs& inputs, const Tensor& dout, const LinearGrads& grads);

}  // namespace ssmkit

// The resolved, checked arguments of LinearForward, handed to a backend.
// Dimension legend: T rows, K input features, M output features.
// x[t, k] is at x[t * x_stride_row + k * x_stride_feature] (one of the two strides is 1), out
// likewise; W is (M, K) row-major, contiguous unless weight_row_stride says otherwise.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit {

struct LinearParams {
  int64_t rows = 0;          // T
  int64_t in_features = 0;   // K
  int64_t out_features = 0;  // M
  const float* x = nullptr;  // (T, K)
  int64_t x_stride_row = 0, x_stride_feature = 1;
  const void* weight = nullptr;  // (M, K)
  DType weight_dtype = DType::kF32;
  // W[m, k] at weight + m * weight_row_stride + k when nonzero: K columns of a wider matrix
  // (the Mamba-1 mixer's products over one group of channels). Only AMX's bf16 tiles take it
  // (cpu::TakesAmxTiles); the public op never sets it.
  int64_t weight_row_stride = 0;
  const float* bias = nullptr;  // optional (M)
  float* out = nullptr;         // (T, M)
  int64_t out_stride_row = 0, out_stride_feature = 1;

  bool x_row_major() const { return x_stride_feature == 1; }
  bool out_row_major() const { return out_stride_feature == 1; }
};

// LinearBackward's: the forward's inputs (out unused, weight f32) plus dout and the gradients,
// laid out like x and out (dx like x, dout like out); absent gradients are nullptr.
struct LinearBackwardParams : LinearParams {
  const float* dout = nullptr;  // (T, M)
  int64_t dout_stride_row = 0, dout_stride_feature = 1;
  float* dx = nullptr;  // optional (T, K)
  int64_t dx_stride_row = 0, dx_stride_feature = 1;
  float* dweight = nullptr;  // optional (M, K), row-major contiguous
  float* dbias = nullptr;    // optional (M)
};

// LinearForward's on CUDA (cuBLAS): x and the weight in one 16-bit dtype, out in f32 or that
// dtype, both row-major.
struct LinearCudaParams {
  int64_t rows = 0;            // T
  int64_t in_features = 0;     // K
  int64_t out_features = 0;    // M
  DType dtype = DType::kBF16;  // of x and the weight: bf16 | f16
  const void* x = nullptr;     // (T, K), row stride x_stride_row
  int64_t x_stride_row = 0;
  const void* weight = nullptr;   // (M, K) contiguous
  const float* bias = nullptr;    // optional (M)
  void* out = nullptr;            // (T, M), row stride out_stride_row
  DType out_dtype = DType::kF32;  // f32 or `dtype`
  int64_t out_stride_row = 0;
};

}  // namespace ssmkit

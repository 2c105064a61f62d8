// The resolved, checked arguments of the RMS norms, handed to a backend: pointers, dtypes and
// int64 row strides. One struct serves both public ops (include/ssmkit/norm.hpp):
//   gated RMSNorm:    residual absent, z optional, any group size S
//   add + RMSNorm:    residual optional, residual_out present, no z, S = E
// Dimension legend: M rows, E features, G groups of S features.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit {

// An (M, E) operand with contiguous features: element (m, e) at data[m * stride_row + e].
struct RowsView {
  void* data = nullptr;  // nullptr: absent
  DType dtype = DType::kF32;
  int64_t stride_row = 0;
};

struct NormParams {
  int64_t rows = 0;        // M
  int64_t features = 0;    // E
  int64_t group_size = 0;  // S, dividing E (resolved: never 0)
  float eps = 1e-6f;
  bool norm_before_gate = true;
  RowsView x;                     // (M, E) f32 | bf16
  RowsView residual;              // optional (M, E) f32, added to x before the norm
  RowsView z;                     // optional (M, E) f32 | bf16, the gate
  const float* weight = nullptr;  // (E)
  const float* bias = nullptr;    // optional (E)
  RowsView out;                   // (M, E), x's dtype
  RowsView residual_out;          // optional (M, E) f32: x + residual
};

struct NormBwdParams : NormParams {
  RowsView dout;             // (M, E), x's dtype
  RowsView dresidual_out;    // optional (M, E) f32, added to the gradient of x + residual
  RowsView dx;               // optional (M, E), x's dtype
  RowsView dz;               // optional (M, E), z's dtype
  RowsView dresidual;        // optional (M, E) f32
  float* dweight = nullptr;  // optional (E)
  float* dbias = nullptr;    // optional (E)
};

}  // namespace ssmkit

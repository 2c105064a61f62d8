// RMS normalisation, forward and backward, with mamba_ssm's semantics:
//
// 1. Gated RMSNorm, mamba_ssm's rmsnorm_fn (ops/triton/layernorm_gated.py), used inside a
//    Mamba-2 block. Dimension legend: M rows (batch * length), E features, G groups of
//    S = group_size features (G * S = E; row m, feature e is in group e / S).
//
//      x'[m,e]   = x[m,e] * silu(z[m,e])          when z is given and !norm_before_gate
//                = x[m,e]                         otherwise
//      rstd[m,g] = 1 / sqrt(mean_{e in g} x'[m,e]^2 + eps)
//      y[m,e]    = x'[m,e] * rstd[m,g(e)] * weight[e] + bias[e]
//      out[m,e]  = y[m,e] * silu(z[m,e])          when z is given and norm_before_gate
//                = y[m,e]                         otherwise
//
// 2. Residual add + RMSNorm, mamba_ssm's rms_norm_fn(x, weight, bias, residual=...,
//    prenorm=True, residual_in_fp32=True), between Mamba blocks:
//
//      residual_out[m,e] = x[m,e] + residual[m,e]      (f32; residual absent = zeros)
//      out[m,e]          = residual_out[m,e] * rstd[m] * weight[e] + bias[e],
//      rstd[m]           = 1 / sqrt(mean_e residual_out[m,e]^2 + eps)
//
// Accumulation is f32 whatever the storage dtype. Rows may be strided (row stride > E);
// the feature dimension is contiguous. Outputs need row stride >= E (rows must not overlap);
// an output may alias an input exactly (same data and row stride), e.g. out = x, or
// residual_out = residual for an in-place residual stream. docs/ops/norm.md has the details.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

struct RmsNormInputs {
  Tensor x;       // (M, E) f32 | bf16
  Tensor weight;  // (E) f32
  Tensor bias;    // optional (E) f32
  Tensor z;       // optional (M, E) f32 | bf16: the gate
};

struct RmsNormOptions {
  float eps = 1e-6f;             // > 0 and finite
  int64_t group_size = 0;        // S, dividing E; 0 means E (one group per row)
  bool norm_before_gate = true;  // with z: gate the normalised output (true) or the input
};

// out: (M, E), the dtype of x.
Status RmsNormForward(const RmsNormInputs& inputs, const Tensor& out,
                      const RmsNormOptions& options = {});

// Gradient outputs, each overwritten (not accumulated), each with its input's shape and dtype.
// Any may be left undefined when not wanted; one for an absent optional input must be.
struct RmsNormGrads {
  Tensor dx, dweight, dbias, dz;
};

// dout: (M, E), the dtype of x. dweight and dbias are sums over rows, reduced in a fixed
// order: the same inputs and thread count give the same bits.
Status RmsNormBackward(const RmsNormInputs& inputs, const Tensor& dout, const RmsNormGrads& grads,
                       const RmsNormOptions& options = {});

struct AddRmsNormInputs {
  Tensor x;         // (M, E) f32 | bf16: the block's output
  Tensor residual;  // optional (M, E) f32: the residual stream so far (absent in layer 0)
  Tensor weight;    // (E) f32
  Tensor bias;      // optional (E) f32
};

struct AddRmsNormOptions {
  float eps = 1e-6f;  // > 0 and finite
};

// out: (M, E), the dtype of x. residual_out: (M, E) f32, x + residual.
Status AddRmsNormForward(const AddRmsNormInputs& inputs, const Tensor& out,
                         const Tensor& residual_out, const AddRmsNormOptions& options = {});

struct AddRmsNormGrads {
  Tensor dx, dresidual, dweight, dbias;
};

// dout: (M, E), the dtype of x. dresidual_out: optional (M, E) f32, the gradient reaching
// residual_out from later layers through the residual stream (absent = zeros). Since
// residual_out = x + residual, dx and dresidual hold the same values (in x's dtype and in
// f32): dnorm + dresidual_out, dnorm the gradient through the normalisation. The backward
// recomputes residual_out from x and residual (bitwise as in the forward).
Status AddRmsNormBackward(const AddRmsNormInputs& inputs, const Tensor& dout,
                          const Tensor& dresidual_out, const AddRmsNormGrads& grads,
                          const AddRmsNormOptions& options = {});

}  // namespace ssmkit

// Rotary position embeddings (RoPE) as transformers applies them to q and k before attention,
// forward and backward.
//
// Dimension legend: B batch, L length, H heads (of q), Hk heads (of k), E head dim, R the
// rotated dims (rotary_dim: even, <= E; transformers' int(head_dim * partial_rotary_factor)).
//
// Frequencies, in f32 exactly as transformers' default rope computes its inv_freq:
//   inv_freq[f] = 1 / theta^((2f) / R),  f in [0, R/2)          (float32 throughout)
// or the caller's inv_freq tensor (rope_scaling types, computed the way transformers does).
// For a token at position p (its position id) the angle of pair f is a_f = float32(inv_freq[f]
// * p), and c_f = cos(a_f) * attention_scaling, s_f = sin(a_f) * attention_scaling.
// The first R dims of every head are rotated pairwise, the other E - R pass through:
//   kHalf        (HF's rotate_half, the "NeoX" layout): pair (f, f + R/2)
//   kInterleaved (GPT-J's rotate_every_two):            pair (2f, 2f + 1)
// and for a pair (x0, x1):  x0' = x0 c_f - x1 s_f,  x1' = x1 c_f + x0 s_f.
// The backward rotates by the negative angle (the rotation is orthogonal): dx = R(-a) dx'.
//
// Storage: f32 | bf16, last dim contiguous, other strides free; the math is f32 and a bf16
// output is rounded once (transformers rounds q*cos, rotate_half(q)*sin and their sum to bf16
// separately; docs/ops/rope.md). An output may be its input itself (same data and strides:
// in place); a partial overlap is not allowed.
//
// "nope" attention layers (no position embedding) simply do not call this.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

enum class RopeLayout : int {
  kHalf = 0,         // pairs (f, f + R/2): transformers' rotate_half, what HF checkpoints use
  kInterleaved = 1,  // pairs (2f, 2f + 1): GPT-J / Meta's original layout
};

struct RopeOptions {
  double theta = 10000.0;  // rope_theta (> 0), rounded to f32 as transformers does
  int64_t rotary_dim = 0;  // R: even, 2 <= R <= E; 0 means E
  RopeLayout layout = RopeLayout::kHalf;
  float attention_scaling = 1.0f;  // multiplies cos and sin (transformers' attention_scaling)
};

// One or both of q and k (at least one). positions: any i32 values (a left-pad token's
// position id may be negative; it rotates by a negative angle).
struct RopeInputs {
  Tensor q;          // optional (B, L, H, E) f32 | bf16
  Tensor k;          // optional (B, L, Hk, E) f32 | bf16
  Tensor positions;  // (B, L) i32: the position id of each token
  Tensor inv_freq;   // optional (R/2) f32: replaces the theta frequencies
};

// q_out: q's shape, f32 | bf16 (defined exactly when q is); k_out likewise for k.
Status RopeForward(const RopeInputs& inputs, const Tensor& q_out, const Tensor& k_out,
                   const RopeOptions& options = {});

// The backward: pass the gradients reaching q_out and k_out as inputs.q and inputs.k (same
// positions, inv_freq and options as the forward); dq and dk receive the gradients of q and k
// (dq defined exactly when inputs.q is, likewise dk). In place is allowed here too.
Status RopeBackward(const RopeInputs& inputs, const Tensor& dq, const Tensor& dk,
                    const RopeOptions& options = {});

}  // namespace ssmkit

// The Mamba-1 mixer (mamba_ssm's Mamba, transformers' MambaMixer) over a prefill and one decode
// step, composed from the public ops. Parameters come in a Mamba1Layer, activations in explicit
// buffers the caller owns (so a training pass can keep them), the recurrent state in the
// cache's views.
// Dimension legend: B batch, L length, T = B * L tokens, d d_model, D d_inner, N state size,
// R dt_rank, K conv width.
//
//   (x, z) = in_proj(h);  x = silu(conv1d(x));  (dt_in, B, C) = x_proj(x);  dt = dt_proj(dt_in)
//   y = selective_scan(x, dt, A, B, C, D, z, delta_bias = dt_proj.bias, softplus);  out_proj(y)
#pragma once

#include <cstdint>

#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Prefill activations, channel-major: column t = b * L + l of each (features, T) buffer, the
// layout the conv and scan ops read as (B, features, L) without a copy.
struct Mamba1PrefillActs {
  float* xz;     // (2D, T): rows [x (D), z (D)], in_proj's output
  float* xc;     // (D, T): silu(conv1d(x))
  float* xdbl;   // (R + 2N, T): rows [dt_in (R), B (N), C (N)]
  float* delta;  // (D, T): dt_proj(dt_in), before bias and softplus
  float* y;      // (D, T): the scan's gated output
};
int64_t Mamba1PrefillFloats(const ModelConfig& c, int64_t T);
Mamba1PrefillActs CarveMamba1Prefill(const ModelConfig& c, int64_t T, float* base);

// Decode activations, token-major (B, features).
struct Mamba1DecodeActs {
  float* xz;    // (B, 2D): [x (D), z (D)]; x is convolved in place
  float* xdbl;  // (B, R + 2N)
  float* dt;    // (B, D)
  float* y;     // (B, D)
};
int64_t Mamba1DecodeFloats(const ModelConfig& c, int64_t B);
Mamba1DecodeActs CarveMamba1Decode(const ModelConfig& c, int64_t B, float* base);

// B sequences of L tokens from a fresh state, sequence b left-padded by pad[b] positions that
// are masked out (zero conv input and scan input, so they leave the state at zero).
// normed: (T, d) the normalised hidden states. Writes out (T, d) and the final states.
// conv_state: (B, D, K - 1), ssm_state: (B, D, N).
Status Mamba1MixerPrefill(const ModelConfig& c, const Mamba1Layer& w, int64_t B, int64_t L,
                          const int64_t* pad, const float* normed, const Mamba1PrefillActs& a,
                          const Tensor& conv_state, const Tensor& ssm_state, float* out);

// One token per sequence: normed (B, d) -> out (B, d), the states advanced in place.
Status Mamba1MixerDecode(const ModelConfig& c, const Mamba1Layer& w, int64_t B, const float* normed,
                         const Mamba1DecodeActs& a, const Tensor& conv_state,
                         const Tensor& ssm_state, float* out);

}  // namespace ssmkit::model

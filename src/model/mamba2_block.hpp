// The Mamba-2 mixer (mamba_ssm's Mamba2, transformers' Mamba2Mixer) over a prefill and one
// decode step, composed from the public ops. Parameters in a Mamba2Layer, activations in
// explicit caller-owned buffers, the recurrent state in the cache's views.
// Dimension legend: B batch, L length, T = B * L tokens, d d_model, D d_inner = H * P,
// H heads, P head dim, G groups, N state size, C = D + 2 G N conv channels, K conv width,
// I = 2 D + 2 G N + H in_proj outputs.
//
//   (z, xBC, dt) = in_proj(h);  xBC = silu(conv1d(xBC));  (x, B, C) = xBC
//   y = ssd(x, dt, A, B, C, D, dt_bias, softplus, dt_limit)
//   y = rmsnorm_gated(y, z)  (per group of D / G channels, x * silu(z) before the norm:
//                             mamba_ssm's RMSNormGated(group_size = D / G, norm_before_gate=False))
//   out_proj(y)
#pragma once

#include <cstdint>

#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

struct Mamba2PrefillActs {
  float* zxbcdt;  // (T, I): in_proj's output, rows of [z (D), xBC (C), dt (H)]
  float* xbc_t;   // (C, T): xBC channel-major, the conv's input
  float* conv_t;  // (C, T): silu(conv1d(xBC)), channel-major
  float* xbc;     // (T, C): the same, token-major: [x (D), B (G N), C (G N)] per token
  float* y;       // (T, D): the SSD output
  float* yn;      // (T, D): the gated norm's output
};
int64_t Mamba2PrefillFloats(const ModelConfig& c, int64_t T);
Mamba2PrefillActs CarveMamba2Prefill(const ModelConfig& c, int64_t T, float* base);

struct Mamba2DecodeActs {
  float* zxbcdt;  // (B, I); xBC is convolved in place
  float* dt;      // (B, H): dt after softplus and the limit (only with a non-default limit)
  float* y;       // (B, D)
  float* yn;      // (B, D)
};
int64_t Mamba2DecodeFloats(const ModelConfig& c, int64_t B);
Mamba2DecodeActs CarveMamba2Decode(const ModelConfig& c, int64_t B, float* base);

// B sequences of L tokens from a fresh state, sequence b left-padded by pad[b] masked
// positions. normed (T, d) -> out (T, d). conv_state (B, C, K - 1), ssm_state (B, H, P, N).
Status Mamba2MixerPrefill(const ModelConfig& c, const Mamba2Layer& w, int64_t B, int64_t L,
                          const int64_t* pad, const float* normed, const Mamba2PrefillActs& a,
                          const Tensor& conv_state, const Tensor& ssm_state, float* out);

// One token per sequence: normed (B, d) -> out (B, d), the states advanced in place.
Status Mamba2MixerDecode(const ModelConfig& c, const Mamba2Layer& w, int64_t B, const float* normed,
                         const Mamba2DecodeActs& a, const Tensor& conv_state,
                         const Tensor& ssm_state, float* out);

}  // namespace ssmkit::model

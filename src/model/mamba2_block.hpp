// The Mamba-2 mixer (mamba_ssm's Mamba2, transformers' Mamba2Mixer and the hybrids' copies of
// it) over the sequences of one forward pass, composed from the public ops. Parameters in
// Mamba2Weights, activations in explicit caller-owned buffers, the recurrent states in the
// session's cache.
// Dimension legend: n sequences, T tokens (packed), d d_model, D d_inner = H * P, H heads,
// P head dim, G groups, N state size, C = D + 2 G N conv channels, K conv width,
// I = 2 D + 2 G N + H in_proj outputs.
//
//   (z, xBC, dt) = in_proj(h)  (Falcon-H1: times its muP vector)
//   xBC = silu(conv1d(xBC));  (x, B, C) = xBC
//   y = ssd(x, dt, A, B, C, D, dt_bias, softplus, dt_limit)
//   y = rmsnorm_gated(y, z)  (per group of D / G channels, x * silu(z) before the norm:
//                             mamba_ssm's RMSNormGated(group_size = D / G, norm_before_gate=False);
//                             Falcon-H1: the gate after the norm, or y * silu(z) and no norm)
//   out_proj(y)
#pragma once

#include <cstdint>

#include "model/cache.hpp"
#include "model/seq_batch.hpp"
#include "model/views.hpp"
#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Whether the config's time_step_limit acts: the default (0, inf) never does after a softplus;
// another one is applied by the model at decode (on the host), since selective_state_update
// has no limit (as in mamba_ssm).
bool HasDtLimit(const ModelConfig& c);

struct Mamba2PrefillActs {
  float* zxbcdt;  // (T, I): in_proj's output, rows of [z (D), xBC (C), dt (H)]
  float* xbc_t;   // (C, T): xBC channel-major, the conv's input
  float* conv_t;  // (C, T): silu(conv1d(xBC)), channel-major
  float* xbc;     // (T, C): the same, token-major: [x (D), B (G N), C (G N)] per token
  float* y;       // (T, D): the SSD output
  float* yn;      // (T, D): the gated norm's output
  float* state;   // one slot's conv or SSM state: a chunk's initial state
};
int64_t Mamba2PrefillFloats(const ModelConfig& c, int64_t T);
Mamba2PrefillActs CarveMamba2Prefill(const ModelConfig& c, int64_t T, float* base);

// Decode activations, in the dtype and on the device of the buffer they are carved from (f32 on
// the CPU, bf16 on the GPU).
struct Mamba2DecodeActs {
  ActBuffer zxbcdt;  // (n, I); xBC is convolved in place
  ActBuffer dt;      // (n, H): dt after softplus and the limit (a non-default limit; CPU only)
  ActBuffer y;       // (n, D)
  ActBuffer yn;      // (n, D)
  ActBuffer conv;    // (n, C, K - 1): conv states gathered from scattered slots (CPU only)
};
int64_t Mamba2DecodeFloats(const ModelConfig& c, int64_t n);  // elements of the buffer
Mamba2DecodeActs CarveMamba2Decode(const ModelConfig& c, int64_t n, ActBuffer base);

// normed (T, d) -> out (T, d); the slots' states in block `state`'s rows of the cache are
// continued (prefill, f32 on the CPU) or advanced one step (decode: on the device and in the
// dtype of the buffers, the cache on the same device).
Status Mamba2MixerPrefill(const ModelConfig& c, const Mamba2Weights& w, const SeqBatch& batch,
                          const float* normed, const Mamba2PrefillActs& a, const StateCache& cache,
                          int64_t state, float* out);
Status Mamba2MixerDecode(const ModelConfig& c, const Mamba2Weights& w, const SeqBatch& batch,
                         ActBuffer normed, const Mamba2DecodeActs& a, const StateCache& cache,
                         int64_t state, ActBuffer out);

}  // namespace ssmkit::model

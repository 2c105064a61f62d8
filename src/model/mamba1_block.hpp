// The Mamba-1 mixer (mamba_ssm's Mamba, transformers' MambaMixer; JambaMambaMixer with its
// RMSNorms on dt_in, B and C) over the sequences of one forward pass, composed from the public
// ops. Parameters come in Mamba1Weights, activations in explicit buffers the caller owns (so a
// training pass can keep them), the recurrent states in the session's cache.
// Dimension legend: n sequences, T tokens (all sequences, packed), d d_model, D d_inner,
// N state size, R dt_rank, K conv width, E = R + 2N.
//
//   (x, z) = in_proj(h);  x = silu(conv1d(x));  (dt_in, B, C) = x_proj(x)
//   (Jamba: dt_in, B, C = RMSNorm each);  dt = dt_proj(dt_in)
//   y = selective_scan(x, dt, A, B, C, D, z, delta_bias = dt_proj.bias, softplus);  out_proj(y)
#pragma once

#include <cstdint>

#include "model/cache.hpp"
#include "model/seq_batch.hpp"
#include "model/views.hpp"
#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Prefill activations, channel-major: column t of each (features, T) buffer is token t, the
// layout the conv and scan ops read as (1, features, L) per sequence without a copy.
struct Mamba1PrefillActs {
  float* xz;         // (2D, T): rows [x (D), z (D)], in_proj's output
  float* xc;         // (D, T): silu(conv1d(x))
  float* xdbl;       // (E, T): rows [dt_in (R), B (N), C (N)]
  float* xdbl_rows;  // (T, E): x_proj's output token-major, normalised there (Jamba only)
  float* delta;      // (D, T): dt_proj(dt_in), before bias and softplus
  float* y;          // (D, T): the scan's gated output
  float* state;      // one slot's conv or SSM state: a chunk's initial state
};
int64_t Mamba1PrefillFloats(const ModelConfig& c, int64_t T);
Mamba1PrefillActs CarveMamba1Prefill(const ModelConfig& c, int64_t T, float* base);

// Decode activations, token-major (n, features), in the dtype and on the device of the buffer
// they are carved from (f32 on the CPU, bf16 on the GPU).
struct Mamba1DecodeActs {
  ActBuffer xz;    // (n, 2D): [x (D), z (D)]; x is convolved in place
  ActBuffer xdbl;  // (n, E)
  ActBuffer dt;    // (n, D)
  ActBuffer y;     // (n, D)
  ActBuffer conv;  // (n, D, K - 1): conv states gathered from scattered slots (CPU only)
};
int64_t Mamba1DecodeFloats(const ModelConfig& c, int64_t n);  // elements of the buffer
Mamba1DecodeActs CarveMamba1Decode(const ModelConfig& c, int64_t n, ActBuffer base);

// normed: (T, d) the normalised hidden states -> out (T, d); the slots' states in block
// `state`'s rows of the cache are continued (prefill, f32 on the CPU) or advanced one step
// (decode: on the device and in the dtype of the buffers, the cache on the same device).
Status Mamba1MixerPrefill(const ModelConfig& c, const Mamba1Weights& w, const SeqBatch& batch,
                          const float* normed, const Mamba1PrefillActs& a, const StateCache& cache,
                          int64_t state, float* out);
Status Mamba1MixerDecode(const ModelConfig& c, const Mamba1Weights& w, const SeqBatch& batch,
                         ActBuffer normed, const Mamba1DecodeActs& a, const StateCache& cache,
                         int64_t state, ActBuffer out);

}  // namespace ssmkit::model

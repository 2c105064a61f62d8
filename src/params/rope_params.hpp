// The resolved, checked arguments of rotary position embeddings (include/ssmkit/rope.hpp),
// handed to a backend. Dimension legend: B batch, L length, H heads (of q or k), E head dim,
// R rotated dims.
#pragma once

#include <cstdint>

#include "params/attention_params.hpp"

namespace ssmkit {

struct RopeParams {
  int64_t batch = 0, len = 0, head_dim = 0, rotary_dim = 0;  // B, L, E, R
  bool interleaved = false;  // pairs (2f, 2f + 1), else (f, f + R/2)
  bool backward = false;     // rotate by the negative angle
  float attention_scaling = 1.0f;
  const int32_t* positions = nullptr;  // (B, L)
  int64_t positions_stride_batch = 0, positions_stride_seq = 0;
  const float* inv_freq = nullptr;  // (R/2): the caller's, or computed from theta
  // q then k; either may be absent (in.data == nullptr). out may be in itself.
  struct Part {
    HeadsSeqView in, out;  // (B, L, H, E)
    int64_t heads = 0;
  } parts[2];
};

}  // namespace ssmkit

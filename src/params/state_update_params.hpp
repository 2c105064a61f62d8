// The resolved, checked arguments of selective_state_update, handed to a backend. Both forms
// are one layout, (B, H, P, N): Mamba-1's (B, D, N) is H = D heads of head dim P = 1, with
// A (D, N) one value per state element and dt (B, D) one per head; Mamba-2 has A (H), one
// value per head. Pointers, dtypes and int64 strides; every last dimension is contiguous.
// Dimension legend: B batch, Bs the state's batch, H heads, P head dim, N state size,
// G groups of B/C.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit {

// A (B, H, P) operand (x, z, out) or (B, H) (dt): element (b, h, p) at
// data[b * stride_batch + h * stride_head + p].
struct HeadsView {
  void* data = nullptr;  // nullptr: absent
  DType dtype = DType::kF32;
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
};

// B or C, (B, G, N): element (b, g, n) at data[b * stride_batch + g * stride_group + n].
struct GroupsView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t groups = 1;
  int64_t stride_batch = 0;
  int64_t stride_group = 0;
};

// An f32 per-head operand: A (H, N) or (H), D (H) or (H, P), dt_bias (H):
// element (h, i) at data[h * stride_head + i * stride_inner].
struct HeadParamView {
  const float* data = nullptr;  // nullptr: absent
  int64_t stride_head = 0;
  int64_t stride_inner = 0;  // 0: one value per head
};

struct StateUpdateParams {
  int64_t batch = 0;        // B
  int64_t state_batch = 0;  // Bs
  int64_t heads = 0;        // H (Mamba-1: D)
  int64_t headdim = 0;      // P (Mamba-1: 1)
  int64_t dstate = 0;       // N
  bool dt_softplus = false;
  bool a_per_state = false;  // Mamba-1: A (H, N), decay per state element; Mamba-2: A (H)
  HeadsView x, z, out;       // (B, H, P)
  HeadsView dt;              // (B, H)
  GroupsView B, C;           // (B, G, N)
  HeadParamView A;           // (H, N) (stride_inner 1) or (H) (stride_inner 0)
  HeadParamView D;           // optional (H) or (H, P)
  HeadParamView dt_bias;     // optional (H)
  float* state = nullptr;    // (Bs, H, P, N)
  int64_t state_stride_batch = 0, state_stride_head = 0, state_stride_p = 0;
  const int32_t* state_batch_indices = nullptr;  // optional (B); negative = skip
  int64_t indices_stride = 0;
};

// Head h's group in a B/C view: h / (H / G).
inline int64_t HeadGroup(const GroupsView& v, int64_t h, int64_t heads) {
  return h / (heads / v.groups);
}

}  // namespace ssmkit

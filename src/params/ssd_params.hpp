// The resolved, checked arguments of the SSD scan, handed to a backend: pointers, dtypes and
// int64 strides in elements, nothing framework-specific. The backward params extend the
// forward ones.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size.
#pragma once

#include <cstdint>

#include "params/varlen_params.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// A (B, L, K, M)-shaped operand with a contiguous last dimension: x, z, out (K = H, M = P),
// B and C (K = G, M = N), and their gradients. Element (b, l, k, m) lives at
// b*stride_batch + l*stride_seq + k*stride_head + m.
struct SsdSeqView {
  void* data = nullptr;  // nullptr: absent
  DType dtype = DType::kF32;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;
  int64_t Offset(int64_t b, int64_t l, int64_t k) const {
    return b * stride_batch + l * stride_seq + k * stride_head;
  }
};

// dt and ddt: (B, L, H), element (b, l, h) at b*stride_batch + l*stride_seq + h.
struct SsdDtView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t stride_batch = 0, stride_seq = 0;
};

// The (B, H, P, N) f32 states: initial_states, final_states and their gradients.
struct SsdStateView {
  float* data = nullptr;
  int64_t stride_batch = 0, stride_head = 0, stride_p = 0;
};

// A per-head f32 operand: A, dt_bias, D and their gradients. D may be (H) (stride_p = 0) or
// (H, P). Element (h, p) at h*stride_head + p*stride_p.
struct SsdHeadView {
  float* data = nullptr;
  int64_t stride_head = 0, stride_p = 0;
};

struct SsdParams {
  int64_t batch = 0, seqlen = 0, nheads = 0, headdim = 0, ngroups = 0, dstate = 0;
  int64_t chunk_size = 0;  // Q, resolved (>= 1)
  bool dt_softplus = false;
  float dt_min = 0.0f, dt_max = 0.0f;
  SsdSeqView x;                      // (B, L, H, P)
  SsdDtView dt;                      // (B, L, H)
  SsdHeadView A;                     // (H)
  SsdSeqView B, C;                   // (B, L, G, N)
  SsdHeadView D;                     // (H) or (H, P); absent: data == nullptr
  bool d_per_channel = false;        // D (and dD) is (H, P)
  SsdSeqView z;                      // (B, L, H, P)
  SsdHeadView dt_bias;               // (H)
  SsdStateView initial_states;       // (B, H, P, N)
  const int32_t* seq_idx = nullptr;  // (B, L)
  int64_t seq_idx_stride_batch = 0, seq_idx_stride_seq = 0;
  SsdSeqView out;             // (B, L, H, P)
  SsdStateView final_states;  // (B, H, P, N)
  // cu_seqlens (batch 1): the CPU backend runs each sequence on its own (cpu/ssd_varlen.cpp).
  CuSeqlensView cu_seqlens;                  // (S + 1)
  bool initial_states_per_sequence = false;  // initial_states (and its gradient) is (S, H, P, N)
  SsdStateView varlen_states;                // (S, H, P, N) output: each sequence's last state

  int64_t heads_per_group() const { return nheads / ngroups; }
};

struct SsdBwdParams : SsdParams {
  SsdSeqView dout;             // (B, L, H, P)
  SsdStateView dfinal_states;  // (B, H, P, N)
  SsdSeqView dx, dz;           // (B, L, H, P)
  SsdDtView ddt;               // (B, L, H)
  SsdSeqView dB, dC;           // (B, L, G, N)
  SsdHeadView dA, dD, ddt_bias;
  SsdStateView dinitial_states;
  SsdStateView dvarlen_states;  // (S, H, P, N) input: the gradient reaching varlen_states
};

}  // namespace ssmkit

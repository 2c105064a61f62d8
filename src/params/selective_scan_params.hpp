// The resolved, checked arguments of the selective scan, handed to a backend (flash-attention
// style: pointers, dtypes and int64 strides, nothing framework-specific).
//
// B and C are read through one accessor for all three forms:
//   element (b, d, n, l) lives at  b*stride_batch + group(d)*stride_group + n*stride_state
//                                 + l*stride_time,   group(d) = d / (dim / groups)
//   constant (D, N):         groups = D, stride_batch = stride_time = 0
//   variable (B, N, L):      groups = 1
//   grouped  (B, G, N, L):   groups = G
#pragma once

#include <cstdint>

#include "params/varlen_params.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// A (B, D, L)-shaped operand: u, delta, z, out and their gradients. Time stride is 1.
struct SeqView {
  void* data = nullptr;  // nullptr: absent
  DType dtype = DType::kF32;
  int64_t stride_batch = 0;
  int64_t stride_dim = 0;
};

struct BCView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  bool is_variable = false;  // false: constant (D, N), the same at every step
  int64_t groups = 1;
  int64_t stride_batch = 0;
  int64_t stride_group = 0;
  int64_t stride_state = 0;
  int64_t stride_time = 0;
};

// An f32 per-channel operand: A (D, N), D (D), delta_bias (D), and the (B, D, N) states.
struct F32View {
  float* data = nullptr;  // nullptr: absent
  int64_t stride_batch = 0;
  int64_t stride_dim = 0;
  int64_t stride_state = 0;
};

// The (B, D, K, N) chunk states (ssmkit/selective_scan.hpp): entry [b, d, k] is the state
// entering step k * interval.
struct ChunkStatesView {
  float* data = nullptr;  // nullptr: absent
  int64_t interval = 0;   // Q
  int64_t stride_batch = 0;
  int64_t stride_dim = 0;
  int64_t stride_chunk = 0;
  int64_t stride_state = 0;
  // Entry k of every (b, d): itself a (B, D, N) state.
  F32View Entry(int64_t k) const {
    return {data + k * stride_chunk, stride_batch, stride_dim, stride_state};
  }
};

struct SelectiveScanParams {
  int64_t batch = 0;
  int64_t dim = 0;
  int64_t seqlen = 0;
  int64_t dstate = 0;
  bool delta_softplus = false;
  SeqView u, delta, z;
  BCView B, C;
  F32View A, D, delta_bias, initial_state;
  SeqView out;
  F32View final_state;
  ChunkStatesView chunk_states;  // written by the forward, read by the backward
  // Packed sequences: where sequence k (k >= 1) of a row starts, the state restarts from
  // entry k of seq_initial_states (cu_seqlens only; zeros when absent); initial_state stays
  // the state before position 0 (with per-sequence initial states: entry 0's view).
  SeqIdxView seq_idx;          // (B, L)
  CuSeqlensView cu_seqlens;    // (S + 1), batch 1
  F32View seq_initial_states;  // (S, D, N), indexed by sequence
  F32View varlen_states;       // (S, D, N) output: each sequence's last state
};

struct SelectiveScanBwdParams : SelectiveScanParams {
  SeqView dout;
  F32View dfinal_state;
  SeqView du, ddelta, dz;
  BCView dB, dC;
  F32View dA, dD, ddelta_bias, dinitial_state;
  F32View dvarlen_states;       // (S, D, N) input: the gradient reaching varlen_states
  F32View dseq_initial_states;  // (S, D, N) output, entries k >= 1 (entry 0: dinitial_state)
};

// The channel-group of channel d for a B/C view.
inline int64_t GroupOf(const BCView& v, int64_t d, int64_t dim) { return d / (dim / v.groups); }

}  // namespace ssmkit

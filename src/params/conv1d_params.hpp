// The resolved, checked arguments of the causal conv1d ops, handed to a backend: pointers,
// dtypes and int64 strides. Every (B, D, *) operand has a contiguous last dimension and is
// read through a SeqView (params/selective_scan_params.hpp): element (b, d, i) of `v` is at
// v.data[b * v.stride_batch + d * v.stride_dim + i].
// Dimension legend: B batch, D channels, L length, K conv width, T update steps, S state length.
#pragma once

#include <cstdint>

#include "params/selective_scan_params.hpp"
#include "params/varlen_params.hpp"

namespace ssmkit {

// A per-channel f32 operand: weight (D, K) (row d at data + d * stride_dim) or bias (D).
struct ChannelView {
  float* data = nullptr;  // nullptr: absent
  int64_t stride_dim = 0;
};

struct CausalConv1dParams {
  int64_t batch = 0, dim = 0, seqlen = 0, width = 0;
  bool silu = false;
  SeqView x;               // (B, D, L) f32 | bf16
  ChannelView weight;      // (D, K) f32
  ChannelView bias;        // optional (D) f32
  SeqView initial_states;  // optional (B, D, K-1) f32 | bf16
  SeqView out;             // (B, D, L), x's dtype
  SeqView final_states;    // optional (B, D, K-1) f32 | bf16
  SeqIdxView seq_idx;      // optional (B, L): packed sequences
};

struct CausalConv1dBwdParams : CausalConv1dParams {
  SeqView dout;             // (B, D, L), x's dtype
  SeqView dfinal_states;    // optional (B, D, K-1) f32 | bf16
  SeqView dx;               // optional (B, D, L), x's dtype
  SeqView dinitial_states;  // optional (B, D, K-1), initial_states' dtype
  ChannelView dweight;      // optional (D, K) f32
  ChannelView dbias;        // optional (D) f32
};

struct CausalConv1dUpdateParams {
  int64_t batch = 0, dim = 0, steps = 0, width = 0, state_len = 0;  // B, D, T, K, S
  bool silu = false;
  SeqView x;           // (B, D, T) f32 | bf16 ((B, D) is T = 1)
  ChannelView weight;  // (D, K) f32
  ChannelView bias;    // optional (D) f32
  SeqView conv_state;  // (B, D, S) f32, in place
  SeqView out;         // (B, D, T), x's dtype
};

}  // namespace ssmkit

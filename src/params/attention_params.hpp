// The resolved, checked arguments of attention (include/ssmkit/attention.hpp), handed to a
// backend: pointers, dtypes and int64 strides in elements. The backward params extend the
// forward ones; the paged forward is the forward with its keys and values in a block pool.
//
// Dimension legend: B batch, L query length, S key length, H query heads, Hk kv heads, E head
// dim of q and k, Ev head dim of v.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit {

// A (B, L, H, E)-shaped operand with a contiguous last dimension: q, k, v, out and their
// gradients; also a block pool (num_blocks, block_size, Hk, E), its first two dimensions in
// place of (B, L). Element (b, l, h, e) at b*stride_batch + l*stride_seq + h*stride_head + e.
struct HeadsSeqView {
  void* data = nullptr;  // nullptr: absent
  DType dtype = DType::kF32;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;
  int64_t Offset(int64_t b, int64_t l, int64_t h) const {
    return b * stride_batch + l * stride_seq + h * stride_head;
  }
};

// The keys and values of a paged cache: sequence b's token t at row t % block_size of block
// block_table[b * table_stride + t / block_size].
struct PagedKvView {
  HeadsSeqView k_blocks, v_blocks;  // (num_blocks, block_size, Hk, E | Ev)
  const int32_t* block_table = nullptr;
  int64_t table_stride = 0;
  const int32_t* seq_lens = nullptr;  // (B), contiguous or not: seq_lens_stride
  int64_t seq_lens_stride = 0;
  int64_t block_size = 0, num_blocks = 0;
};

struct AttentionParams {
  int64_t batch = 0, q_len = 0, heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  int64_t kv_len = 0;  // S (dense); the paged form reads seq_lens instead
  float scale = 0.0f;  // resolved (> 0)
  int64_t window = 0;  // 0: none
  HeadsSeqView q;      // (B, L, H, E)
  HeadsSeqView k, v;   // (B, S, Hk, E | Ev) (dense only)
  bool paged = false;
  PagedKvView cache;                  // (paged only)
  const int32_t* kv_start = nullptr;  // optional (B) (dense only)
  int64_t kv_start_stride = 0;
  HeadsSeqView out;      // (B, L, H, Ev)
  float* lse = nullptr;  // optional (B, H, L), L contiguous
  int64_t lse_stride_batch = 0, lse_stride_head = 0;

  int64_t group() const { return heads / kv_heads; }
  // Keys of sequence b (the new tokens included) and the position of its query 0.
  int64_t KeyCount(int64_t b) const {
    return paged ? cache.seq_lens[b * cache.seq_lens_stride] : kv_len;
  }
  int64_t FirstKey(int64_t b) const { return kv_start ? kv_start[b * kv_start_stride] : 0; }
};

struct AttentionBwdParams : AttentionParams {
  HeadsSeqView dout;    // (B, L, H, Ev)
  HeadsSeqView dq;      // optional (B, L, H, E)
  HeadsSeqView dk, dv;  // optional (B, S, Hk, E | Ev)
};

// PagedKvAppend: k (B, L, Hk, E) and v (B, L, Hk, Ev) into the cache at positions
// seq_lens[b] - L + i (negative: not written).
struct PagedAppendParams {
  int64_t batch = 0, new_len = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  HeadsSeqView k, v;
  PagedKvView cache;
};

}  // namespace ssmkit

// Causal softmax attention with grouped-query heads: a dense form for prefill and training
// (forward and backward, the flash-attention way: tiled, online softmax, the scores never held
// in full) and a paged-KV-cache form for decode and chunked prefill (forward only).
//
// Dimension legend: B batch, L query length, S key length (S >= L), H query heads, Hk key/value
// heads (H % Hk == 0; query head h reads kv head h / (H / Hk)), E head dim of q and k, Ev head
// dim of v (may differ from E).
//
// Dense: query i of sequence b sits at position pos_i = S - L + i (L = S: self-attention over a
// prompt; L < S: a chunk continuing a prefix whose keys and values are the first S - L rows of
// k and v). Key j is visible to query i when
//   j <= pos_i                                   (causal)
//   pos_i - j < window            if window > 0  (sliding window, configs' sliding_window)
//   j >= kv_start[b]              if kv_start    (left padding: keys before it are pad tokens)
// and, with s_ij = scale * (q[b,i,h,:] . k[b,j,h/(H/Hk),:]) over the visible keys,
//   out[b,i,h,:] = sum_j softmax_j(s_ij) v[b,j,h/(H/Hk),:]
//   lse[b,h,i]   = log sum_j exp(s_ij)           (natural log, scale included: flash-attn's
//                                                 softmax_lse)
// A query row with no visible key (e.g. a left-pad row, i < kv_start[b] - (S - L)) gets
// out = 0 and lse = -inf, never NaN.
//
// Storage: q, k, v, out and the gradients are f32 or bf16, each independently; their last
// dimension is contiguous, every other stride is free (views into a fused qkv projection's
// output work without a copy). All math is f32; bf16 is rounded once, at the store. Indexing
// is int64. Deterministic: each output element is computed by one thread in a fixed order, so
// the same inputs give the same bits whatever the thread count (the backward too: no atomics).
// docs/ops/attention.md has the algorithms, the accuracy the tests measure and the deviations
// from transformers / flash-attention.
//
// No position embedding is applied here: rotate q and k first (ssmkit/rope.hpp), or not at
// all for "nope" layers.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

struct AttentionOptions {
  // Multiplies q . k before the softmax. 0 means 1 / sqrt(E). Granite's attention_multiplier
  // goes here, as does 1 / sqrt(query_pre_attn_scalar) where a config has one. Finite, >= 0.
  float scale = 0.0f;
  // > 0: a query sees at most the `window` most recent positions, itself included (transformers'
  // sliding_window; flash-attn's window_size = (window - 1, 0)). 0: unlimited.
  int64_t window = 0;
};

struct AttentionInputs {
  Tensor q;         // (B, L, H, E) f32 | bf16
  Tensor k;         // (B, S, Hk, E) f32 | bf16
  Tensor v;         // (B, S, Hk, Ev) f32 | bf16
  Tensor kv_start;  // optional (B) i32 in [0, S]: keys j < kv_start[b] are masked (left pad)
};

// out: (B, L, H, Ev) f32 | bf16; must not overlap the inputs. lse: optional (B, H, L) f32,
// contiguous over L; keep it for AttentionBackward.
Status AttentionForward(const AttentionInputs& inputs, const Tensor& out, const Tensor& lse,
                        const AttentionOptions& options = {});

// Gradient outputs, each overwritten (not accumulated), each with its input's shape and dtype
// (own strides allowed, last dim contiguous); any may be left undefined when not wanted.
// dk and dv sum over the H / Hk query heads of a group, in a fixed order.
struct AttentionGrads {
  Tensor dq, dk, dv;
};

// The flash-attention backward: P is recomputed from q, k and lse (no (L, S) matrix is saved),
// with D_i = rowsum(dout_i * out_i):
//   dv_j = sum_i P_ij dout_i,   dP_ij = dout_i . v_j,   dS_ij = P_ij (dP_ij - D_i),
//   dq_i = scale sum_j dS_ij k_j,   dk_j = scale sum_i dS_ij q_i.
// out and lse are the forward's outputs for these inputs and options (lse required); dout:
// (B, L, H, Ev) f32 | bf16. Rows with no visible key get dq = 0.
Status AttentionBackward(const AttentionInputs& inputs, const Tensor& out, const Tensor& lse,
                         const Tensor& dout, const AttentionGrads& grads,
                         const AttentionOptions& options = {});

// A paged KV cache (vLLM's layout): keys and values live in fixed-size blocks drawn from one
// pool, and each sequence lists its blocks in order. Sequence b's token t is row
// t % block_size of block block_table[b, t / block_size]. Blocks may be shared between
// sequences for reading (a common prefix); entries of block_table past a sequence's length are
// never read (they may be -1).
struct PagedKv {
  Tensor k_blocks;     // (num_blocks, block_size, Hk, E) f32 | bf16, last dim contiguous
  Tensor v_blocks;     // (num_blocks, block_size, Hk, Ev), k_blocks's dtype
  Tensor block_table;  // (B, max_blocks_per_seq) i32, entries in [0, num_blocks) where used
  Tensor seq_lens;     // (B) i32 in [0, max_blocks_per_seq * block_size]: tokens cached,
                       // the L new ones included
};

// Writes L new tokens' keys and values into the cache: k (B, L, Hk, E) and v (B, L, Hk, Ev)
// (f32 | bf16, converted to the cache's dtype) go to token positions seq_lens[b] - L + i, so
// seq_lens must already count them. Rows whose position is negative are left-pad rows of a
// batch whose sequences got different numbers of new tokens: they are not written. Two
// sequences must not write the same block row (shared blocks are for reading only).
Status PagedKvAppend(const Tensor& k, const Tensor& v, const PagedKv& kv);

// Attention of L new queries per sequence against the cache: query i of sequence b sits at
// position pos_i = seq_lens[b] - L + i and sees cached tokens j <= pos_i (and pos_i - j <
// window with a window), so the new tokens must already be appended. L = 1 is decode; L > 1 a
// prefill chunk. Sequences of different lengths share one call; a row with pos_i < 0 is a
// left-pad row and gets out = 0. q: (B, L, H, E) f32 | bf16; out: (B, L, H, Ev) f32 | bf16.
// Long contexts are split over key blocks (flash-decoding) so that one sequence uses every
// thread; the split depends only on the shapes and seq_lens, not on the thread count.
Status AttentionPagedForward(const Tensor& q, const PagedKv& kv, const Tensor& out,
                             const AttentionOptions& options = {});

}  // namespace ssmkit

// The fp64 oracle of causal attention (include/ssmkit/attention.hpp): dense forward and
// backward, and the paged forward, written as plainly as possible, one query row at a time
// with its scores materialised. Contiguous arrays only.
// Dimension legend: B batch, L query length, S key length, H query heads, Hk kv heads, E head
// dim of q and k, Ev head dim of v.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct AttentionShape {
  int64_t batch = 1, q_len = 1, kv_len = 1;  // B, L, S (dense; the paged form ignores S)
  int64_t heads = 1, kv_heads = 1;           // H, Hk
  int64_t head_dim = 1, v_head_dim = 1;      // E, Ev
  double scale = 1.0;                        // resolved (never 0)
  int64_t window = 0;                        // 0: none
};

// The visible keys of a query at position `pos`: the interval [lo, pos] (empty when lo > pos),
// lo = max(0, kv_start, pos - window + 1).
int64_t FirstVisibleKey(int64_t pos, int64_t window, int64_t kv_start);

// q (B, L, H, E), k (B, S, Hk, E), v (B, S, Hk, Ev), kv_start (B) or nullptr;
// out (B, L, H, Ev), lse (B, H, L) or nullptr.
void AttentionForward(const AttentionShape& s, const double* q, const double* k, const double* v,
                      const int32_t* kv_start, double* out, double* lse);

// dout (B, L, H, Ev); dq (B, L, H, E), dk (B, S, Hk, E), dv (B, S, Hk, Ev), each nullptr when
// not wanted. Recomputes the softmax from scratch (needs neither out nor lse).
void AttentionBackward(const AttentionShape& s, const double* q, const double* k, const double* v,
                       const int32_t* kv_start, const double* dout, double* dq, double* dk,
                       double* dv);

// The paged forward: k_blocks (num_blocks, block_size, Hk, E), v_blocks (num_blocks,
// block_size, Hk, Ev), block_table (B, max_blocks), seq_lens (B); q (B, L, H, E) -> out
// (B, L, H, Ev).
struct PagedLayout {
  int64_t block_size = 1, max_blocks = 1;
};
void AttentionPagedForward(const AttentionShape& s, const PagedLayout& layout, const double* q,
                           const double* k_blocks, const double* v_blocks,
                           const int32_t* block_table, const int32_t* seq_lens, double* out);

}  // namespace ssmkit::ref

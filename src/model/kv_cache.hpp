// The keys and values of every slot's tokens, per attention block, in a paged pool (vLLM's
// layout, include/ssmkit/attention.hpp's PagedKv): fixed-size blocks of block_size tokens, a
// free list of block ids, and per slot a block table listing its blocks in order. A block id
// names the same block in every attention block's pool, so one table serves all of them.
//
// Growing a sequence takes blocks from the free list and copies nothing; decoding into a block
// already held allocates nothing; a reset slot's blocks go back to the list (last freed, first
// reused). The pool's address range is reserved once for max_batch slots of max_context tokens
// (anonymous memory, committed by the system page by page as blocks are first written), so
// memory grows with the tokens actually cached.
//
// Dimension legend: S slots, Lmax max_context, Bk blocks per slot (ceil(Lmax / block_size)),
// Hk key/value heads, E key head dim, Ev value head dim, A attention blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "ssmkit/attention.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

class KvCache {
 public:
  KvCache() = default;
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  Status Allocate(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                  int64_t block_size, int64_t max_batch, int64_t max_context);

  // Gives `slot` blocks for its first `length` tokens (taking them from the free list); the
  // blocks it already holds stay where they are. Fails, changing nothing, past max_context.
  Status Reserve(int64_t slot, int64_t length);
  // Returns every block of `slot` to the free list.
  void Release(int64_t slot);

  // The pool of attention block `layer` and a block table / lengths pair (the caller's: the
  // rows of the slots of one call).
  PagedKv View(int64_t layer, const Tensor& block_table, const Tensor& seq_lens) const;
  // Row `slot` of the table, as a (1, Bk) i32 view.
  Tensor TableRow(int64_t slot) const;
  const int32_t* table(int64_t slot) const { return table_.data() + slot * blocks_per_slot_; }

  // The keys (E floats) and values (Ev floats) of token t of `slot` in pool `layer`.
  float* key(int64_t layer, int64_t slot, int64_t t) const;
  float* value(int64_t layer, int64_t slot, int64_t t) const;

  int64_t layers() const { return layers_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t v_head_dim() const { return v_head_dim_; }
  int64_t max_context() const { return max_context_; }
  int64_t blocks_per_slot() const { return blocks_per_slot_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

 private:
  float* block_data(int64_t layer, int64_t block, bool values) const;

  int64_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, v_head_dim_ = 0;
  int64_t block_size_ = 0, max_batch_ = 0, max_context_ = 0, blocks_per_slot_ = 0;
  int64_t num_blocks_ = 0;
  int64_t block_floats_ = 0;  // keys and values of one block of one layer
  void* memory_ = nullptr;
  int64_t memory_bytes_ = 0;
  std::vector<int32_t> table_;  // (S, Bk), -1 where unused
  std::vector<int64_t> held_;   // (S): blocks each slot holds
  std::vector<int32_t> free_;   // the free list (a stack)
};

}  // namespace ssmkit::model

#include "model/kv_cache.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <limits>
#include <string>

#include "model/views.hpp"

namespace ssmkit::model {

KvCache::~KvCache() {
  if (memory_ != nullptr) munmap(memory_, static_cast<size_t>(memory_bytes_));
}

Status KvCache::Allocate(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                         int64_t block_size, int64_t max_batch, int64_t max_context) {
  if (block_size < 1 || max_context < 1) {
    return Status::InvalidArgument("session: kv_block_size and max_context must be >= 1 (given " +
                                   std::to_string(block_size) + ", " + std::to_string(max_context) +
                                   ")");
  }
  layers_ = layers;
  kv_heads_ = kv_heads;
  head_dim_ = head_dim;
  v_head_dim_ = v_head_dim;
  block_size_ = block_size;
  max_batch_ = max_batch;
  max_context_ = max_context;
  blocks_per_slot_ = (max_context + block_size - 1) / block_size;
  num_blocks_ = max_batch * blocks_per_slot_;
  if (num_blocks_ > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument("session: " + std::to_string(num_blocks_) +
                                   " KV blocks do not fit the i32 block table: lower max_batch "
                                   "or max_context, or raise kv_block_size");
  }
  block_floats_ = block_size * kv_heads * (head_dim + v_head_dim);
  const double bytes = 4.0 * static_cast<double>(block_floats_) * num_blocks_ * layers;
  if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    return Status::OutOfMemory("session: a KV cache of " + std::to_string(bytes) + " bytes");
  }
  memory_bytes_ = std::max<int64_t>(static_cast<int64_t>(bytes), 1);
  // Reserved, not committed: pages become memory when a block is first written.
  void* p = mmap(nullptr, static_cast<size_t>(memory_bytes_), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    memory_bytes_ = 0;
    return Status::OutOfMemory("session: cannot reserve " + std::to_string(bytes / 1e9) +
                               " GB of address space for the KV cache of " +
                               std::to_string(max_batch) + " slots x " +
                               std::to_string(max_context) + " tokens: lower max_context");
  }
  memory_ = p;
  table_.assign(static_cast<size_t>(max_batch * blocks_per_slot_), -1);
  held_.assign(static_cast<size_t>(max_batch), 0);
  free_.resize(static_cast<size_t>(num_blocks_));
  // Block 0 on top: the lowest addresses are used first.
  for (int64_t i = 0; i < num_blocks_; ++i) free_[i] = static_cast<int32_t>(num_blocks_ - 1 - i);
  return Status::Ok();
}

Status KvCache::Reserve(int64_t slot, int64_t length) {
  if (length > max_context_) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + ": " + std::to_string(length) +
                                   " tokens exceed the session's max_context " +
                                   std::to_string(max_context_));
  }
  const int64_t need = (length + block_size_ - 1) / block_size_;
  int32_t* row = table_.data() + slot * blocks_per_slot_;
  while (held_[slot] < need) {
    if (free_.empty()) return Status::OutOfMemory("session: the KV block pool is exhausted");
    row[held_[slot]++] = free_.back();
    free_.pop_back();
  }
  return Status::Ok();
}

void KvCache::Release(int64_t slot) {
  int32_t* row = table_.data() + slot * blocks_per_slot_;
  while (held_[slot] > 0) {
    const int64_t i = --held_[slot];
    free_.push_back(row[i]);
    row[i] = -1;
  }
}

// Per layer: every block's keys, then every block's values (two disjoint regions, as the
// attention ops require of k_blocks and v_blocks).
float* KvCache::block_data(int64_t layer, int64_t block, bool values) const {
  const int64_t key_floats = block_size_ * kv_heads_ * head_dim_;
  const int64_t value_floats = block_size_ * kv_heads_ * v_head_dim_;
  float* base = static_cast<float*>(memory_) + layer * num_blocks_ * block_floats_;
  return values ? base + num_blocks_ * key_floats + block * value_floats
                : base + block * key_floats;
}

PagedKv KvCache::View(int64_t layer, const Tensor& block_table, const Tensor& seq_lens) const {
  const int64_t Hk = kv_heads_, E = head_dim_, Ev = v_head_dim_, bs = block_size_;
  PagedKv kv;
  kv.k_blocks = model::View(block_data(layer, 0, false), {num_blocks_, bs, Hk, E},
                            {bs * Hk * E, Hk * E, E, 1});
  kv.v_blocks = model::View(block_data(layer, 0, true), {num_blocks_, bs, Hk, Ev},
                            {bs * Hk * Ev, Hk * Ev, Ev, 1});
  kv.block_table = block_table;
  kv.seq_lens = seq_lens;
  return kv;
}

Tensor KvCache::TableRow(int64_t slot) const {
  return Tensor::Contiguous(table(slot), DType::kI32, {1, blocks_per_slot_});
}

float* KvCache::key(int64_t layer, int64_t slot, int64_t t) const {
  const int32_t block = table(slot)[t / block_size_];
  return block_data(layer, block, false) + (t % block_size_) * kv_heads_ * head_dim_;
}

float* KvCache::value(int64_t layer, int64_t slot, int64_t t) const {
  const int32_t block = table(slot)[t / block_size_];
  return block_data(layer, block, true) + (t % block_size_) * kv_heads_ * v_head_dim_;
}

}  // namespace ssmkit::model

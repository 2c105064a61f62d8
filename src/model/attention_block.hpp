// The attention block over the sequences of one forward pass: q, k, v projections (plus
// Zamba2's low-rank adapters), rotary embeddings at each token's position (none for "nope"
// layers), the new keys and values appended to the slots' KV cache, causal GQA attention of
// the new queries over everything the slot holds, o_proj. Composed from the public ops
// (linear.hpp, rope.hpp, attention.hpp).
// Dimension legend: n sequences, T tokens (packed), X the width read (d; Zamba2: 2 d), d
// d_model, Ha / Hk query / key-value heads, E head dim, W = (Ha + 2 Hk) E, r adapter rank,
// Bk blocks per slot.
#pragma once

#include <cstdint>

#include "model/kv_cache.hpp"
#include "model/seq_batch.hpp"
#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

struct AttentionActs {
  float* qkv;    // (T, W): each token's [q (Ha E), k (Hk E), v (Hk E)]
  float* att;    // (T, Ha E): the attention output, o_proj's input
  float* low;    // (T, r): an adapter's low-rank activations (Zamba2)
  float* delta;  // (T, Ha E): an adapter's output, added to q, k or v
};
int64_t AttentionFloats(const ModelConfig& c, int64_t T);
AttentionActs CarveAttention(const ModelConfig& c, int64_t T, float* base);

// The KV rows of one pass: sequence i's row of the block table and its length after the pass.
struct KvBatch {
  const int32_t* tables;  // (n, Bk) i32
  const int32_t* lens;    // (n) i32: start + length
};

// x (T, X) -> out (T, d); the new keys and values go into KV pool `layer` at the batch's slots
// (their blocks reserved already).
Status AttentionBlockForward(const ModelConfig& c, const AttentionWeights& w, const SeqBatch& batch,
                             const float* x, const AttentionActs& a, const KvCache& kv,
                             int64_t layer, const KvBatch& rows, float* out);

}  // namespace ssmkit::model

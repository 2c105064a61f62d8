// One forward pass through a model's blocks (ModelConfig::block_list) over the sequences of a
// SeqBatch, prefill or decode: the residual stream, each block's norm and residual rule, and
// the dispatch to the block kinds' code; and the LM head. The session packs the tokens.
// The same code runs a decode step on the GPU (model/gpu_decoder.cpp) over device buffers: bf16
// activations, an f32 residual stream, the states and weights on the device.
// Dimension legend: T tokens (packed), d d_model, V vocab.
//
// For each block, with its input norm weight w and the previous block's output h:
//   residual += h (the first block: residual = h, the embedding); x = RMSNorm(residual) w;
//   h = multiplier * block(x)
// fused as one AddRmsNorm op. A Zamba2 shared transformer block reads residual and the
// embedding itself, and its output t is not added to the residual stream: the next block's
// input is RMSNorm(residual + t). After the last block, norm_f the same way.
#pragma once

#include <cstdint>

#include "model/attention_block.hpp"
#include "model/cache.hpp"
#include "model/kv_cache.hpp"
#include "model/seq_batch.hpp"
#include "model/views.hpp"
#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Host f32 on the CPU. On the GPU (decode only): residual f32, the others bf16, scratch and
// embedding absent (the hybrids that use them run on the CPU only).
struct ForwardBuffers {
  ActBuffer hidden;     // (T, d): the embedding rows in; each block's output
  ActBuffer residual;   // (T, d)
  ActBuffer normed;     // (T, d): each block's input; after the pass, the final norm's output
  ActBuffer scratch;    // (T, d): residual + t for a block after a Zamba2 shared block
  ActBuffer embedding;  // (T, d): the embedding, kept for Zamba2's shared blocks
  ActBuffer acts;       // the blocks' activations (the largest block's)
};

// Floats of ForwardBuffers for T tokens (decode: T sequences of one token).
int64_t ForwardFloats(const ModelConfig& c, const ModelWeights& w, int64_t T, bool decode);
// Elements of `acts` the blocks need for T tokens.
int64_t BlockActsElements(const ModelConfig& c, const ModelWeights& w, int64_t T, bool decode);
ForwardBuffers CarveForward(int64_t T, int64_t d, float* base);

struct ForwardContext {
  const ModelConfig& config;
  const ModelWeights& weights;
  const StateCache& states;
  const KvCache& kv;
  KvBatch kv_rows;  // the batch's block-table rows and lengths (attention models)
};

// hidden holds the embedding of the batch's tokens (times the embedding multiplier); on
// return normed holds RMSNorm(norm_f) of the last residual. The caches are read and written at
// the batch's slots; the KV blocks for the new tokens must be reserved already.
Status RunBlocks(const ForwardContext& ctx, const SeqBatch& batch, const ForwardBuffers& buffers);

// logits (rows, V) f32 = the LM head of normed (rows, d), times the logits multiplier (host only).
Status LmHead(const ModelConfig& c, const ModelWeights& w, ActBuffer normed, int64_t rows,
              ActBuffer logits);

}  // namespace ssmkit::model

// What a Session holds: its slots' states (model/cache.hpp, model/kv_cache.hpp), their
// lengths, and the buffers of a forward pass. Shared by session.cpp (running) and
// slot_state.cpp (saving and restoring a slot).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_floats.hpp"
#include "model/cache.hpp"
#include "model/gpu_decoder.hpp"
#include "model/kv_cache.hpp"
#include "model/model_impl.hpp"
#include "model/seq_batch.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/sampler.hpp"

namespace ssmkit {

struct Session::Impl {
  const Model::Impl* model = nullptr;
  SessionOptions options;  // max_context as resolved (-1: no attention, unlimited)
  int64_t batch = 0;       // of the last Prefill
  model::StateCache states;
  model::KvCache kv;
  std::vector<int64_t> lengths;   // (max_batch): tokens each slot holds
  std::vector<int32_t> identity;  // 0, 1, ..., max_batch - 1: Prefill's and Decode's slots
  AlignedFloats decode_buffer;    // sized once for max_batch
  AlignedFloats prefill_buffer;   // grown to the largest prefill
  // The packing of one pass (decode's fit the capacity reserved at creation).
  std::vector<int32_t> packed_tokens, positions;  // (T)
  std::vector<int64_t> offset;                    // (n + 1)
  std::vector<int64_t> start;                     // (n)
  std::vector<int32_t> slots;                     // (n)
  std::vector<int32_t> kv_tables;  // (max_batch, Bk): the pass's slots' block-table rows
  std::vector<int32_t> kv_lens;    // (max_batch): their lengths after the pass
  // DecodeGreedy on the CPU: the step's logits (max_batch, V), sized at its first call, and a
  // greedy Sampler over the first config_vocab_size of each row.
  std::vector<float> greedy_logits;
  Sampler greedy;
  // A CUDA session's engine (options.device == kCuda); the CPU state above is then unused.
  std::unique_ptr<model::GpuDecoder> gpu;

  const ModelConfig& config() const;
  int64_t sampled_vocab() const;  // min(V, config_vocab_size): the tokens sampling may produce
  const model::ModelWeights& weights() const;

  Status CheckTokens(const int32_t* ids, int64_t n, const std::string& what) const;
  // Unsupported on a CUDA session, for the calls only the CPU engine serves (slots).
  Status CpuOnly(const char* fn) const;
  // Decode's and DecodeGreedy's checks: a prefilled batch, one valid token per sequence.
  Status CheckStep(std::span<const int32_t> tokens) const;
  // A decode step on the GPU; the lengths advance, and a failure leaves no usable batch.
  Status StepOnGpu(std::span<const int32_t> tokens, std::span<float> logits,
                   std::span<int32_t> next);
  Status CheckChunks(const std::vector<std::vector<int32_t>>& chunks, std::span<float> logits,
                     std::span<float> all_logits, const char* fn, const char* what) const;
  void ReservePacking(int64_t tokens);
  void Embed(const int32_t* ids, int64_t n, float* hidden) const;
  // logits (rows, V) = LM head of normed (rows, d), times the logits multiplier.
  Status LmHead(const float* normed, int64_t rows, float* logits) const;
  // KV blocks for the batch's new tokens.
  Status Reserve(const model::SeqBatch& batch);
  void Reset(int64_t slot);
  // Embedding, blocks, final norm over `base` (ForwardFloats); advances the slots' lengths.
  Status Run(const model::SeqBatch& batch, float* base);
  Status PrefillChecked(std::span<const int32_t> slots,
                        const std::vector<std::vector<int32_t>>& chunks, std::span<float> logits,
                        std::span<float> all_logits);
};

}  // namespace ssmkit

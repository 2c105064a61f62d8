// The engine on the GPU: what a Session runs when SessionOptions::device is Device::kCuda
// (pure Mamba-1 and Mamba-2 models; docs/cuda.md, "The engine on the GPU").
//
// A decode step for n sequences is the CPU engine's own code (model/forward.cpp's RunBlocks and
// LmHead, the Mamba mixers' decode) over device memory: the weights uploaded once per model
// (model/device_weights.hpp), the SSM and conv states on the device, bf16 activations and an f32
// residual stream; around it an embedding gather and a greedy argmax (cuda/decode_kernels.hpp).
// Every buffer is allocated at creation for max_batch sequences. The first step at a batch size
// runs eagerly (creating cuBLAS's handle and loading the kernels) and is then recorded into a
// CUDA graph, which every later step at that size replays: per step one copy of the token ids
// in, one graph launch, one copy of the greedy ids out and one synchronisation. Logits are
// copied back only when asked for (sampling other than greedy, or a caller that wants them).
//
// Prefill runs the prompts through the same step one token at a time (no prefill kernels yet).
// The prompts are laid out longest first, so the sequences still running at step t are rows
// 0..n_t-1 and the step is the graph for n_t rows; a sequence's logits are taken at its last
// token. Decode keeps that layout (sequence order_[r] is in row r).
//
// Dimension legend: B sequences, n rows of a step, d d_model, V vocab.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/device_runtime.hpp"
#include "model/cache.hpp"
#include "model/forward.hpp"
#include "model/kv_cache.hpp"
#include "model/model_impl.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Ok when the model runs on the GPU; otherwise Unsupported naming the first block or setting
// that does not (a hybrid's attention, MLP or MoE block, muP multipliers, Falcon-H1's in_proj
// multipliers, a Mamba-2 time_step_limit). Needs no GPU.
Status CheckRunsOnCuda(const ModelConfig& c, const ModelWeights& w);

class GpuDecoder {
 public:
  // Checks the model (CheckRunsOnCuda), the backend and a device; uploads the model's weights
  // if no session did yet; allocates everything for max_batch sequences.
  static Status Create(const Model::Impl& model, int64_t max_batch,
                       std::unique_ptr<GpuDecoder>* out);
  GpuDecoder(const GpuDecoder&) = delete;
  GpuDecoder& operator=(const GpuDecoder&) = delete;
  ~GpuDecoder();

  // B = prompts.size() prompts (1 <= B <= max_batch, each >= 1 valid token: the session checks)
  // from a fresh state; logits (B, V) host f32: each prompt's last position.
  Status Prefill(const std::vector<std::vector<int32_t>>& prompts, std::span<float> logits);
  // One token for each of the B sequences of the last Prefill (tokens (B), checked by the
  // session). logits: (B, V) host f32, or empty (not copied back); next: (B), the greedy tokens
  // (the CPU Sampler's choice over the first config_vocab_size logits), or empty.
  Status Decode(std::span<const int32_t> tokens, std::span<float> logits, std::span<int32_t> next);

 private:
  GpuDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t max_batch);
  Status Allocate();
  // The forward pass's buffers for n rows.
  ForwardBuffers Carve(int64_t n) const;
  // The step's kernels for rows 0..n-1 on the calling thread's stream: the embedding of tokens_,
  // the blocks, the LM head into logits_, the greedy ids into next_.
  Status Launch(int64_t n);
  // Launch(n) by its graph, or eagerly and then recorded (the first step at n rows).
  Status Step(int64_t n);
  // Copies the greedy ids (and the logits, when wanted) of rows 0..n-1 back, in the sequences'
  // order, and waits for the stream.
  Status Fetch(int64_t n, std::span<float> logits, std::span<int32_t> next);

  const ModelConfig& config_;
  const ModelWeights& weights_;  // on the device
  const int64_t max_batch_;
  int64_t batch_ = 0;           // B of the last Prefill
  int64_t sampled_vocab_ = 0;   // the greedy argmax's columns
  bool use_graphs_ = true;      // SSMKIT_CUDA_GRAPHS=0: every step launched eagerly
  std::vector<int32_t> order_;  // (B): the sequence in row r
  StateCache states_;           // on the device
  KvCache kv_;                  // empty: no attention on the GPU
  // The host arrays of a step's SeqBatch: rows r = slots r, one token each.
  std::vector<int32_t> slots_, positions_;
  std::vector<int64_t> offsets_, starts_;
  cuda::Stream stream_;
  cuda::DeviceMemory acts_;      // bf16: hidden (n, d), normed (n, d), the blocks' activations
  cuda::DeviceMemory residual_;  // (max_batch, d) f32
  cuda::DeviceMemory logits_;    // (max_batch, V) f32
  cuda::DeviceMemory tokens_;    // (max_batch) i32: the step's input ids
  cuda::DeviceMemory next_;      // (max_batch) i32: the greedy ids
  cuda::PinnedMemory tokens_in_, next_out_;  // (max_batch) i32 each: their host ends
  std::vector<cuda::Graph> graphs_;          // (max_batch): the step at n rows, once recorded
};

}  // namespace ssmkit::model

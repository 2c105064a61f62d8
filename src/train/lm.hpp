// A Mamba-1 or Mamba-2 language model for training: f32 parameters and gradients in flat
// buffers (laid out by ParamTable), a forward that keeps each layer's activations, and the
// backward through every layer to every parameter.
//
// Dimension legend: Bt batch, L length, M = Bt * L, d d_model, V vocab.
//
//   h_0            = embedding[tokens]                                  (M, d)
//   layer i:       normed_i, resid_i = add_rmsnorm(h_i, resid_{i-1})   (resid_{-1} absent)
//                  h_{i+1} = mixer_i(normed_i)
//   final:         hf = add_rmsnorm(h_n, resid_{n-1}) with norm_f
//   logits         = hf lm_head^T                                       (M, V)
//   loss           = sum over the M positions of cross_entropy(logits, next token)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "train/param_table.hpp"

namespace ssmkit::train {

class TrainModel {
 public:
  ~TrainModel();
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;

  // Parameters are zero until InitParams or a checkpoint fills them.
  static Status Create(const ModelConfig& config, std::unique_ptr<TrainModel>* model);

  const ModelConfig& config() const;
  const ParamTable& table() const;
  std::span<float> params();
  std::span<const float> params() const;
  std::span<float> grads();
  void ZeroGrads();

  // tokens: (Bt, L + 1) bytes/ids in [0, V): position l predicts token l + 1. Runs forward
  // and backward and ADDS grad_scale * d(loss)/d(params) to grads (accumulation across
  // micro-batches). loss_sum: the summed cross-entropy over the Bt * L positions, in nats.
  Status ForwardBackward(std::span<const int32_t> tokens, int64_t batch, int64_t seqlen,
                         float grad_scale, double* loss_sum);

  // The same loss without gradients (validation).
  Status Loss(std::span<const int32_t> tokens, int64_t batch, int64_t seqlen, double* loss_sum);

  // logits: (Bt * L, V) for inputs (Bt, L): every position's next-token logits.
  Status Logits(std::span<const int32_t> inputs, int64_t batch, int64_t seqlen,
                std::vector<float>* logits);

  struct Impl;

 private:
  explicit TrainModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ssmkit::train

// Appends a model's expected tensors to a TensorPlan: the helpers name each mixer's tensors
// the way every family names them below its own prefix, so that a family's plan
// (model/family_*.cpp) lists prefixes and the tensors peculiar to it.
// Dimension legend as in model/weights.hpp.
#pragma once

#include <string>
#include <vector>

#include "model/tensor_names.hpp"

namespace ssmkit::model {

using Names = std::vector<std::string>;

class Planner {
 public:
  Planner(const ModelConfig& c, const WeightSource* source, TensorPlan* plan)
      : c_(c), source_(source), plan_(plan) {}

  const ModelConfig& config() const { return c_; }
  TensorPlan& plan() { return *plan_; }
  bool Has(const std::string& name) const {
    return source_ != nullptr && source_->Find(name) != nullptr;
  }

  void Matrix(Names names, std::vector<int64_t> shape, Tensor* target) {
    plan_->slots.push_back({std::move(names), std::move(shape), SlotKind::kMatrix, target});
  }
  void Vector(Names names, std::vector<int64_t> shape, Tensor* target,
              std::vector<int64_t> view_shape = {}) {
    plan_->slots.push_back({std::move(names), std::move(shape), SlotKind::kVector, target, nullptr,
                            std::move(view_shape)});
  }
  void NegExp(Names names, std::vector<int64_t> shape, Tensor* target, Tensor* raw) {
    plan_->slots.push_back({std::move(names), std::move(shape), SlotKind::kNegExp, target, raw});
  }
  // A (rows, cols) matrix and, with `bias`, its (rows) bias "<p>.bias".
  void Linear(const std::string& p, int64_t rows, int64_t cols, bool bias, Tensor* weight,
              Tensor* bias_target) {
    Matrix({p + ".weight"}, {rows, cols}, weight);
    if (bias) Vector({p + ".bias"}, {rows}, bias_target);
  }

  // The Mamba-1 / Mamba-2 mixer's tensors under `p` ("backbone.layers.0.mixer.").
  void Mamba1(const std::string& p, Mamba1Weights* w);
  void Mamba2(const std::string& p, Mamba2Weights* w);
  // q_proj, k_proj, v_proj, o_proj under `p` ("model.layers.3.self_attn.").
  void Attention(const std::string& p, AttentionWeights* w);
  // gate_proj / up_proj / down_proj under `p`, F hidden features (no gate: ungated).
  void Mlp(const std::string& p, int64_t F, bool gated, MlpWeights* w);
  // One fused (2F, d) [gate, up] matrix `fused` and `down` (d, F), split after binding.
  void FusedMlp(const std::string& fused, const std::string& down, int64_t F, bool bias,
                Tensor* fused_target, MlpWeights* w);
  // Sizes f->experts to the config's experts and splits f->experts_gate_up / experts_down
  // (bound by the caller) into them after binding.
  void SplitExperts(FeedForwardWeights* f);
  // The experts stacked as GGUF files hold them: "<p>gate_proj" and "<p>up_proj" (E, F, d),
  // "<p>down_proj" (E, d, F), F = the config's moe_intermediate, d the experts' width (the
  // config's ffn.latent when set); split into f->experts after binding. Ungated experts (the
  // config's ffn.gated false: Nemotron-H's) have no gate_proj.
  void StackedExperts(const std::string& p, FeedForwardWeights* f);
  // A low-rank adapter "<p>.0.weight" (r, in), "<p>.1.weight" (out, r).
  void LowRank(const std::string& p, int64_t in, int64_t out, Adapter* a);

 private:
  void InOutProj(const std::string& p, int64_t in_rows, Tensor* in_proj, Tensor* in_bias,
                 Tensor* out_proj, Tensor* out_bias);
  void Conv(const std::string& p, int64_t C, Tensor* weight, Tensor* bias);

  const ModelConfig& c_;
  const WeightSource* source_;
  TensorPlan* plan_;
};

}  // namespace ssmkit::model

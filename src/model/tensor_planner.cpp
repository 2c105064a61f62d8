#include "model/tensor_planner.hpp"

#include "ssmkit/mlp.hpp"

namespace ssmkit::model {

void Planner::InOutProj(const std::string& p, int64_t in_rows, Tensor* in_proj, Tensor* in_bias,
                        Tensor* out_proj, Tensor* out_bias) {
  const int64_t d = c_.d_model;
  Matrix({p + "in_proj.weight"}, {in_rows, d}, in_proj);
  if (c_.proj_bias) Vector({p + "in_proj.bias"}, {in_rows}, in_bias);
  Matrix({p + "out_proj.weight"}, {d, c_.d_inner}, out_proj);
  if (c_.has_out_proj_bias()) Vector({p + "out_proj.bias"}, {d}, out_bias);
}

void Planner::Conv(const std::string& p, int64_t C, Tensor* weight, Tensor* bias) {
  const int64_t K = c_.d_conv;
  Vector({p + "conv1d.weight"}, {C, 1, K}, weight, {C, K});
  if (c_.conv_bias) Vector({p + "conv1d.bias"}, {C}, bias);
}

void Planner::Mamba1(const std::string& p, Mamba1Weights* w) {
  const int64_t D = c_.d_inner, N = c_.d_state, R = c_.dt_rank;
  InOutProj(p, 2 * D, &w->in_proj, &w->in_proj_bias, &w->out_proj, &w->out_proj_bias);
  Conv(p, D, &w->conv_weight, &w->conv_bias);
  Matrix({p + "x_proj.weight"}, {R + 2 * N, D}, &w->x_proj);
  if (c_.dt_bc_norms) {
    Vector({p + "dt_layernorm.weight"}, {R}, &w->dt_norm);
    Vector({p + "b_layernorm.weight"}, {N}, &w->b_norm);
    Vector({p + "c_layernorm.weight"}, {N}, &w->c_norm);
  }
  Matrix({p + "dt_proj.weight"}, {D, R}, &w->dt_proj);
  Vector({p + "dt_proj.bias"}, {D}, &w->dt_bias);
  NegExp({p + "A_log"}, {D, N}, &w->A, &w->A_log);
  Vector({p + "D"}, {D}, &w->D);
}

void Planner::Mamba2(const std::string& p, Mamba2Weights* w) {
  const int64_t D = c_.d_inner, H = c_.nheads;
  InOutProj(p, c_.in_proj_dim(), &w->in_proj, &w->in_proj_bias, &w->out_proj, &w->out_proj_bias);
  Conv(p, c_.conv_dim(), &w->conv_weight, &w->conv_bias);
  Vector({p + "dt_bias"}, {H}, &w->dt_bias);
  NegExp({p + "A_log"}, {H}, &w->A, &w->A_log);
  if (c_.d_per_channel) {
    Vector({p + "D"}, {D}, &w->D, {H, c_.headdim});
  } else {
    Vector({p + "D"}, {H}, &w->D);
  }
  if (c_.gated_norm) Vector({p + "norm.weight"}, {D}, &w->gated_norm);
}

void Planner::Attention(const std::string& p, AttentionWeights* w) {
  const AttentionConfig& a = c_.attention;
  const int64_t X = a.input_dim > 0 ? a.input_dim : c_.d_model, E = a.head_dim;
  Linear(p + "q_proj", a.num_heads * E, X, a.qkv_bias, &w->q, &w->q_bias);
  Linear(p + "k_proj", a.num_kv_heads * E, X, a.qkv_bias, &w->k, &w->k_bias);
  Linear(p + "v_proj", a.num_kv_heads * E, X, a.qkv_bias, &w->v, &w->v_bias);
  Linear(p + "o_proj", c_.d_model, a.num_heads * E, a.o_bias, &w->o, &w->o_bias);
}

void Planner::Mlp(const std::string& p, int64_t F, bool gated, MlpWeights* w) {
  const int64_t d = c_.d_model;
  const bool bias = c_.ffn.bias;
  if (gated) Linear(p + "gate_proj", F, d, bias, &w->gate, &w->gate_bias);
  Linear(p + "up_proj", F, d, bias, &w->up, &w->up_bias);
  Linear(p + "down_proj", d, F, bias, &w->down, &w->down_bias);
}

void Planner::FusedMlp(const std::string& fused, const std::string& down, int64_t F, bool bias,
                       Tensor* fused_target, MlpWeights* w) {
  const int64_t d = c_.d_model;
  // The bias halves are split alike: gate_bias and up_bias receive views of one (2F) vector.
  Tensor* fused_bias = bias ? &w->gate_bias : nullptr;
  Matrix({fused + ".weight"}, {2 * F, d}, fused_target);
  if (bias) Vector({fused + ".bias"}, {2 * F}, fused_bias);
  Linear(down, d, F, bias, &w->down, &w->down_bias);
  plan_->finish.push_back([fused_target, fused_bias, w]() -> Status {
    SSMKIT_RETURN_IF_ERROR(SplitGateUp(*fused_target, &w->gate, &w->up));
    if (fused_bias == nullptr) return Status::Ok();
    const Tensor both = *fused_bias;
    return SplitGateUp(both, &w->gate_bias, &w->up_bias);
  });
}

void Planner::SplitExperts(FeedForwardWeights* f) {
  f->experts.assign(static_cast<size_t>(c_.ffn.num_experts), MlpWeights{});
  plan_->finish.push_back(
      [f]() { return SplitFusedExperts(f->experts_gate_up, f->experts_down, f->experts); });
}

void Planner::StackedExperts(const std::string& p, FeedForwardWeights* f) {
  const int64_t E = c_.ffn.num_experts, F = c_.ffn.moe_intermediate;
  const int64_t d = c_.ffn.latent > 0 ? c_.ffn.latent : c_.d_model;
  if (c_.ffn.gated) Matrix({p + "gate_proj"}, {E, F, d}, &f->experts_gate);
  Matrix({p + "up_proj"}, {E, F, d}, &f->experts_up);
  Matrix({p + "down_proj"}, {E, d, F}, &f->experts_down);
  f->experts.assign(static_cast<size_t>(E), MlpWeights{});
  plan_->finish.push_back([f]() {
    return SplitStackedExperts(f->experts_gate, f->experts_up, f->experts_down, f->experts);
  });
}

void Planner::LowRank(const std::string& p, int64_t in, int64_t out, Adapter* a) {
  const int64_t r = c_.adapter_rank;
  Matrix({p + ".0.weight"}, {r, in}, &a->a);
  Matrix({p + ".1.weight"}, {out, r}, &a->b);
}

}  // namespace ssmkit::model

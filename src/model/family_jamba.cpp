// JambaForCausalLM (AI21's Jamba): per layer an RMSNorm -> attention (layers i with
// i % attn_layer_period == attn_layer_offset; no position embedding) or a Mamba-1 mixer with
// RMSNorms on dt_in, B and C, then an RMSNorm -> MoE (layers i % expert_layer_period ==
// expert_layer_offset, when num_experts > 1: softmax over the experts, top-k, weights not
// renormalised) or a gated MLP. transformers' configuration_jamba.py / modeling_jamba.py.
// Experts: per-expert tensors feed_forward.experts.<e>.{gate,up,down}_proj.weight (the hub
// files, and what save_pretrained writes) or transformers 5's fused experts.gate_up_proj /
// experts.down_proj.
#include <string>

#include "model/families.hpp"

namespace ssmkit::model {

Status ParseJamba(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(
      ReadCommon(r, {4096, 32, 65536, false, 262144, "rms_norm_eps", 1e-6f, 0}, c));
  SSMKIT_RETURN_IF_ERROR(ReadAttention(r, 32, 8, c));
  c->attention.qkv_bias = c->attention.o_bias = false;  // hard-coded in JambaAttention
  c->arch = ModelArch::kMamba1;
  c->d_state = 16;
  c->d_conv = 4;
  c->conv_bias = true;
  c->proj_bias = false;
  c->dt_bc_norms = true;
  int64_t expand = 2;
  SSMKIT_RETURN_IF_ERROR(r.Int("mamba_d_state", &c->d_state));
  SSMKIT_RETURN_IF_ERROR(r.Int("mamba_d_conv", &c->d_conv));
  SSMKIT_RETURN_IF_ERROR(r.Int("mamba_expand", &expand));
  SSMKIT_RETURN_IF_ERROR(r.Bool("mamba_conv_bias", &c->conv_bias));
  SSMKIT_RETURN_IF_ERROR(r.Bool("mamba_proj_bias", &c->proj_bias));
  SSMKIT_RETURN_IF_ERROR(
      r.Expanded("mamba_expand", static_cast<double>(expand), c->d_model, &c->d_inner));
  c->dt_rank = (c->d_model + 15) / 16;  // "auto": ceil(hidden_size / 16)
  if (r.Has("mamba_dt_rank") && !r.json().at("mamba_dt_rank").is_string())
    SSMKIT_RETURN_IF_ERROR(r.Int("mamba_dt_rank", &c->dt_rank));
  FeedForwardConfig& f = c->ffn;
  SSMKIT_RETURN_IF_ERROR(ReadActivation(r, "hidden_act", "silu", &f.activation));
  f.intermediate = 14336;
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &f.intermediate));
  f.moe_intermediate = f.intermediate;
  f.num_experts = 16;
  f.top_k = 2;
  SSMKIT_RETURN_IF_ERROR(r.Int("num_experts", &f.num_experts));
  SSMKIT_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &f.top_k));
  int64_t attn_period = 8, attn_offset = 4, expert_period = 2, expert_offset = 1;
  SSMKIT_RETURN_IF_ERROR(r.Int("attn_layer_period", &attn_period));
  SSMKIT_RETURN_IF_ERROR(r.Int("attn_layer_offset", &attn_offset));
  SSMKIT_RETURN_IF_ERROR(r.Int("expert_layer_period", &expert_period));
  SSMKIT_RETURN_IF_ERROR(r.Int("expert_layer_offset", &expert_offset));
  if (attn_period < 1 || attn_offset < 0 || attn_offset >= attn_period)
    return r.Wrong("attn_layer_offset", "an offset in [0, attn_layer_period)");
  if (expert_period < 1 || expert_offset < 0 || expert_offset >= expert_period)
    return r.Wrong("expert_layer_offset", "an offset in [0, expert_layer_period)");
  for (int64_t i = 0; i < c->n_layer; ++i) {
    const bool attn = i % attn_period == attn_offset;
    const bool moe = f.num_experts > 1 && i % expert_period == expert_offset;
    c->blocks.push_back({attn ? BlockKind::kAttention : BlockKind::kMamba1, i});
    c->blocks.push_back({moe ? BlockKind::kMoe : BlockKind::kMlp, i});
  }
  return Status::Ok();
}

void PlanJamba(Planner& p, ModelWeights* w) { PlanDecoderLayers(p, w); }

}  // namespace ssmkit::model

// BambaForCausalLM (IBM's Bamba): per layer an RMSNorm -> Mamba-2 mixer or attention (the
// layers in attn_layer_indices; rotary on half of each head: transformers hard-codes
// partial_rotary_factor 0.5 unless rope_parameters names one), then an RMSNorm -> gated MLP
// (mlp_bias). transformers' configuration_bamba.py / modeling_bamba.py.
#include <algorithm>
#include <string>

#include "model/families.hpp"

namespace ssmkit::model {

Status ParseBamba(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(
      ReadCommon(r, {4096, 32, 128000, false, 262144, "rms_norm_eps", 1e-5f, 0}, c));
  SSMKIT_RETURN_IF_ERROR(ReadAttention(r, 32, 8, c));
  SSMKIT_RETURN_IF_ERROR(ReadRope(r, /*use_partial=*/true, /*partial_default=*/0.5, c));
  SSMKIT_RETURN_IF_ERROR(ReadMamba2(
      r,
      {"mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv",
       "mamba_expand", "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias"},
      {128, 1, 256, 4, 2, 256, true, false}, c));
  FeedForwardConfig& f = c->ffn;
  SSMKIT_RETURN_IF_ERROR(ReadActivation(r, "hidden_act", "silu", &f.activation));
  f.intermediate = 14336;
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &f.intermediate));
  SSMKIT_RETURN_IF_ERROR(r.Bool("mlp_bias", &f.bias));
  std::vector<int64_t> attention_layers;
  if (r.Has("attn_layer_indices")) {
    const Json& list = r.json().at("attn_layer_indices");
    if (!list.is_array()) return r.Wrong("attn_layer_indices", "a list of layer indices");
    for (const Json& i : list) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= c->n_layer)
        return r.Wrong("attn_layer_indices", "layer indices in [0, num_hidden_layers)");
      attention_layers.push_back(i.get<int64_t>());
    }
  }
  for (int64_t i = 0; i < c->n_layer; ++i) {
    const bool attn =
        std::find(attention_layers.begin(), attention_layers.end(), i) != attention_layers.end();
    c->blocks.push_back({attn ? BlockKind::kAttention : BlockKind::kMamba2, i});
    c->blocks.push_back({BlockKind::kMlp, i});
  }
  return Status::Ok();
}

void PlanBamba(Planner& p, ModelWeights* w) {
  const ModelConfig& c = p.config();
  const int64_t d = c.d_model;
  p.Matrix({"model.embed_tokens.weight"}, {c.vocab_size, d}, &w->embedding);
  for (Block& b : w->blocks) {
    const std::string l = "model.layers." + std::to_string(b.spec.layer) + ".";
    if (b.spec.kind == BlockKind::kMlp) {
      p.Vector({l + "pre_ff_layernorm.weight"}, {d}, &b.norm);
      p.Mlp(l + "feed_forward.", c.ffn.intermediate, true, &b.ffn.mlp);
      continue;
    }
    p.Vector({l + "input_layernorm.weight"}, {d}, &b.norm);
    if (b.spec.kind == BlockKind::kMamba2) {
      p.Mamba2(l + "mamba.", &b.mamba2);
    } else {
      p.Attention(l + "self_attn.", &b.attention);
    }
  }
  p.Vector({"model.final_layernorm.weight"}, {d}, &w->norm_f);
}

}  // namespace ssmkit::model

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
  SSMKIT_RETURN_IF_ERROR(ReadMamba2(r, kMambaPrefixedKeys, kMambaPrefixedDefaults, c));
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

void PlanBamba(Planner& p, ModelWeights* w) { PlanDecoderLayers(p, w); }

}  // namespace ssmkit::model

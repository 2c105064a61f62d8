// general.architecture "nemotron_h": llama.cpp's converter writes it for NemotronHForCausalLM
// (NVIDIA's Nemotron-H) without MoE layers: a list of blocks, each an RMSNorm then one mixer,
// Mamba-2 ("M"), attention without position embedding ("*") or an ungated relu2 MLP ("-").
// Its MoE models ("E" blocks, a config with num_experts_per_tok) are "nemotron_h_moe": not read
// (the engine has no Nemotron-H MoE).
//
// Metadata: attention.head_count_kv and feed_forward_length per layer, which say each layer's
// kind as llama.cpp reads them (head_count_kv > 0: attention; feed_forward_length > 0: the MLP,
// of that width; both 0: Mamba-2), attention.head_count / key_length, the ssm.* sizes, the norm
// epsilon under attention.layer_norm_epsilon (model/gguf_arch_common.cpp). expert_* keys a
// dense config carries are ignored. Not recorded: time_step_min, the floor transformers clamps
// dt to in prefill, taken as the class default (0.001) that the published configs state.
//
// Tensors, per layer: attn_norm (the block's norm), then the Mamba-2 mixer's ssm_*, attention's
// attn_* (Q and K rows interleaved per head by the converter, as for Llama, although the model
// has no rope: put back) or ffn_up / ffn_down (the MLP, with biases when mlp_bias).
#include <string>

#include "model/gguf_arch.hpp"

namespace ssmkit::model {
namespace {

constexpr GgufNamePair kNemotronHLayer[] = {
    {"attn_norm.weight", "norm.weight"},       {"ffn_up.weight", "mixer.up_proj.weight"},
    {"ffn_up.bias", "mixer.up_proj.bias"},     {"ffn_down.weight", "mixer.down_proj.weight"},
    {"ffn_down.bias", "mixer.down_proj.bias"},
};

}  // namespace

Status ReadNemotronHGgufConfig(const GgufFile& f, ModelConfig* config) {
  const GgufKeys k(f, "nemotron_h");
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR(ReadGgufCommon(k, &c));
  c.family = "nemotron_h";
  SSMKIT_RETURN_IF_ERROR(ReadGgufMamba2(k, &c));
  c.dt_min = 0.001f;
  std::vector<int64_t> kv_heads, ffn;
  SSMKIT_RETURN_IF_ERROR(k.PerLayer("attention.head_count_kv", c.n_layer, &kv_heads));
  SSMKIT_RETURN_IF_ERROR(k.PerLayer("feed_forward_length", c.n_layer, &ffn));
  SSMKIT_RETURN_IF_ERROR(ReadGgufAttention(k, kv_heads, /*rope=*/false, &c));
  FeedForwardConfig& mlp = c.ffn;
  mlp.activation = "relu2";  // NemotronH's mlp_hidden_act; the converter writes no key for it
  mlp.gated = false;
  SSMKIT_RETURN_IF_ERROR(
      k.NonZero("feed_forward_length", ffn, "width on every MLP layer", &mlp.intermediate));
  mlp.bias = AnyLayerTensor(f, "ffn_up.bias");
  SSMKIT_RETURN_IF_ERROR(k.OptInt("context_length", &c.max_position_embeddings));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    if (kv_heads[i] > 0 && ffn[i] > 0) {
      return k.Wrong("feed_forward_length", "0 on attention layers",
                     std::to_string(ffn[i]) + " on layer " + std::to_string(i));
    }
    const BlockKind kind = kv_heads[i] > 0 ? BlockKind::kAttention
                           : ffn[i] > 0    ? BlockKind::kMlp
                                           : BlockKind::kMamba2;
    c.blocks.push_back({kind, i});
  }
  *config = std::move(c);
  return Status::Ok();
}

GgufTensorName MapNemotronHGguf(const std::string& rest, int64_t layer, const ModelConfig& c) {
  if (layer < 0) {
    return MapGgufOutsideLayers(rest, "backbone.embeddings.weight", "backbone.norm_f.weight");
  }
  GgufTensorName out;
  const std::string l = "backbone.layers." + std::to_string(layer) + ".";
  if (const char* hf = LookupGgufName(kNemotronHLayer, rest)) {
    out.hf = l + hf;
    return out;
  }
  return MapGgufMixer(rest, l + "mixer.", l + "mixer.", /*unpermute=*/true, c);
}

}  // namespace ssmkit::model

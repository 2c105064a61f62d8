// general.architecture "nemotron_h" and "nemotron_h_moe": llama.cpp's converter writes them for
// NemotronHForCausalLM (NVIDIA's Nemotron-H, model/family_nemotron_h.cpp), "nemotron_h_moe"
// when the config has num_experts_per_tok (Nemotron 3's MoE models, "E" blocks), "nemotron_h"
// otherwise: a list of blocks, each an RMSNorm then one mixer, Mamba-2 ("M"), attention
// without position embedding ("*"), an ungated relu2 MLP ("-") or ungated relu2 experts routed
// by sigmoid scores over expert groups plus a shared expert ("E").
//
// Metadata: attention.head_count_kv and feed_forward_length per layer, which say each layer's
// kind as llama.cpp reads them (head_count_kv > 0: attention; feed_forward_length > 0: the MLP
// of that width, in a nemotron_h_moe file an MoE block; both 0: Mamba-2), attention.head_count
// / key_length, the ssm.* sizes, the norm epsilon under attention.layer_norm_epsilon
// (model/gguf_arch_common.cpp). A nemotron_h file's expert_* keys (a dense config's defaults)
// are ignored. A nemotron_h_moe file writes its "-" layers with feed_forward_length 0 (the
// converter counts only "E" layers as feed-forward ones): a layer holding ffn_up.weight is one,
// its width that tensor's rows (no key records it; llama.cpp cannot load such a file, it takes
// the layer for a Mamba one). Not recorded: time_step_min, the floor transformers clamps dt to
// in prefill, taken as the class default (0.001) that the published configs state.
//
// nemotron_h_moe's MoE keys: expert_count, expert_used_count (top-k), expert_feed_forward_length
// (the experts' width), expert_shared_feed_forward_length (the shared expert's),
// expert_weights_norm (renormalise the k weights; absent: false, as llama.cpp reads it),
// expert_weights_scale (routed_scaling_factor; absent or 0: 1, as llama.cpp), expert_group_count
// / expert_group_used_count (n_group / topk_group; absent: 1). The routing is sigmoid with the
// correction bias, which no key states (llama.cpp hard-codes it). expert_shared_count is
// ignored, as transformers does (one shared expert). moe_latent_size (absent or 0: none) is the
// routed experts' latent width (Nemotron 3 Super), between ffn_latent_down (fc1_latent_proj)
// and ffn_latent_up (fc2_latent_proj). Refused by name: nextn_predict_layers (the
// multi-token-prediction block the converter appends as one more layer).
//
// Tensors, per layer: attn_norm (the block's norm), then the Mamba-2 mixer's ssm_*, attention's
// attn_* (Q and K rows interleaved per head by the converter, as for Llama, although the model
// has no rope: put back), ffn_up / ffn_down (the MLP, with biases when mlp_bias), or the MoE:
// ffn_gate_inp (the router), exp_probs_b.bias (the router's e_score_correction_bias),
// ffn_up_exps / ffn_down_exps (the experts stacked (E, F, d) / (E, d, F), d the latent width when
// there is one, kept stacked: "mixer.experts.{up,down}_proj", as transformers 5 holds them),
// ffn_{up,down}_shexp (the shared expert, with biases when mlp_bias) and ffn_latent_down /
// ffn_latent_up (with biases when mlp_bias; llama.cpp reads no bias there, the converter
// writes what the checkpoint has).
#include <string>

#include "model/gguf_arch.hpp"

namespace ssmkit::model {
namespace {

constexpr GgufNamePair kNemotronHLayer[] = {
    {"attn_norm.weight", "norm.weight"},
    {"ffn_up.weight", "mixer.up_proj.weight"},
    {"ffn_up.bias", "mixer.up_proj.bias"},
    {"ffn_down.weight", "mixer.down_proj.weight"},
    {"ffn_down.bias", "mixer.down_proj.bias"},
    {"ffn_gate_inp.weight", "mixer.gate.weight"},
    {"exp_probs_b.bias", "mixer.gate.e_score_correction_bias"},
    {"ffn_up_exps.weight", "mixer.experts.up_proj"},
    {"ffn_down_exps.weight", "mixer.experts.down_proj"},
    {"ffn_up_shexp.weight", "mixer.shared_experts.up_proj.weight"},
    {"ffn_up_shexp.bias", "mixer.shared_experts.up_proj.bias"},
    {"ffn_down_shexp.weight", "mixer.shared_experts.down_proj.weight"},
    {"ffn_down_shexp.bias", "mixer.shared_experts.down_proj.bias"},
    {"ffn_latent_down.weight", "mixer.fc1_latent_proj.weight"},
    {"ffn_latent_down.bias", "mixer.fc1_latent_proj.bias"},
    {"ffn_latent_up.weight", "mixer.fc2_latent_proj.weight"},
    {"ffn_latent_up.bias", "mixer.fc2_latent_proj.bias"},
};

// What a nemotron_h_moe file's MoE blocks are, and what the engine does not run, by name.
Status ReadMoe(const GgufKeys& k, int64_t n_layer, FeedForwardConfig* f) {
  const GgufFile& file = k.file();
  int64_t nextn = 0;
  f->latent = 0;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("moe_latent_size", &f->latent));
  const bool projections = AnyLayerTensor(file, "ffn_latent_down.weight");
  if (f->latent < 0 || (f->latent == 0 && projections)) {
    return k.Wrong("moe_latent_size",
                   projections ? "the latent width (the file has ffn_latent_down tensors)"
                               : "absent, 0 or a width >= 1",
                   k.Has("moe_latent_size") ? std::to_string(f->latent) : "absent");
  }
  SSMKIT_RETURN_IF_ERROR(k.OptInt("nextn_predict_layers", &nextn));
  if (nextn > 0) {
    return Status::Unsupported(file.label() + ": metadata key '" + k.Key("nextn_predict_layers") +
                               "' is " + std::to_string(nextn) +
                               ": the multi-token-prediction block is not supported (the "
                               "converter's --no-mtp leaves it out)");
  }
  f->sigmoid_groups = true;
  SSMKIT_RETURN_IF_ERROR(k.Int("expert_count", &f->num_experts));
  SSMKIT_RETURN_IF_ERROR(k.Int("expert_used_count", &f->top_k));
  std::vector<int64_t> width;
  SSMKIT_RETURN_IF_ERROR(k.PerLayer("expert_feed_forward_length", n_layer, &width));
  SSMKIT_RETURN_IF_ERROR(k.NonZero("expert_feed_forward_length", width, "width on every MoE layer",
                                   &f->moe_intermediate));
  SSMKIT_RETURN_IF_ERROR(k.Int("expert_shared_feed_forward_length", &f->shared_intermediate));
  f->normalize_top_k = false;
  SSMKIT_RETURN_IF_ERROR(k.OptBool("expert_weights_norm", &f->normalize_top_k));
  f->routed_scaling = 0.0f;
  SSMKIT_RETURN_IF_ERROR(k.OptFloat("expert_weights_scale", &f->routed_scaling));
  if (f->routed_scaling == 0.0f) f->routed_scaling = 1.0f;
  f->groups = 1;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("expert_group_count", &f->groups));
  f->top_k_groups = f->groups == 1 ? 1 : 0;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("expert_group_used_count", &f->top_k_groups));
  const int64_t E = f->num_experts, G = f->groups;
  if (G < 1 || E % G != 0 || E / G < 2) {
    return k.Wrong(
        "expert_group_count",
        "a divisor of expert_count " + std::to_string(E) + " leaving >= 2 experts per group",
        std::to_string(G));
  }
  if (f->top_k_groups < 1 || f->top_k_groups > G) {
    return k.Wrong("expert_group_used_count",
                   "in [1, expert_group_count " + std::to_string(G) + "]",
                   k.Has("expert_group_used_count") ? std::to_string(f->top_k_groups) : "absent");
  }
  if (f->top_k > f->top_k_groups * (E / G)) {
    return k.Wrong("expert_used_count",
                   "at most the experts of the expert_group_used_count kept groups (" +
                       std::to_string(f->top_k_groups * (E / G)) + ")",
                   std::to_string(f->top_k));
  }
  return Status::Ok();
}

// The rows of the first "blk.N.ffn_up.weight" (0: none): the width of a nemotron_h_moe file's
// MLP layers, which no key records.
int64_t DenseMlpWidth(const GgufFile& f, int64_t n_layer) {
  for (int64_t i = 0; i < n_layer; ++i) {
    const GgufTensor* t = f.FindTensor("blk." + std::to_string(i) + ".ffn_up.weight");
    if (t != nullptr && !t->shape.empty()) return t->shape[0];
  }
  return 0;
}

// `arch`: "nemotron_h" or "nemotron_h_moe".
Status ReadNemotronH(const GgufFile& f, const std::string& arch, ModelConfig* config) {
  const bool moe = arch == "nemotron_h_moe";
  const GgufKeys k(f, arch);
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
  std::vector<bool> dense(static_cast<size_t>(c.n_layer));
  if (moe) {
    SSMKIT_RETURN_IF_ERROR(ReadMoe(k, c.n_layer, &mlp));
    dense = LayersWithTensor(f, c.n_layer, "ffn_up.weight");
    mlp.intermediate = DenseMlpWidth(f, c.n_layer);
  } else {
    SSMKIT_RETURN_IF_ERROR(
        k.NonZero("feed_forward_length", ffn, "width on every MLP layer", &mlp.intermediate));
  }
  // mlp_bias: the MLP's and the shared expert's biases alike.
  mlp.bias = AnyLayerTensor(f, "ffn_up.bias") || AnyLayerTensor(f, "ffn_up_shexp.bias");
  SSMKIT_RETURN_IF_ERROR(k.OptInt("context_length", &c.max_position_embeddings));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    if (kv_heads[i] > 0 && ffn[i] > 0) {
      return k.Wrong("feed_forward_length", "0 on attention layers",
                     std::to_string(ffn[i]) + " on layer " + std::to_string(i));
    }
    BlockKind kind = BlockKind::kMamba2;
    if (kv_heads[i] > 0) {
      kind = BlockKind::kAttention;
    } else if (ffn[i] > 0) {
      kind = moe ? BlockKind::kMoe : BlockKind::kMlp;
    } else if (dense[static_cast<size_t>(i)]) {
      kind = BlockKind::kMlp;
    }
    c.blocks.push_back({kind, i});
  }
  *config = std::move(c);
  return Status::Ok();
}

}  // namespace

Status ReadNemotronHGgufConfig(const GgufFile& f, ModelConfig* config) {
  return ReadNemotronH(f, "nemotron_h", config);
}

Status ReadNemotronHMoeGgufConfig(const GgufFile& f, ModelConfig* config) {
  return ReadNemotronH(f, "nemotron_h_moe", config);
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

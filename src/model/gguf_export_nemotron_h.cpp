// Writing general.architecture "nemotron_h" (NemotronHForCausalLM without MoE layers) and
// "nemotron_h_moe" (with "E" layers), as llama.cpp's converter writes them (its
// conversion/nemotron.py, through granite.py's hybrid writer): attention.head_count_kv and
// feed_forward_length per layer (which say each layer's kind), the norm epsilon as
// attention.layer_norm_epsilon, no rope (rope.scaling.finetuned false, context_length 2^20,
// rope.dimension_count hidden / heads), key_length / value_length; Q and K rows interleaved per
// head as for Llama although nothing rotates them. The Mamba in_proj / out_proj biases of a
// checkpoint with use_bias, and the shared expert's biases (mlp_bias) of a nemotron_h_moe, are
// written as the converter writes them (llama.cpp does not read them: such files load here, not
// there).
//
// nemotron_h_moe: feed_forward_length is the experts' width on the "E" layers and 0 on all
// others, the "-" MLP layers too (the converter counts only "E" layers; the reader finds an MLP
// layer by its ffn_up tensor, llama.cpp takes it for a Mamba one and cannot load the file); the
// expert_* keys (count, used count, group count / used count, widths, shared count, weights
// norm and scale) and moe_latent_size when config.json states one; the router, its correction
// bias as exp_probs_b.bias, the per-expert tensors stacked (E, F, d) / (E, d, F) as
// ffn_{up,down}_exps, the shared expert as ffn_{up,down}_shexp, the latent projections (with
// moe_latent_size) as ffn_latent_down / ffn_latent_up.
#include <string>
#include <vector>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

Status CheckNemotronH(const ModelConfig& c, const std::string& input) {
  if (c.ffn.activation != "relu2") {
    return Status::Unsupported(input + ": " + c.hf_architecture() + ": mlp_hidden_act '" +
                               c.ffn.activation +
                               "': llama.cpp's nemotron_h files state no activation (relu2)");
  }
  return Status::Ok();
}

void AddNemotronHKeys(const ExportInput& in, GgufWriter* w) {
  const ModelConfig& c = in.config;
  const AttentionConfig& att = c.attention;
  const FeedForwardConfig& f = c.ffn;
  const bool moe = HasMoeBlocks(c);
  const std::string arch = moe ? "nemotron_h_moe" : "nemotron_h", a = arch + ".";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  AddGeneralKeys(in, arch.c_str(), w);
  w->AddU32(a + "block_count", u32(c.n_layer));
  w->AddU32(a + "context_length", 1u << 20);
  w->AddU32(a + "embedding_length", u32(c.d_model));
  std::vector<int32_t> ffn(static_cast<size_t>(c.n_layer), 0);
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind == (moe ? BlockKind::kMoe : BlockKind::kMlp))
      ffn[static_cast<size_t>(b.layer)] =
          static_cast<int32_t>(moe ? f.moe_intermediate : f.intermediate);
  }
  w->AddI32s(a + "feed_forward_length", ffn);
  w->AddU32(a + "attention.head_count", u32(att.num_heads));
  AddPerLayerKvHeads(c, arch, w);
  float theta = 0.0f;
  if (ConfigRopeTheta(in.json, &theta)) w->AddF32(a + "rope.freq_base", theta);
  w->AddF32(a + "attention.layer_norm_epsilon", c.norm_eps);
  if (moe) {
    w->AddU32(a + "expert_count", u32(f.num_experts));
    w->AddU32(a + "expert_used_count", u32(f.top_k));
    w->AddU32(a + "expert_group_count", u32(f.groups));
    w->AddU32(a + "expert_group_used_count", u32(f.top_k_groups));
  }
  w->AddU32(a + "vocab_size", u32(c.config_vocab_size));
  w->AddU32(a + "rope.dimension_count", u32(c.d_model / att.num_heads));
  AddMamba2Keys(c, arch, w);
  w->AddBool(a + "rope.scaling.finetuned", false);
  w->AddU32(a + "attention.key_length", u32(att.head_dim));
  w->AddU32(a + "attention.value_length", u32(att.head_dim));
  if (!moe) return;
  int64_t shared_count = 1, latent = 0;
  (void)in.json.Int("n_shared_experts", &shared_count);  // absent: transformers' 1
  w->AddU32(a + "expert_feed_forward_length", u32(f.moe_intermediate));
  w->AddU32(a + "expert_shared_feed_forward_length", u32(f.shared_intermediate));
  w->AddU32(a + "expert_shared_count", u32(shared_count));
  w->AddBool(a + "expert_weights_norm", f.normalize_top_k);
  w->AddF32(a + "expert_weights_scale", f.routed_scaling);
  if (in.json.Has("moe_latent_size") && in.json.Int("moe_latent_size", &latent).ok())
    w->AddU32(a + "moe_latent_size", u32(latent));
}

// Checkpoints saved under "model." instead of "backbone." (both read by the family's planner).
void RespellNemotronH(ExportTensor t, const ModelConfig&, std::vector<ExportTensor>* out) {
  if (t.name.compare(0, 6, "model.") == 0) t.name = "backbone." + t.name.substr(6);
  out->push_back(std::move(t));
}

}  // namespace

// One writer, two architectures: FindGgufExporter picks nemotron_h_moe for a model with MoE
// layers, and AddNemotronHKeys writes that name's keys.
const GgufExporter kNemotronHExporter = {"nemotron_h", CheckNemotronH, AddNemotronHKeys,
                                         RespellNemotronH, nullptr};
const GgufExporter kNemotronHMoeExporter = {"nemotron_h_moe", CheckNemotronH, AddNemotronHKeys,
                                            RespellNemotronH, nullptr};

}  // namespace ssmkit::model

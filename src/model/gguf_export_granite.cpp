// Writing general.architecture "granitehybrid": GraniteMoeHybridForCausalLM (Granite-4.0-H,
// dense or MoE) and BambaForCausalLM, as llama.cpp's converter writes both (its
// conversion/granite.py): the Llama keys (rope.dimension_count hidden / heads, no key_length),
// Granite's multipliers, attention.head_count_kv per layer (0: a Mamba-2 layer),
// rope.scaling.finetuned (rope on or off) and the ssm.* sizes; the shared MLP's and the
// experts' fused gate/up tensors split in two, Q and K rows interleaved per head.
//
// Where the converter's value is not the checkpoint's model, the model's is written (see
// model/gguf_export_arch.hpp):
//   - rope.scaling.finetuned: the converter writes false for every GraniteMoeHybrid (the
//     published ones have no position embedding); a checkpoint with position_embedding_type
//     "rope" gets true, its context_length, and rope over the whole head;
//   - rope.dimension_count with rope: the rotated dims the model uses (Bamba's half head when
//     its config states no attn_rotary_emb, where the converter writes the whole head);
//   - a dense model's feed_forward_length: its MLP's width (llama.cpp sizes the dense MLP by
//     it), where the converter writes intermediate_size, the unused expert width; its
//     expert_used_count 0, where the converter writes num_experts_per_tok (llama.cpp asserts
//     it is at most expert_count, 0);
//   - Granite's four multipliers are written even where config.json leaves them at the class
//     defaults (the converter writes only those stated; llama.cpp's defaults differ);
//   - attention.key_length / value_length when the head dim is not hidden / heads.
#include <string>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

Status CheckGraniteHybrid(const ModelConfig& c, const std::string& input) {
  return CheckSiluActivation(c, input, "granitehybrid");
}

void AddGraniteHybridKeys(const ExportInput& in, GgufWriter* w) {
  const ModelConfig& c = in.config;
  const AttentionConfig& att = c.attention;
  const std::string a = "granitehybrid.";
  const bool bamba = c.family == "bamba", rope = att.rotary_dim > 0;
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  AddGeneralKeys(in, "granitehybrid", w);
  w->AddU32(a + "block_count", u32(c.n_layer));
  // Without rope the converter's 2^20: a model without position embedding has no limit.
  if (!rope || c.max_position_embeddings > 0)
    w->AddU32(a + "context_length", rope ? u32(c.max_position_embeddings) : 1u << 20);
  w->AddU32(a + "embedding_length", u32(c.d_model));
  const bool moe = c.ffn.num_experts > 0;
  w->AddU32(a + "feed_forward_length", u32(moe ? c.ffn.moe_intermediate : c.ffn.intermediate));
  w->AddU32(a + "attention.head_count", u32(att.num_heads));
  AddPerLayerKvHeads(c, "granitehybrid", w);
  float theta = static_cast<float>(att.rope_theta);
  if (rope || ConfigRopeTheta(in.json, &theta)) w->AddF32(a + "rope.freq_base", theta);
  w->AddF32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  if (!bamba) {
    w->AddU32(a + "expert_count", u32(c.ffn.num_experts));
    w->AddU32(a + "expert_used_count", u32(c.ffn.num_experts > 0 ? c.ffn.top_k : 0));
  }
  w->AddU32(a + "vocab_size", u32(c.config_vocab_size));
  int64_t rotary = c.d_model / att.num_heads;  // the converter's: hidden / heads
  if (rope) {
    rotary = att.rotary_dim;
  } else {
    (void)in.json.Int("attn_rotary_emb", &rotary);  // absent (or not a number): as it is
  }
  w->AddU32(a + "rope.dimension_count", u32(rotary));
  if (!bamba) {
    const Multipliers& m = c.multipliers;
    w->AddF32(a + "attention.scale", ConfigFloat(in.json, "attention_multiplier", att.scale));
    w->AddF32(a + "embedding_scale", ConfigFloat(in.json, "embedding_multiplier", m.embedding));
    w->AddF32(a + "residual_scale", ConfigFloat(in.json, "residual_multiplier", m.residual));
    w->AddF32(a + "logit_scale", ConfigFloat(in.json, "logits_scaling", 1.0f / m.logits));
    if (c.ffn.shared_intermediate > 0)
      w->AddU32(a + "expert_shared_feed_forward_length", u32(c.ffn.shared_intermediate));
  }
  AddMamba2Keys(c, "granitehybrid", w);
  w->AddBool(a + "rope.scaling.finetuned", rope);
  if (att.head_dim != c.d_model / att.num_heads) {
    w->AddU32(a + "attention.key_length", u32(att.head_dim));
    w->AddU32(a + "attention.value_length", u32(att.head_dim));
  }
}

// The checkpoint's fused feed-forward tensors (the hub files' names, transformers 5's) as the
// reader's split ones: {checkpoint suffix, first half (or the whole), second half}.
constexpr const char* kGraniteSpellings[][3] = {
    {"shared_mlp.input_linear.weight", "shared_mlp.gate_proj.weight", "shared_mlp.up_proj.weight"},
    {"shared_mlp.output_linear.weight", "shared_mlp.down_proj.weight", nullptr},
    {"block_sparse_moe.input_linear.weight", "block_sparse_moe.experts.gate_proj",
     "block_sparse_moe.experts.up_proj"},
    {"block_sparse_moe.experts.gate_up_proj", "block_sparse_moe.experts.gate_proj",
     "block_sparse_moe.experts.up_proj"},
    {"block_sparse_moe.output_linear.weight", "block_sparse_moe.experts.down_proj", nullptr},
    {"block_sparse_moe.router.weight", "block_sparse_moe.router.layer.weight", nullptr},
};

void RespellGraniteHybrid(ExportTensor t, const ModelConfig&, std::vector<ExportTensor>* out) {
  for (const auto& [from, first, second] : kGraniteSpellings) {
    const std::string suffix = from;
    if (t.name.size() < suffix.size() ||
        t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string prefix = t.name.substr(0, t.name.size() - suffix.size());
    if (second == nullptr) {
      t.name = prefix + first;
      break;
    }
    SplitHalves(t, prefix + first, prefix + second, out);
    return;
  }
  out->push_back(std::move(t));
}

}  // namespace

const GgufExporter kGraniteHybridExporter = {"granitehybrid", CheckGraniteHybrid,
                                             AddGraniteHybridKeys, RespellGraniteHybrid, nullptr};

}  // namespace ssmkit::model

// Writing general.architecture "falcon-h1": FalconH1ForCausalLM, as llama.cpp's converter writes
// it (its conversion/falcon_h1.py): the Mamba-2 keys, then the attention's (head_count_kv one
// count, key_length / value_length the head dim, rope.freq_base), feed_forward_length; Q and K
// in the checkpoint's row order (this converter does not permute them).
//
// The converter folds every muP multiplier into the weights it scales and records none of them
// (model/gguf_arch_falcon_h1.cpp reads the file as the checkpoint with every multiplier 1);
// here the same products in the same f32 order. Where it would not be the checkpoint's model,
// the model is written instead (model/gguf_export_arch.hpp):
//   - a multiplier on a layer's input (attention_in on Q / K / V, ssm_in on in_proj) scales its
//     weight only, one on its output (key_multiplier on K, attention_out, ssm_multipliers, the
//     MLP's) its bias too (the converter scales a bias as its weight);
//   - a tied LM head whose lm_head_multiplier is not embedding_multiplier is written as its own
//     output.weight (the converter scales the embedding, which llama.cpp then also uses as the
//     head).
// Refused: Mamba in_proj / out_proj biases (llama.cpp's falcon-h1 reads none, and the converter
// fails on them), and the gated norm after the gate (mamba_norm_before_gate with
// mamba_rms_norm: llama.cpp gates before the norm).
#include <string>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

Status CheckFalconH1(const ModelConfig& c, const std::string& input) {
  const std::string label = input + ": " + c.hf_architecture() + ": ";
  if (c.proj_bias || c.has_out_proj_bias()) {
    return Status::Unsupported(label +
                               "Mamba in_proj / out_proj biases (mamba_proj_bias), which "
                               "llama.cpp's falcon-h1 does not read");
  }
  if (c.gated_norm && c.norm_before_gate) {
    return Status::Unsupported(label +
                               "the gated RMSNorm normalizes before the gate "
                               "(mamba_norm_before_gate); llama.cpp's falcon-h1 gates first");
  }
  return CheckSiluActivation(c, input, "falcon-h1");
}

void AddFalconH1Keys(const ExportInput& in, GgufWriter* w) {
  const ModelConfig& c = in.config;
  const AttentionConfig& att = c.attention;
  const std::string a = "falcon-h1.";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  AddGeneralKeys(in, "falcon-h1", w);
  w->AddU32(a + "context_length", u32(c.max_position_embeddings));
  w->AddU32(a + "embedding_length", u32(c.d_model));
  w->AddU32(a + "feed_forward_length", u32(c.ffn.intermediate));
  w->AddU32(a + "attention.head_count", u32(att.num_heads));
  w->AddU32(a + "block_count", u32(c.n_layer));
  AddMamba2Keys(c, "falcon-h1", w);
  w->AddF32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  w->AddU32(a + "vocab_size", u32(c.config_vocab_size));
  w->AddU32(a + "attention.head_count_kv", u32(att.num_kv_heads));
  w->AddU32(a + "attention.key_length", u32(att.head_dim));
  w->AddU32(a + "attention.value_length", u32(att.head_dim));
  w->AddF32(a + "rope.freq_base", static_cast<float>(att.rope_theta));
}

// A tied head with its own multiplier: the embedding a second time, as the LM head.
void RespellFalconH1(ExportTensor t, const ModelConfig& c, std::vector<ExportTensor>* out) {
  const Multipliers& m = c.multipliers;
  if (t.name == "model.embed_tokens.weight" && c.tie_embeddings && m.logits != m.embedding)
    out->push_back({"lm_head.weight", t.shape, t.values});
  out->push_back(std::move(t));
}

void FoldFalconH1(const std::string& rest, const ModelConfig& c, ExportTensor* t) {
  const Multipliers& m = c.multipliers;
  const bool bias = rest.size() > 5 && rest.compare(rest.size() - 5, 5, ".bias") == 0;
  const std::string base = rest.substr(0, rest.find('.'));
  if (rest == "token_embd.weight") Scale(t, m.embedding);
  if (rest == "output.weight") Scale(t, m.logits);
  if ((base == "attn_q" || base == "attn_v") && !bias) Scale(t, m.attention_in);
  if (base == "attn_k") {
    Scale(t, m.key);
    if (!bias) Scale(t, m.attention_in);
  }
  if (base == "attn_output") Scale(t, m.attention_out);
  if (base == "ssm_out") Scale(t, m.ssm_out);
  if (base == "ffn_gate") Scale(t, m.mlp_gate);
  if (base == "ffn_down") Scale(t, m.mlp_down);
  if (base == "ssm_in") {
    if (!bias) Scale(t, m.ssm_in);
    // Each output section [z (D), x (D), B (G N), C (G N), dt (H)] by its ssm_multipliers entry.
    const int64_t D = c.d_inner, GN = c.ngroups * c.d_state;
    const int64_t cols = static_cast<int64_t>(t->values.size()) / t->shape[0];
    for (int64_t r = 0; r < t->shape[0]; ++r) {
      const float s = r < D              ? m.ssm_z
                      : r < 2 * D        ? m.ssm_x
                      : r < 2 * D + GN   ? m.ssm_b
                      : r < 2 * (D + GN) ? m.ssm_c
                                         : m.ssm_dt;
      for (int64_t j = 0; j < cols; ++j) t->values[static_cast<size_t>(r * cols + j)] *= s;
    }
  }
}

}  // namespace

const GgufExporter kFalconH1Exporter = {"falcon-h1", CheckFalconH1, AddFalconH1Keys,
                                        RespellFalconH1, FoldFalconH1};

}  // namespace ssmkit::model

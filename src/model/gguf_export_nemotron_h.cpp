// Writing general.architecture "nemotron_h": NemotronHForCausalLM without MoE layers, as
// llama.cpp's converter writes it (its conversion/nemotron.py, through granite.py's hybrid
// writer): attention.head_count_kv and feed_forward_length per layer (which say each layer's
// kind), the norm epsilon as attention.layer_norm_epsilon, no rope (rope.scaling.finetuned
// false, context_length 2^20, rope.dimension_count hidden / heads), key_length / value_length;
// Q and K rows interleaved per head as for Llama although nothing rotates them. The Mamba
// in_proj / out_proj biases of a checkpoint with use_bias are written as the converter writes
// them (llama.cpp's nemotron_h does not read them: such files load here, not there). A model
// with MoE layers is refused: llama.cpp writes it as nemotron_h_moe, which the reader
// (model/gguf_arch_nemotron_h.cpp) reads and this writer does not write yet.
#include <string>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

Status CheckNemotronH(const ModelConfig& c, const std::string& input) {
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind == BlockKind::kMoe) {
      return Status::Unsupported(input + ": " + c.hf_architecture() + ": MoE layers (layer " +
                                 std::to_string(b.layer) +
                                 "): llama.cpp writes them as nemotron_h_moe, which this version "
                                 "reads but does not write yet");
    }
  }
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
  const std::string a = "nemotron_h.";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  AddGeneralKeys(in, "nemotron_h", w);
  w->AddU32(a + "block_count", u32(c.n_layer));
  w->AddU32(a + "context_length", 1u << 20);
  w->AddU32(a + "embedding_length", u32(c.d_model));
  std::vector<int32_t> ffn(static_cast<size_t>(c.n_layer), 0);
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind == BlockKind::kMlp)
      ffn[static_cast<size_t>(b.layer)] = static_cast<int32_t>(c.ffn.intermediate);
  }
  w->AddI32s(a + "feed_forward_length", ffn);
  w->AddU32(a + "attention.head_count", u32(att.num_heads));
  AddPerLayerKvHeads(c, "nemotron_h", w);
  float theta = 0.0f;
  if (ConfigRopeTheta(in.json, &theta)) w->AddF32(a + "rope.freq_base", theta);
  w->AddF32(a + "attention.layer_norm_epsilon", c.norm_eps);
  w->AddU32(a + "vocab_size", u32(c.config_vocab_size));
  w->AddU32(a + "rope.dimension_count", u32(c.d_model / att.num_heads));
  AddMamba2Keys(c, "nemotron_h", w);
  w->AddBool(a + "rope.scaling.finetuned", false);
  w->AddU32(a + "attention.key_length", u32(att.head_dim));
  w->AddU32(a + "attention.value_length", u32(att.head_dim));
}

// Checkpoints saved under "model." instead of "backbone." (both read by the family's planner).
void RespellNemotronH(ExportTensor t, const ModelConfig&, std::vector<ExportTensor>* out) {
  if (t.name.compare(0, 6, "model.") == 0) t.name = "backbone." + t.name.substr(6);
  out->push_back(std::move(t));
}

}  // namespace

const GgufExporter kNemotronHExporter = {"nemotron_h", CheckNemotronH, AddNemotronHKeys,
                                         RespellNemotronH, nullptr};

}  // namespace ssmkit::model

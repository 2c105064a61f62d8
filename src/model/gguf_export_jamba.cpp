// Writing general.architecture "jamba": JambaForCausalLM, as llama.cpp's converter writes it (its
// conversion/jamba.py): the Mamba-1 sizes (time_step_rank: dt_rank), attention.head_count_kv per
// layer (0: a Mamba layer), feed_forward_length (the MLP's and every expert's width), the expert
// counts, context_length; no key says which layers are MoE (a layer with a router is). The
// per-expert tensors stacked (E, F, d) / (E, d, F) as ffn_{gate,up,down}_exps (transformers 5's
// fused experts.gate_up_proj split in two), A as -exp(A_log), the conv weight squeezed, Q and K
// in the checkpoint's row order (this converter does not permute them).
//
// The tokenizer is a SentencePiece vocabulary ("llama", model/gguf_export_tokenizer.cpp). Where
// the converter's value is not the checkpoint's model (model/gguf_export_arch.hpp): from a
// tokenizer.json without a tokenizer.model the converter scores every piece alike and writes
// add_space_prefix false, which llama.cpp tokenizes otherwise than transformers; here the
// pieces are scored by the merges' order, add_space_prefix is what the normalizer does, the
// vocabulary has one token per embedding row (unused "[PADi]" past the tokenizer's, as the
// converter pads a tokenizer.model's), and the unk_token and special added tokens are unknown /
// control where the converter asks transformers, which without a tokenizer_config.json knows
// none.
//
// Written as the converter writes them though llama.cpp's jamba does not read them (such files
// load here, not there): Mamba in_proj / out_proj biases (mamba_proj_bias).
#include <string>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

Status CheckJamba(const ModelConfig& c, const std::string& input) {
  return CheckSiluActivation(c, input, "jamba");
}

void AddJambaKeys(const ExportInput& in, GgufWriter* w) {
  const ModelConfig& c = in.config;
  const std::string a = "jamba.";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  AddGeneralKeys(in, "jamba", w);
  w->AddU32(a + "block_count", u32(c.n_layer));
  w->AddU32(a + "context_length", u32(c.max_position_embeddings));
  w->AddU32(a + "embedding_length", u32(c.d_model));
  w->AddU32(a + "feed_forward_length", u32(c.ffn.intermediate));
  w->AddU32(a + "attention.head_count", u32(c.attention.num_heads));
  AddPerLayerKvHeads(c, "jamba", w);
  w->AddU32(a + "ssm.conv_kernel", u32(c.d_conv));
  w->AddU32(a + "ssm.inner_size", u32(c.d_inner));
  w->AddU32(a + "ssm.state_size", u32(c.d_state));
  w->AddU32(a + "ssm.time_step_rank", u32(c.dt_rank));
  w->AddF32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  w->AddU32(a + "expert_count", u32(c.ffn.num_experts));
  w->AddU32(a + "expert_used_count", u32(c.ffn.top_k));
}

// transformers 5's fused experts (E, 2F, d), gate rows first, as the reader's two stacks.
void RespellJamba(ExportTensor t, const ModelConfig&, std::vector<ExportTensor>* out) {
  const std::string fused = "feed_forward.experts.gate_up_proj";
  if (t.name.size() >= fused.size() &&
      t.name.compare(t.name.size() - fused.size(), fused.size(), fused) == 0) {
    const std::string prefix = t.name.substr(0, t.name.size() - fused.size());
    SplitHalves(t, prefix + "feed_forward.experts.gate_proj",
                prefix + "feed_forward.experts.up_proj", out);
    return;
  }
  out->push_back(std::move(t));
}

}  // namespace

const GgufExporter kJambaExporter = {.arch = "jamba",
                                     .check = CheckJamba,
                                     .add_keys = AddJambaKeys,
                                     .respell = RespellJamba,
                                     .fold = nullptr,
                                     .sentencepiece = true};

}  // namespace ssmkit::model

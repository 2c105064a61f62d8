// general.architecture "falcon-h1": llama.cpp's converter writes it for FalconH1ForCausalLM
// (TII's Falcon-H1): per layer attention and a Mamba-2 mixer side by side on one RMSNorm's
// output, then an RMSNorm and a gated MLP.
//
// The converter multiplies every muP multiplier of the config into the weights (the embedding,
// the LM head, Q / K / V and the attention output, key_multiplier into K, in_proj by
// ssm_in_multiplier and each of its output sections [z, x, B, C, dt] by its ssm_multipliers
// entry, out_proj, the MLP's gate and down) and records none of them, so the file's model is
// the checkpoint's with every multiplier 1: the config keeps the defaults (1).
//
// Metadata: the ssm.* sizes, attention.head_count / head_count_kv (one count for every layer)
// / key_length, rope.freq_base (rope over the whole head), feed_forward_length (the MLP's width),
// context_length. Not recorded: mamba_rms_norm, read from the tensors (ssm_norm present: the
// gated RMSNorm, gate before the norm, as llama.cpp's Mamba-2 layer computes it).
//
// Tensors, per layer: attn_norm (the shared input norm), the Mamba-2 mixer's ssm_* and
// attention's attn_* (Q and K in the checkpoint's row order: this converter does not permute
// them), "ffn_norm" (the pre-MLP norm, written without a ".weight" suffix), ffn_{gate,up,down}.
#include <string>

#include "model/gguf_arch.hpp"

namespace ssmkit::model {
namespace {

constexpr GgufNamePair kFalconH1Layer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm", "pre_ff_layernorm.weight"},
    {"ffn_norm.weight", "pre_ff_layernorm.weight"},
    {"ffn_gate.weight", "feed_forward.gate_proj.weight"},
    {"ffn_up.weight", "feed_forward.up_proj.weight"},
    {"ffn_down.weight", "feed_forward.down_proj.weight"},
};

}  // namespace

Status ReadFalconH1GgufConfig(const GgufFile& f, ModelConfig* config) {
  const GgufKeys k(f, "falcon-h1");
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR(ReadGgufCommon(k, &c));
  c.family = "falcon_h1";
  SSMKIT_RETURN_IF_ERROR(ReadGgufMamba2(k, &c));
  c.gated_norm = AnyLayerTensor(f, "ssm_norm.weight");
  c.norm_before_gate = false;
  std::vector<int64_t> kv_heads;
  SSMKIT_RETURN_IF_ERROR(k.PerLayer("attention.head_count_kv", c.n_layer, &kv_heads));
  for (int64_t h : kv_heads) {
    if (h == 0) return k.Wrong("attention.head_count_kv", "a count >= 1 on every layer", "0");
  }
  SSMKIT_RETURN_IF_ERROR(ReadGgufAttention(k, kv_heads, /*rope=*/true, &c));
  FeedForwardConfig& ffn = c.ffn;
  ffn.activation = "silu";  // the converter refuses any other hidden_act
  ffn.gated = true;
  SSMKIT_RETURN_IF_ERROR(k.Int("feed_forward_length", &ffn.intermediate));
  ffn.bias = AnyLayerTensor(f, "ffn_up.bias");
  SSMKIT_RETURN_IF_ERROR(k.OptInt("context_length", &c.max_position_embeddings));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    c.blocks.push_back({BlockKind::kParallelHybrid, i});
    c.blocks.push_back({BlockKind::kMlp, i});
  }
  *config = std::move(c);
  return Status::Ok();
}

GgufTensorName MapFalconH1Gguf(const std::string& rest, int64_t layer, const ModelConfig& c) {
  if (layer < 0) {
    return MapGgufOutsideLayers(rest, "model.embed_tokens.weight", "model.final_layernorm.weight");
  }
  GgufTensorName out;
  const std::string l = HfLayerPrefix(layer);
  if (const char* hf = LookupGgufName(kFalconH1Layer, rest)) {
    out.hf = l + hf;
    return out;
  }
  return MapGgufMixer(rest, l + "mamba.", l + "self_attn.", /*unpermute=*/false, c);
}

}  // namespace ssmkit::model

// general.architecture "granitehybrid": llama.cpp's converter writes it for
// GraniteMoeHybridForCausalLM (Granite-4.0-H, dense or MoE) and BambaForCausalLM alike.
//
// Metadata: attention.head_count_kv per layer (0: a Mamba-2 layer, else attention), the ssm.*
// sizes, expert_count / expert_used_count / feed_forward_length (the experts' width) /
// expert_shared_feed_forward_length (the shared MLP, or a dense model's MLP), Granite's
// multipliers embedding_scale, residual_scale, attention.scale, logit_scale (logits are divided
// by it), and rope.scaling.finetuned, which llama.cpp reads as "rope on" (absent: on; the
// converter writes false for GraniteMoeHybrid, whose published models have no position
// embedding, and true for Bamba), with rope.dimension_count rotated dims of each head.
//
// The family: a file with none of Granite's multiplier keys and no experts is Bamba (its plan
// has the MLP biases Bamba may have), any other GraniteMoeHybrid.
//
// Tensors, per layer: attn_norm (the mixer's norm), the Mamba-2 mixer's ssm_* or attention's
// attn_* (Q and K rows interleaved per head by the converter, as for Llama: put back),
// ffn_norm, then ffn_gate_inp + ffn_{gate,up,down}_exps (the experts stacked (E, F, d), kept
// stacked: "block_sparse_moe.experts.{gate,up,down}_proj") + ffn_{gate,up,down}_shexp (the
// shared MLP, split by the converter from its fused input_linear: kept split,
// "shared_mlp.{gate,up,down}_proj"), or ffn_{gate,up,down} (a dense model's MLP, Bamba's with
// biases).
#include <span>
#include <string>

#include "model/gguf_arch.hpp"

namespace ssmkit::model {
namespace {

constexpr const char* kGraniteScales[] = {"embedding_scale", "residual_scale", "attention.scale",
                                          "logit_scale"};

// A MoE model's feed-forward tensors, and a dense model's: the same shared MLP under other names,
// told apart by the model's expert count (a writer inverting this map needs one name each).
constexpr GgufNamePair kGraniteMoeFfn[] = {
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate_inp.weight", "block_sparse_moe.router.layer.weight"},
    {"ffn_gate_exps.weight", "block_sparse_moe.experts.gate_proj"},
    {"ffn_up_exps.weight", "block_sparse_moe.experts.up_proj"},
    {"ffn_down_exps.weight", "block_sparse_moe.experts.down_proj"},
    {"ffn_gate_shexp.weight", "shared_mlp.gate_proj.weight"},
    {"ffn_up_shexp.weight", "shared_mlp.up_proj.weight"},
    {"ffn_down_shexp.weight", "shared_mlp.down_proj.weight"},
};
constexpr GgufNamePair kGraniteDenseFfn[] = {
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "shared_mlp.gate_proj.weight"},
    {"ffn_up.weight", "shared_mlp.up_proj.weight"},
    {"ffn_down.weight", "shared_mlp.down_proj.weight"},
};
constexpr GgufNamePair kBambaFfn[] = {
    {"ffn_norm.weight", "pre_ff_layernorm.weight"},
    {"ffn_gate.weight", "feed_forward.gate_proj.weight"},
    {"ffn_gate.bias", "feed_forward.gate_proj.bias"},
    {"ffn_up.weight", "feed_forward.up_proj.weight"},
    {"ffn_up.bias", "feed_forward.up_proj.bias"},
    {"ffn_down.weight", "feed_forward.down_proj.weight"},
    {"ffn_down.bias", "feed_forward.down_proj.bias"},
};

Status ReadFeedForward(const GgufKeys& k, bool bamba, ModelConfig* c) {
  FeedForwardConfig& f = c->ffn;
  f.activation = "silu";  // the converter refuses any other hidden_act
  f.gated = true;
  int64_t experts = 0, width = 0;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("expert_count", &experts));
  SSMKIT_RETURN_IF_ERROR(k.Int("feed_forward_length", &width));
  int64_t shared = 0;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("expert_shared_feed_forward_length", &shared));
  if (experts > 0) {
    f.num_experts = experts;
    SSMKIT_RETURN_IF_ERROR(k.Int("expert_used_count", &f.top_k));
    f.moe_intermediate = width;
    f.shared_intermediate = shared;
    f.topk_then_softmax = true;
    return Status::Ok();
  }
  // A dense model: Granite's shared MLP is its MLP (the converter writes its width as the
  // shared width; feed_forward_length is the unused expert width), Bamba's is
  // feed_forward_length.
  f.intermediate = !bamba && shared > 0 ? shared : width;
  f.shared_intermediate = bamba ? 0 : f.intermediate;
  f.bias = bamba && AnyLayerTensor(k.file(), "ffn_up.bias");
  return Status::Ok();
}

Status ReadMultipliers(const GgufKeys& k, ModelConfig* c) {
  Multipliers& m = c->multipliers;
  SSMKIT_RETURN_IF_ERROR(k.OptFloat("embedding_scale", &m.embedding));
  SSMKIT_RETURN_IF_ERROR(k.OptFloat("residual_scale", &m.residual));
  float scale = 0.0f;
  SSMKIT_RETURN_IF_ERROR(k.OptFloat("attention.scale", &scale));
  c->attention.scale = scale;  // 0 (absent): 1 / sqrt(head dim)
  float logit_scale = 1.0f;
  SSMKIT_RETURN_IF_ERROR(k.OptFloat("logit_scale", &logit_scale));
  if (!(logit_scale != 0.0f)) return k.Wrong("logit_scale", "a non-zero number", "0");
  m.logits = 1.0f / logit_scale;
  return Status::Ok();
}

}  // namespace

Status ReadGraniteHybridGgufConfig(const GgufFile& f, ModelConfig* config) {
  const GgufKeys k(f, "granitehybrid");
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR(ReadGgufCommon(k, &c));
  bool granite = false;
  for (const char* key : kGraniteScales) granite = granite || k.Has(key);
  int64_t experts = 0;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("expert_count", &experts));
  const bool bamba = !granite && experts == 0;
  c.family = bamba ? "bamba" : "granitemoehybrid";
  SSMKIT_RETURN_IF_ERROR(ReadGgufMamba2(k, &c));
  std::vector<int64_t> kv_heads;
  SSMKIT_RETURN_IF_ERROR(k.PerLayer("attention.head_count_kv", c.n_layer, &kv_heads));
  bool rope = true;
  SSMKIT_RETURN_IF_ERROR(k.OptBool("rope.scaling.finetuned", &rope));
  SSMKIT_RETURN_IF_ERROR(ReadGgufAttention(k, kv_heads, rope, &c));
  SSMKIT_RETURN_IF_ERROR(ReadMultipliers(k, &c));
  SSMKIT_RETURN_IF_ERROR(ReadFeedForward(k, bamba, &c));
  SSMKIT_RETURN_IF_ERROR(k.OptInt("context_length", &c.max_position_embeddings));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    c.blocks.push_back({kv_heads[i] > 0 ? BlockKind::kAttention : BlockKind::kMamba2, i});
    c.blocks.push_back({c.ffn.num_experts > 0 ? BlockKind::kMoe : BlockKind::kMlp, i});
  }
  *config = std::move(c);
  return Status::Ok();
}

GgufTensorName MapGraniteHybridGguf(const std::string& rest, int64_t layer, const ModelConfig& c) {
  const bool bamba = c.family == "bamba";
  if (layer < 0) {
    return MapGgufOutsideLayers(rest, "model.embed_tokens.weight",
                                bamba ? "model.final_layernorm.weight" : "model.norm.weight");
  }
  GgufTensorName out;
  const std::string l = HfLayerPrefix(layer);
  if (rest == "attn_norm.weight") {
    out.hf = l + "input_layernorm.weight";
    return out;
  }
  std::span<const GgufNamePair> ffn = kGraniteDenseFfn;
  if (bamba) ffn = kBambaFfn;
  if (!bamba && c.ffn.num_experts > 0) ffn = kGraniteMoeFfn;
  if (const char* hf = LookupGgufName(ffn, rest)) {
    out.hf = l + hf;
    return out;
  }
  return MapGgufMixer(rest, l + "mamba.", l + "self_attn.", /*unpermute=*/true, c);
}

}  // namespace ssmkit::model

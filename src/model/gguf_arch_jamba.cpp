// general.architecture "jamba": llama.cpp's converter writes it for JambaForCausalLM (AI21's
// Jamba, model/family_jamba.cpp): per layer an RMSNorm then attention (no position embedding)
// or a Mamba-1 mixer with RMSNorms on dt, B and C, then an RMSNorm then an MoE (softmax over the
// experts, top-k, weights not renormalised) or a gated SiLU MLP.
//
// Metadata: attention.head_count_kv per layer (0: a Mamba-1 layer, else attention; the
// converter writes it from attn_layer_period / attn_layer_offset, which it does not record),
// attention.head_count, the ssm.* sizes (time_step_rank: dt_rank), feed_forward_length (the
// MLP's and every expert's width), expert_count / expert_used_count, context_length. Which
// layers are MoE is not recorded (nor expert_layer_period / offset): as llama.cpp does, a layer
// with a router (ffn_gate_inp) is MoE, any other has the MLP. The converter writes no
// activation key; Jamba's is SiLU, as llama.cpp runs it.
//
// Tensors, per layer: attn_norm (the mixer's norm), the Mamba-1 mixer's ssm_* (A stored as
// -exp(A_log), the conv weight squeezed to (D, K): model/gguf_model.cpp undoes both; the
// three norms ssm_dt_norm / ssm_b_norm / ssm_c_norm) or attention's attn_* (Q and K in the
// checkpoint's row order: this converter does not permute them), ffn_norm, then ffn_gate_inp +
// ffn_{gate,up,down}_exps (the experts stacked (E, F, d) / (E, d, F), kept stacked:
// "feed_forward.experts.{gate,up,down}_proj") or ffn_{gate,up,down}.
#include <algorithm>
#include <string>
#include <vector>

#include "model/gguf_arch.hpp"

namespace ssmkit::model {
namespace {

constexpr GgufNamePair kJambaLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "pre_ff_layernorm.weight"},
    {"ffn_gate_inp.weight", "feed_forward.router.weight"},
    {"ffn_gate_exps.weight", "feed_forward.experts.gate_proj"},
    {"ffn_up_exps.weight", "feed_forward.experts.up_proj"},
    {"ffn_down_exps.weight", "feed_forward.experts.down_proj"},
    {"ffn_gate.weight", "feed_forward.gate_proj.weight"},
    {"ffn_up.weight", "feed_forward.up_proj.weight"},
    {"ffn_down.weight", "feed_forward.down_proj.weight"},
};

// `moe`: some layer has a router.
Status ReadFeedForward(const GgufKeys& k, bool moe, ModelConfig* c) {
  FeedForwardConfig& f = c->ffn;
  f.activation = "silu";
  f.gated = true;
  SSMKIT_RETURN_IF_ERROR(k.Int("feed_forward_length", &f.intermediate));
  f.moe_intermediate = f.intermediate;
  if (!moe) return Status::Ok();
  SSMKIT_RETURN_IF_ERROR(k.Int("expert_count", &f.num_experts));
  return k.Int("expert_used_count", &f.top_k);
}

}  // namespace

Status ReadJambaGgufConfig(const GgufFile& f, ModelConfig* config) {
  const GgufKeys k(f, "jamba");
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR(ReadGgufCommon(k, &c));
  c.family = "jamba";
  SSMKIT_RETURN_IF_ERROR(ReadGgufMamba1(k, &c));
  c.dt_bc_norms = true;  // every JambaMambaMixer has them
  std::vector<int64_t> kv_heads;
  SSMKIT_RETURN_IF_ERROR(k.PerLayer("attention.head_count_kv", c.n_layer, &kv_heads));
  SSMKIT_RETURN_IF_ERROR(ReadGgufAttention(k, kv_heads, /*rope=*/false, &c));
  const std::vector<bool> moe = LayersWithTensor(f, c.n_layer, "ffn_gate_inp.weight");
  SSMKIT_RETURN_IF_ERROR(
      ReadFeedForward(k, std::find(moe.begin(), moe.end(), true) != moe.end(), &c));
  SSMKIT_RETURN_IF_ERROR(k.OptInt("context_length", &c.max_position_embeddings));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    c.blocks.push_back({kv_heads[i] > 0 ? BlockKind::kAttention : BlockKind::kMamba1, i});
    c.blocks.push_back({moe[i] ? BlockKind::kMoe : BlockKind::kMlp, i});
  }
  *config = std::move(c);
  return Status::Ok();
}

GgufTensorName MapJambaGguf(const std::string& rest, int64_t layer, const ModelConfig& c) {
  if (layer < 0) {
    return MapGgufOutsideLayers(rest, "model.embed_tokens.weight", "model.final_layernorm.weight");
  }
  GgufTensorName out;
  const std::string l = HfLayerPrefix(layer);
  if (const char* hf = LookupGgufName(kJambaLayer, rest)) {
    out.hf = l + hf;
    return out;
  }
  return MapGgufMixer(rest, l + "mamba.", l + "self_attn.", /*unpermute=*/false, c);
}

}  // namespace ssmkit::model

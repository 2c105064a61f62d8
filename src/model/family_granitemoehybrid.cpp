// GraniteMoeHybridForCausalLM (IBM's Granite-4.0-H): per layer an RMSNorm -> Mamba-2 mixer or
// attention (rope or none), then an RMSNorm -> MoE with a shared MLP (or the shared MLP alone
// when num_local_experts is 0); every block's output times residual_multiplier, the embedding
// times embedding_multiplier, the logits divided by logits_scaling, attention scaled by
// attention_multiplier. transformers' configuration_granitemoehybrid.py / modeling_*.py.
//
// layer_types: "mamba" / "attention" in the published hub files, "linear_attention" /
// "full_attention" as transformers 5 writes them (both read); absent: every layer Mamba.
// Tensors: the hub files' names (what save_pretrained writes too); the names transformers 5
// converts them to in memory (block_sparse_moe.experts.gate_up_proj, ...) are read as well, and
// the split forms GGUF files hold (model/gguf_arch_granite.cpp): shared_mlp.{gate,up,down}_proj
// and block_sparse_moe.experts.{gate,up,down}_proj.
#include <string>

#include "model/families.hpp"

namespace ssmkit::model {

Status ParseGraniteMoeHybrid(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(
      ReadCommon(r, {4096, 32, 32000, false, 2048, "rms_norm_eps", 1e-6f, -1}, c));
  SSMKIT_RETURN_IF_ERROR(ReadAttention(r, 32, -1, c));
  c->attention.scale = 1.0f;
  SSMKIT_RETURN_IF_ERROR(r.Float("attention_multiplier", &c->attention.scale));
  // transformers applies rope for "rope" and nothing otherwise; the published Granite-4.0-H
  // files spell "none" as "nope". Other strings are refused rather than guessed at.
  std::string position = "";
  SSMKIT_RETURN_IF_ERROR(r.String("position_embedding_type", &position));
  if (position == "rope") {
    SSMKIT_RETURN_IF_ERROR(ReadRope(r, /*use_partial=*/false, 0.0, c));
  } else if (!position.empty() && position != "nope") {
    return r.Wrong("position_embedding_type", "\"rope\", \"nope\" or null");
  }
  SSMKIT_RETURN_IF_ERROR(ReadMamba2(r, kMambaPrefixedKeys, kMambaPrefixedDefaults, c));
  FeedForwardConfig& f = c->ffn;
  SSMKIT_RETURN_IF_ERROR(ReadActivation(r, "hidden_act", "silu", &f.activation));
  f.gated = true;
  f.num_experts = 8;
  f.top_k = 2;
  f.moe_intermediate = 11008;
  f.shared_intermediate = 1024;
  SSMKIT_RETURN_IF_ERROR(r.Int("num_local_experts", &f.num_experts));
  SSMKIT_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &f.top_k));
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &f.moe_intermediate));
  SSMKIT_RETURN_IF_ERROR(r.Int("shared_intermediate_size", &f.shared_intermediate));
  f.topk_then_softmax = true;
  // Dense models: the shared MLP is the layer's MLP.
  if (f.num_experts == 0) f.intermediate = f.shared_intermediate;
  Multipliers& m = c->multipliers;
  SSMKIT_RETURN_IF_ERROR(r.Float("embedding_multiplier", &m.embedding));
  SSMKIT_RETURN_IF_ERROR(r.Float("residual_multiplier", &m.residual));
  float logits_scaling = 1.0f;
  SSMKIT_RETURN_IF_ERROR(r.Float("logits_scaling", &logits_scaling));
  if (!(logits_scaling != 0.0f)) return r.Wrong("logits_scaling", "a non-zero number");
  m.logits = 1.0f / logits_scaling;

  const char* key = r.Has("layer_types") ? "layer_types" : "layers_block_type";
  std::vector<bool> attention(static_cast<size_t>(c->n_layer), false);
  if (r.Has(key)) {
    const Json& types = r.json().at(key);
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c->n_layer) {
      return r.Wrong(
          key, "a list of num_hidden_layers = " + std::to_string(c->n_layer) + " layer types");
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
      if (t == "attention" || t == "full_attention") {
        attention[i] = true;
      } else if (t != "mamba" && t != "linear_attention") {
        return r.Wrong(key,
                       "\"mamba\", \"linear_attention\", \"attention\" or "
                       "\"full_attention\" for every layer");
      }
    }
  }
  for (int64_t i = 0; i < c->n_layer; ++i) {
    c->blocks.push_back({attention[i] ? BlockKind::kAttention : BlockKind::kMamba2, i});
    c->blocks.push_back({f.num_experts > 0 ? BlockKind::kMoe : BlockKind::kMlp, i});
  }
  return Status::Ok();
}

void PlanGraniteMoeHybrid(Planner& p, ModelWeights* w) {
  const ModelConfig& c = p.config();
  const int64_t d = c.d_model, V = c.vocab_size;
  const FeedForwardConfig& f = c.ffn;
  p.Matrix({"model.embed_tokens.weight"}, {V, d}, &w->embedding);
  for (Block& b : w->blocks) {
    const std::string l = "model.layers." + std::to_string(b.spec.layer) + ".";
    switch (b.spec.kind) {
      case BlockKind::kMamba2:
        p.Vector({l + "input_layernorm.weight"}, {d}, &b.norm);
        p.Mamba2(l + "mamba.", &b.mamba2);
        break;
      case BlockKind::kAttention:
        p.Vector({l + "input_layernorm.weight"}, {d}, &b.norm);
        p.Attention(l + "self_attn.", &b.attention);
        break;
      default: {  // the feed-forward block: shared MLP, and the experts with a router
        p.Vector({l + "post_attention_layernorm.weight"}, {d}, &b.norm);
        const int64_t Fs = f.shared_intermediate;
        MlpWeights* shared = b.spec.kind == BlockKind::kMoe ? &b.ffn.shared_expert : &b.ffn.mlp;
        if (p.Has(l + "shared_mlp.up_proj.weight")) {  // a GGUF file's: split
          p.Mlp(l + "shared_mlp.", Fs, true, shared);
        } else {
          p.FusedMlp(l + "shared_mlp.input_linear", l + "shared_mlp.output_linear", Fs, false,
                     &b.ffn.fused_gate_up, shared);
        }
        if (b.spec.kind != BlockKind::kMoe) break;
        const std::string m = l + "block_sparse_moe.";
        const int64_t E = f.num_experts, F = f.moe_intermediate;
        p.Matrix({m + "router.layer.weight", m + "router.weight"}, {E, d}, &b.ffn.router);
        if (p.Has(m + "experts.up_proj")) {  // a GGUF file's: gate and up stacked apart
          p.StackedExperts(m + "experts.", &b.ffn);
          break;
        }
        p.Matrix({m + "input_linear.weight", m + "experts.gate_up_proj"}, {E, 2 * F, d},
                 &b.ffn.experts_gate_up);
        p.Matrix({m + "output_linear.weight", m + "experts.down_proj"}, {E, d, F},
                 &b.ffn.experts_down);
        p.SplitExperts(&b.ffn);
      }
    }
  }
  p.Vector({"model.norm.weight"}, {d}, &w->norm_f);
}

}  // namespace ssmkit::model

// Zamba2ForCausalLM (Zyphra's Zamba2): Mamba-2 layers, and "hybrid" layers where a shared
// transformer block runs first:
//   t = linear(MLP(RMSNorm(attention(RMSNorm(concat(residual, embedding))))))
//   residual += mamba(RMSNorm(residual + t))       (t itself is not added to the residual)
// The attention reads 2 hidden_size features (head_dim = 2 hidden / heads, softmax scale
// 1 / sqrt(head_dim / 2), rope when use_mem_rope); num_mem_blocks blocks of weights are shared
// round-robin by the hybrid layers (the k-th hybrid layer uses block k % num_mem_blocks, stored
// under the first hybrid layer that uses it); each hybrid layer has its own LoRA adapters on
// the MLP's gate/up projection and, with use_shared_attention_adapter, on q, k and v, and its
// own linear. The Mamba-2 mixer's gated norm uses eps 1e-5, its conv always a bias, and dt is
// clamped to [time_step_min, inf) in prefill.
// transformers' configuration_zamba2.py / modeling_zamba2.py.
#include <cmath>
#include <limits>
#include <string>

#include "model/families.hpp"

namespace ssmkit::model {
namespace {

// The transformers default layer list (54 layers).
std::vector<bool> DefaultHybridLayers() {
  std::vector<bool> hybrid(1, false);
  for (int k = 0; k < 7; ++k) {
    hybrid.insert(hybrid.end(), 5, false);
    hybrid.push_back(true);
  }
  for (int n : {4, 3, 2}) {
    hybrid.insert(hybrid.end(), static_cast<size_t>(n), false);
    if (n != 2) hybrid.push_back(true);
  }
  return hybrid;
}

}  // namespace

Status ParseZamba2(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(ReadCommon(r, {2560, 54, 32000, true, 4096, "rms_norm_eps", 1e-5f, 0}, c));
  bool long_context = false;
  SSMKIT_RETURN_IF_ERROR(r.Bool("use_long_context", &long_context));
  if (long_context) c->max_position_embeddings = 16384;
  SSMKIT_RETURN_IF_ERROR(ReadAttention(r, 32, -1, c));
  AttentionConfig& a = c->attention;
  a.head_dim = 2 * c->d_model / a.num_heads;  // recomputed by the config class, whatever is saved
  a.input_dim = 2 * c->d_model;
  a.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim) / 2.0f);
  a.qkv_bias = a.o_bias = false;
  bool rope = false;
  SSMKIT_RETURN_IF_ERROR(r.Bool("use_mem_rope", &rope));
  if (rope) SSMKIT_RETURN_IF_ERROR(ReadRope(r, /*use_partial=*/false, 0.0, c));
  SSMKIT_RETURN_IF_ERROR(
      ReadMamba2(r,
                 {"n_mamba_heads", nullptr, "mamba_ngroups", "mamba_d_state", "mamba_d_conv",
                  "mamba_expand", "chunk_size", nullptr, "add_bias_linear"},
                 {8, 1, 64, 4, 2, 256, true, false}, c));
  c->dt_min = 0.001f;
  c->dt_max = std::numeric_limits<float>::infinity();
  SSMKIT_RETURN_IF_ERROR(r.Float("time_step_min", &c->dt_min));
  c->gated_norm_eps = 1e-5f;
  FeedForwardConfig& f = c->ffn;
  SSMKIT_RETURN_IF_ERROR(ReadActivation(r, "hidden_act", "gelu", &f.activation));
  f.intermediate = 4 * c->d_model;
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &f.intermediate));
  f.bias = c->proj_bias;  // add_bias_linear
  c->num_shared_blocks = 1;
  c->adapter_rank = 128;
  SSMKIT_RETURN_IF_ERROR(r.Int("num_mem_blocks", &c->num_shared_blocks));
  SSMKIT_RETURN_IF_ERROR(r.Int("adapter_rank", &c->adapter_rank));
  SSMKIT_RETURN_IF_ERROR(r.Bool("use_shared_attention_adapter", &c->attention_adapters));
  if (c->num_shared_blocks < 1) return r.Wrong("num_mem_blocks", "an integer >= 1");

  std::vector<bool> hybrid = DefaultHybridLayers();
  const char* key = r.Has("layers_block_type") ? "layers_block_type" : "layer_types";
  if (r.Has(key)) {
    const Json& list = r.json().at(key);
    if (!list.is_array()) return r.Wrong(key, "a list of layer types");
    hybrid.clear();
    for (const Json& t : list) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != "hybrid" && s != "mamba" && s != "linear_attention")
        return r.Wrong(key, "\"linear_attention\" (or \"mamba\") and \"hybrid\" entries");
      hybrid.push_back(s == "hybrid");
    }
  }
  c->n_layer = static_cast<int64_t>(hybrid.size());
  for (int64_t i = 0; i < c->n_layer; ++i) {
    if (hybrid[i]) c->blocks.push_back({BlockKind::kSharedTransformer, i});
    c->blocks.push_back({BlockKind::kMamba2, i});
  }
  return Status::Ok();
}

void PlanZamba2(Planner& p, ModelWeights* w) {
  const ModelConfig& c = p.config();
  const int64_t d = c.d_model, F = c.ffn.intermediate;
  const AttentionConfig& a = c.attention;
  p.Matrix({"model.embed_tokens.weight"}, {c.vocab_size, d}, &w->embedding);
  // The layers whose prefix holds each shared block's weights: the first hybrid layers.
  std::vector<int64_t> owner;
  int64_t k = 0;  // hybrid layers so far
  for (Block& b : w->blocks) {
    const std::string l = "model.layers." + std::to_string(b.spec.layer) + ".";
    const bool in_hybrid =
        b.spec.kind == BlockKind::kSharedTransformer ||
        (&b != w->blocks.data() && (&b - 1)->spec.kind == BlockKind::kSharedTransformer);
    if (b.spec.kind == BlockKind::kMamba2) {
      const std::string m = in_hybrid ? l + "mamba_decoder." : l;
      p.Vector({m + "input_layernorm.weight"}, {d}, &b.norm);
      p.Mamba2(m + "mamba.", &b.mamba2);
      continue;
    }
    const int64_t block_id = k % c.num_shared_blocks;
    if (k < c.num_shared_blocks) {
      owner.push_back(b.spec.layer);
    } else {
      p.plan().ignored_prefixes.push_back(l + "shared_transformer.");  // tied copies, if saved
    }
    const std::string s =
        "model.layers." + std::to_string(owner[block_id]) + ".shared_transformer.";
    const std::string n = std::to_string(k);
    p.Vector({s + "input_layernorm.weight"}, {2 * d}, &b.norm);
    p.Attention(s + "self_attn.", &b.attention);
    if (c.attention_adapters) {
      p.LowRank(s + "self_attn.linear_q_adapter_list." + n, 2 * d, a.num_heads * a.head_dim,
                &b.attention.q_adapter);
      p.LowRank(s + "self_attn.linear_k_adapter_list." + n, 2 * d, a.num_kv_heads * a.head_dim,
                &b.attention.k_adapter);
      p.LowRank(s + "self_attn.linear_v_adapter_list." + n, 2 * d, a.num_kv_heads * a.head_dim,
                &b.attention.v_adapter);
    }
    p.Vector({s + "pre_ff_layernorm.weight"}, {d}, &b.ffn_norm);
    p.FusedMlp(s + "feed_forward.gate_up_proj", s + "feed_forward.down_proj", F, c.ffn.bias,
               &b.ffn.fused_gate_up, &b.ffn.mlp);
    p.LowRank(s + "feed_forward.gate_up_proj_adapter_list." + n, d, 2 * F, &b.ffn.gate_up_adapter);
    p.Matrix({l + "linear.weight"}, {d, d}, &b.out_linear);
    ++k;
  }
  p.Vector({"model.final_layernorm.weight"}, {d}, &w->norm_f);
}

}  // namespace ssmkit::model

// NemotronHForCausalLM (NVIDIA's Nemotron-H): a list of blocks, each an RMSNorm -> one mixer:
// Mamba-2 ("M"), attention without position embedding ("*"), an ungated MLP with relu2 ("-")
// or a mixture of ungated experts ("E": NemotronHMoE, Nemotron 3) routed by sigmoid scores over
// expert groups (MoeRouting::kSigmoidGroupTopK) plus a shared expert, the routed experts
// optionally at a narrower latent width (moe_latent_size, Nemotron 3 Super: fc1_latent_proj
// before them, fc2_latent_proj after, on the routed sum; the router and the shared expert read
// the block's input itself). The list is layers_block_type (as
// transformers 5 writes it; also the older "mamba" / "attention" spellings) or the hub files'
// hybrid_override_pattern string.
// The Mamba-2 mixer clamps dt to [time_step_min, inf) in prefill (its time_step_limit key is
// unused) and has d_inner = mamba_num_heads * mamba_head_dim. The MoE's experts have no biases
// whatever mlp_bias says (NemotronHExperts); its shared expert is an MLP like "-"'s, and the
// latent projections have biases when mlp_bias. The multi-token-prediction layers
// (num_nextn_predict_layers, tensors under "mtp.") are not read.
// transformers' configuration_nemotron_h.py / modeling_nemotron_h.py. Tensors under
// "backbone." (the hub files, and what save_pretrained writes) or "model." (transformers 5 in
// memory).
#include <algorithm>
#include <limits>
#include <string>

#include "model/families.hpp"

namespace ssmkit::model {
namespace {

// The first key present of a current name and its older spelling (transformers pops the old
// one into the new).
const char* KeyOf(const Reader& r, const char* key, const char* old) {
  return !r.Has(key) && r.Has(old) ? old : key;
}

// The MoE keys, with NemotronHConfig's defaults.
Status ReadMoe(const Reader& r, FeedForwardConfig* f) {
  f->num_experts = 8;
  f->top_k = 2;
  f->moe_intermediate = 7688;
  f->shared_intermediate = 7688;
  f->normalize_top_k = true;
  f->sigmoid_groups = true;
  f->groups = f->top_k_groups = 1;
  f->routed_scaling = 1.0f;
  // attribute_map: num_local_experts is n_routed_experts.
  SSMKIT_RETURN_IF_ERROR(r.Int(KeyOf(r, "n_routed_experts", "num_local_experts"), &f->num_experts));
  SSMKIT_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &f->top_k));
  SSMKIT_RETURN_IF_ERROR(r.Int("moe_intermediate_size", &f->moe_intermediate));
  SSMKIT_RETURN_IF_ERROR(r.Int("moe_shared_expert_intermediate_size", &f->shared_intermediate));
  SSMKIT_RETURN_IF_ERROR(r.Bool("norm_topk_prob", &f->normalize_top_k));
  SSMKIT_RETURN_IF_ERROR(r.Int("n_group", &f->groups));
  SSMKIT_RETURN_IF_ERROR(r.Int("topk_group", &f->top_k_groups));
  SSMKIT_RETURN_IF_ERROR(r.Float("routed_scaling_factor", &f->routed_scaling));
  // null (the class's default): no latent projections.
  SSMKIT_RETURN_IF_ERROR(r.Int("moe_latent_size", &f->latent));
  if (r.Has("moe_latent_size") && f->latent < 1) {
    return r.Wrong("moe_latent_size", "null or a width >= 1");
  }
  // A key left at its default has no value in the file to quote.
  auto wrong = [&](const char* key, const std::string& expected) {
    if (r.Has(key)) return r.Wrong(key, expected);
    return Status::InvalidArgument(r.file() + ": " + key + ": expected " + expected +
                                   ", given its default");
  };
  const int64_t E = f->num_experts, G = f->groups;
  if (G < 1 || E % G != 0 || E / G < 2) {
    return wrong("n_group", "a divisor of n_routed_experts = " + std::to_string(E) +
                                " leaving >= 2 experts per group");
  }
  if (f->top_k_groups < 1 || f->top_k_groups > G) {
    return wrong("topk_group", "in [1, n_group = " + std::to_string(G) + "]");
  }
  if (f->top_k > f->top_k_groups * (E / G)) {
    return wrong("num_experts_per_tok", "at most the experts of the topk_group kept groups (" +
                                            std::to_string(f->top_k_groups * (E / G)) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status ParseNemotronH(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(
      ReadCommon(r, {4096, 0, 131072, false, 4096, "layer_norm_epsilon", 1e-5f, 0}, c));
  SSMKIT_RETURN_IF_ERROR(ReadAttention(r, 32, 8, c));
  if (!r.Has("head_dim")) c->attention.head_dim = 128;  // the class's default, not d / heads
  c->attention.qkv_bias = c->attention.o_bias = false;  // hard-coded in NemotronHAttention
  std::string act = "silu";
  SSMKIT_RETURN_IF_ERROR(r.String("mamba_hidden_act", &act));
  if (act != "silu") return r.Wrong("mamba_hidden_act", "\"silu\"");
  int64_t heads = 128, head_dim = 64;
  SSMKIT_RETURN_IF_ERROR(r.Int("mamba_num_heads", &heads));
  SSMKIT_RETURN_IF_ERROR(r.Int("mamba_head_dim", &head_dim));
  c->d_inner = heads * head_dim;
  SSMKIT_RETURN_IF_ERROR(
      ReadMamba2(r,
                 {"mamba_num_heads", "mamba_head_dim", KeyOf(r, "n_groups", "mamba_n_groups"),
                  "ssm_state_size", KeyOf(r, "conv_kernel", "mamba_d_conv"), nullptr,
                  KeyOf(r, "chunk_size", "mamba_chunk_size"),
                  KeyOf(r, "use_conv_bias", "mamba_conv_bias"), "use_bias"},
                 {128, 8, 128, 4, 2, 128, true, false}, c));
  c->dt_min = 0.001f;
  c->dt_max = std::numeric_limits<float>::infinity();
  SSMKIT_RETURN_IF_ERROR(r.Float(KeyOf(r, "time_step_min", "mamba_dt_min"), &c->dt_min));
  FeedForwardConfig& f = c->ffn;
  SSMKIT_RETURN_IF_ERROR(ReadActivation(r, "mlp_hidden_act", "relu2", &f.activation));
  f.gated = false;
  f.intermediate = 21504;
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &f.intermediate));
  SSMKIT_RETURN_IF_ERROR(r.Bool("mlp_bias", &f.bias));

  std::vector<BlockKind> kinds;
  if (r.Has("layers_block_type") || r.Has("layer_types")) {
    const char* key = r.Has("layers_block_type") ? "layers_block_type" : "layer_types";
    const Json& list = r.json().at(key);
    if (!list.is_array()) return r.Wrong(key, "a list of layer types");
    for (const Json& t : list) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s == "mamba" || s == "linear_attention") {
        kinds.push_back(BlockKind::kMamba2);
      } else if (s == "attention" || s == "full_attention") {
        kinds.push_back(BlockKind::kAttention);
      } else if (s == "mlp") {
        kinds.push_back(BlockKind::kMlp);
      } else if (s == "moe") {
        kinds.push_back(BlockKind::kMoe);
      } else {
        return r.Wrong(key, "\"linear_attention\", \"full_attention\", \"mlp\" or \"moe\" entries");
      }
    }
  } else if (r.Has("hybrid_override_pattern")) {
    std::string pattern;
    SSMKIT_RETURN_IF_ERROR(r.String("hybrid_override_pattern", &pattern));
    for (char ch : pattern) {
      if (ch == 'M') {
        kinds.push_back(BlockKind::kMamba2);
      } else if (ch == '*') {
        kinds.push_back(BlockKind::kAttention);
      } else if (ch == '-') {
        kinds.push_back(BlockKind::kMlp);
      } else if (ch == 'E') {
        kinds.push_back(BlockKind::kMoe);
      } else {
        return r.Wrong("hybrid_override_pattern", "a string of M, *, - and E");
      }
    }
  } else {  // the class's default list
    kinds = {BlockKind::kMamba2, BlockKind::kMoe, BlockKind::kAttention, BlockKind::kMlp};
  }
  if (std::find(kinds.begin(), kinds.end(), BlockKind::kMoe) != kinds.end()) {
    SSMKIT_RETURN_IF_ERROR(ReadMoe(r, &f));
  }
  c->n_layer = static_cast<int64_t>(kinds.size());
  for (int64_t i = 0; i < c->n_layer; ++i) c->blocks.push_back({kinds[i], i});
  return Status::Ok();
}

void PlanNemotronH(Planner& p, ModelWeights* w) {
  const ModelConfig& c = p.config();
  const int64_t d = c.d_model;
  const std::string root = p.Has("model.embeddings.weight") ? "model." : "backbone.";
  p.Matrix({root + "embeddings.weight"}, {c.vocab_size, d}, &w->embedding);
  for (Block& b : w->blocks) {
    const std::string l = root + "layers." + std::to_string(b.spec.layer) + ".";
    p.Vector({l + "norm.weight"}, {d}, &b.norm);
    if (b.spec.kind == BlockKind::kMamba2) {
      p.Mamba2(l + "mixer.", &b.mamba2);
    } else if (b.spec.kind == BlockKind::kAttention) {
      p.Attention(l + "mixer.", &b.attention);
    } else if (b.spec.kind == BlockKind::kMoe) {
      const std::string m = l + "mixer.";
      const int64_t E = c.ffn.num_experts;
      // The experts' width: the latent one between the two projections, when there are.
      const int64_t dx = c.ffn.latent > 0 ? c.ffn.latent : d;
      p.Matrix({m + "gate.weight"}, {E, d}, &b.ffn.router);
      p.Vector({m + "gate.e_score_correction_bias"}, {E}, &b.ffn.score_correction_bias);
      if (p.Has(m + "experts.up_proj")) {  // transformers 5 in memory: (E, F, d), (E, d, F)
        p.StackedExperts(m + "experts.", &b.ffn);
      } else {  // the hub files and save_pretrained: one (F, d) / (d, F) pair per expert
        const int64_t F = c.ffn.moe_intermediate;
        b.ffn.experts.assign(static_cast<size_t>(E), MlpWeights{});
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = m + "experts." + std::to_string(e) + ".";
          p.Matrix({x + "up_proj.weight"}, {F, dx}, &b.ffn.experts[e].up);
          p.Matrix({x + "down_proj.weight"}, {dx, F}, &b.ffn.experts[e].down);
        }
      }
      p.Mlp(m + "shared_experts.", c.ffn.shared_intermediate, false, &b.ffn.shared_expert);
      if (c.ffn.latent > 0) {
        p.Linear(m + "fc1_latent_proj", dx, d, c.ffn.bias, &b.ffn.latent_down,
                 &b.ffn.latent_down_bias);
        p.Linear(m + "fc2_latent_proj", d, dx, c.ffn.bias, &b.ffn.latent_up, &b.ffn.latent_up_bias);
      }
    } else {
      p.Mlp(l + "mixer.", c.ffn.intermediate, false, &b.ffn.mlp);
    }
  }
  p.Vector({root + "norm_f.weight"}, {d}, &w->norm_f);
}

}  // namespace ssmkit::model

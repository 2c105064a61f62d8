// NemotronHForCausalLM (NVIDIA's Nemotron-H): a list of blocks, each an RMSNorm -> one mixer:
// Mamba-2 ("M"), attention without position embedding ("*") or an ungated MLP with relu2 ("-")
// (MoE blocks, "E", route by sigmoid scores over expert groups with latent projections: not
// supported, an error). The list is layers_block_type (as transformers 5 writes it; also the
// older "mamba" / "attention" spellings) or the hub files' hybrid_override_pattern string.
// The Mamba-2 mixer clamps dt to [time_step_min, inf) in prefill (its time_step_limit key is
// unused) and has d_inner = mamba_num_heads * mamba_head_dim.
// transformers' configuration_nemotron_h.py / modeling_nemotron_h.py. Tensors under
// "backbone." (the hub files, and what save_pretrained writes) or "model." (transformers 5 in
// memory).
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
  auto unsupported_moe = [&]() {
    return Status::Unsupported(r.file() +
                               ": MoE layers (\"E\" / \"moe\"): Nemotron-H's grouped sigmoid "
                               "routing is not supported");
  };
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
        return unsupported_moe();
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
        return unsupported_moe();
      } else {
        return r.Wrong("hybrid_override_pattern", "a string of M, *, - and E");
      }
    }
  } else {
    return unsupported_moe();  // the class's default list has an MoE layer
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
    } else {
      p.Mlp(l + "mixer.", c.ffn.intermediate, false, &b.ffn.mlp);
    }
  }
  p.Vector({root + "norm_f.weight"}, {d}, &w->norm_f);
}

}  // namespace ssmkit::model

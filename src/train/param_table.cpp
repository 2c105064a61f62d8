#include "train/param_table.hpp"

#include <string>
#include <utility>

namespace ssmkit::train {
namespace {

Status Unsupported(const std::string& field, const std::string& expected,
                   const std::string& given) {
  return Status::InvalidArgument("train: config " + field + ": expected " + expected + ", given " +
                                 given);
}

}  // namespace

int64_t ParamTable::Add(std::string name, std::vector<int64_t> shape, bool weight_decay) {
  ParamInfo info;
  info.name = std::move(name);
  info.numel = 1;
  for (int64_t s : shape) info.numel *= s;
  info.shape = std::move(shape);
  info.offset = total_;
  info.weight_decay = weight_decay;
  total_ += info.numel;
  params_.push_back(std::move(info));
  return params_.back().offset;
}

const ParamInfo* ParamTable::Find(const std::string& name) const {
  for (const ParamInfo& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void ParamTable::AddMamba1(const ModelConfig& c, const std::string& m, LayerOffsets* o) {
  const int64_t d = c.d_model, D = c.d_inner, N = c.d_state, K = c.d_conv, R = c.dt_rank;
  o->A_log = Add(m + "A_log", {D, N}, false);
  o->D = Add(m + "D", {D}, false);
  o->conv_b = Add(m + "conv1d.bias", {c.conv_dim()}, false);
  o->conv_w = Add(m + "conv1d.weight", {c.conv_dim(), 1, K}, true);
  o->dt_bias = Add(m + "dt_proj.bias", {D}, false);
  o->dt_proj = Add(m + "dt_proj.weight", {D, R}, true);
  o->in_proj = Add(m + "in_proj.weight", {c.in_proj_dim(), d}, true);
  o->out_proj = Add(m + "out_proj.weight", {d, D}, true);
  o->x_proj = Add(m + "x_proj.weight", {R + 2 * N, D}, true);
}

void ParamTable::AddMamba2(const ModelConfig& c, const std::string& m, LayerOffsets* o) {
  const int64_t d = c.d_model, D = c.d_inner, H = c.nheads, K = c.d_conv;
  o->A_log = Add(m + "A_log", {H}, false);
  o->D = Add(m + "D", {H}, false);
  o->conv_b = Add(m + "conv1d.bias", {c.conv_dim()}, false);
  o->conv_w = Add(m + "conv1d.weight", {c.conv_dim(), 1, K}, true);
  o->dt_bias = Add(m + "dt_bias", {H}, false);
  o->in_proj = Add(m + "in_proj.weight", {c.in_proj_dim(), d}, true);
  o->gated_norm = Add(m + "norm.weight", {D}, false);
  o->out_proj = Add(m + "out_proj.weight", {d, D}, true);
}

// q, k and v in this order, adjacent: the block projects them as one (W, d) matrix.
void ParamTable::AddAttention(const ModelConfig& c, const std::string& a, LayerOffsets* o) {
  const AttentionConfig& at = c.attention;
  const int64_t d = c.d_model, E = at.head_dim;
  o->qkv = Add(a + "q_proj.weight", {at.num_heads * E, d}, true);
  Add(a + "k_proj.weight", {at.num_kv_heads * E, d}, true);
  Add(a + "v_proj.weight", {at.num_kv_heads * E, d}, true);
  o->o_proj = Add(a + "o_proj.weight", {d, at.num_heads * E}, true);
}

void ParamTable::AddMlp(const ModelConfig& c, const std::string& m, LayerOffsets* o) {
  const int64_t d = c.d_model, F = c.ffn.intermediate;
  o->mlp_in = Add(m + "input_linear.weight", {2 * F, d}, true);
  o->mlp_out = Add(m + "output_linear.weight", {d, F}, true);
}

namespace {

// What the trainer's hybrid supports of a GraniteMoeHybrid config.
Status CheckHybrid(const ModelConfig& c) {
  if (c.family != "granitemoehybrid") {
    return Unsupported("model_type", "mamba, mamba2 or granitemoehybrid",
                       c.family.empty() ? "a hand-made hybrid" : c.family);
  }
  const FeedForwardConfig& f = c.ffn;
  if (f.num_experts != 0) {
    return Unsupported("num_local_experts", "0 (dense: the shared MLP only)",
                       std::to_string(f.num_experts));
  }
  if (!f.gated || f.bias) return Unsupported("shared_mlp", "gated, without biases", "otherwise");
  const AttentionConfig& a = c.attention;
  if (a.qkv_bias || a.o_bias) return Unsupported("attention_bias", "false", "true");
  if (a.window != 0) return Unsupported("sliding window", "none", std::to_string(a.window));
  if (a.input_dim != 0 && a.input_dim != c.d_model) {
    return Unsupported("attention input width", std::to_string(c.d_model),
                       std::to_string(a.input_dim));
  }
  if (c.attention_adapters || c.adapter_rank != 0) return Unsupported("adapters", "none", "some");
  const Multipliers& m = c.multipliers;
  for (const float v : {m.attention_in, m.attention_out, m.ssm_in, m.ssm_out, m.key, m.mlp_gate,
                        m.mlp_down, m.ssm_z, m.ssm_x, m.ssm_b, m.ssm_c, m.ssm_dt}) {
    if (v != 1.0f) return Unsupported("multipliers", "Granite's four only", "Falcon-H1's");
  }
  if (c.gated_norm_eps != 0.0f && c.gated_norm_eps != c.norm_eps) {
    return Unsupported("gated norm eps", std::to_string(c.norm_eps),
                       std::to_string(c.gated_norm_eps));
  }
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind != BlockKind::kMamba2 && b.kind != BlockKind::kAttention &&
        b.kind != BlockKind::kMlp) {
      return Unsupported("blocks", "mamba2, attention and mlp", BlockKindName(b.kind));
    }
  }
  return Status::Ok();
}

}  // namespace

// Weight decay (decoupled, AdamW) applies to the matrices: the embedding, the projections and
// the conv filters. Norm weights, biases, A_log, D and dt_bias are left undecayed, as
// mamba_ssm marks A_log and D (_no_weight_decay) and as transformers' Trainer treats biases
// and norms.
Status ParamTable::Build(const ModelConfig& config, ParamTable* table) {
  SSMKIT_RETURN_IF_ERROR(config.Validate());
  if (!config.conv_bias) return Unsupported("conv_bias", "true", "false");
  if (config.proj_bias || config.has_out_proj_bias()) {
    return Unsupported("proj_bias (use_bias)", "false", "true");
  }
  const bool hybrid = !config.is_pure_mamba();
  if (hybrid) {
    SSMKIT_RETURN_IF_ERROR(CheckHybrid(config));
  } else if (!config.family.empty() && config.family != "mamba" && config.family != "mamba2") {
    // Another family's tensor names (e.g. a Nemotron-H of Mamba layers only).
    return Unsupported("model_type", "mamba, mamba2 or granitemoehybrid", config.family);
  }
  if (config.dt_bc_norms || !config.gated_norm || config.norm_before_gate) {
    return Unsupported("mixers", "Mamba-1 or Mamba-2 as mamba_ssm writes them",
                       config.family.empty() ? "another form" : config.family);
  }
  if (config.vocab_size != config.config_vocab_size) {
    return Unsupported("vocab_size",
                       "no padding (" + std::to_string(config.config_vocab_size) + ")",
                       std::to_string(config.vocab_size));
  }
  const bool m2 = config.arch == ModelArch::kMamba2;
  if (m2 && config.ngroups != 1) {
    return Unsupported("ngroups (n_groups)", "1", std::to_string(config.ngroups));
  }
  if (m2 && config.d_per_channel) return Unsupported("D_has_hdim", "false", "true");

  ParamTable t;
  const int64_t d = config.d_model, V = config.vocab_size;
  // Hugging Face's two namings: MambaForCausalLM's backbone.* and the hybrids' model.*.
  const std::string root = hybrid ? "model." : "backbone.";
  t.embedding_ = t.Add(root + (hybrid ? "embed_tokens.weight" : "embeddings.weight"), {V, d}, true);
  for (const BlockSpec& b : config.block_list()) {
    const std::string p = root + "layers." + std::to_string(b.layer) + ".";
    LayerOffsets o;
    if (!hybrid) {
      o.norm = t.Add(p + "norm.weight", {d}, false);
      if (m2)
        t.AddMamba2(config, p + "mixer.", &o);
      else
        t.AddMamba1(config, p + "mixer.", &o);
    } else if (b.kind == BlockKind::kMlp) {
      o.norm = t.Add(p + "post_attention_layernorm.weight", {d}, false);
      t.AddMlp(config, p + "shared_mlp.", &o);
    } else {
      o.norm = t.Add(p + "input_layernorm.weight", {d}, false);
      if (b.kind == BlockKind::kAttention)
        t.AddAttention(config, p + "self_attn.", &o);
      else
        t.AddMamba2(config, p + "mamba.", &o);
    }
    t.blocks_.push_back(o);
  }
  t.norm_f_ = t.Add(root + (hybrid ? "norm.weight" : "norm_f.weight"), {d}, false);
  t.lm_head_ = config.tie_embeddings ? t.embedding_ : t.Add("lm_head.weight", {V, d}, true);
  *table = std::move(t);
  return Status::Ok();
}

}  // namespace ssmkit::train

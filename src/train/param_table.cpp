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

// Weight decay (decoupled, AdamW) applies to the matrices: the embedding, the projections and
// the conv filters. Norm weights, biases, A_log, D and dt_bias are left undecayed, as
// mamba_ssm marks A_log and D (_no_weight_decay) and as transformers' Trainer treats biases
// and norms.
Status ParamTable::Build(const ModelConfig& config, ParamTable* table) {
  SSMKIT_RETURN_IF_ERROR(config.Validate());
  if (!config.conv_bias) return Unsupported("conv_bias", "true", "false");
  if (config.proj_bias) return Unsupported("proj_bias (use_bias)", "false", "true");
  if (!config.is_pure_mamba() || config.dt_bc_norms || !config.gated_norm) {
    return Unsupported("blocks", "Mamba-1 or Mamba-2 mixers only",
                       config.family.empty() ? "a hybrid" : config.family);
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
  const int64_t d = config.d_model, D = config.d_inner, N = config.d_state, K = config.d_conv;
  const int64_t C = config.conv_dim(), I = config.in_proj_dim();
  t.embedding_ = t.Add("backbone.embeddings.weight", {config.vocab_size, d}, true);
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const std::string p = "backbone.layers." + std::to_string(i) + ".";
    const std::string m = p + "mixer.";
    LayerOffsets o;
    o.norm = t.Add(p + "norm.weight", {d}, false);
    if (!m2) {
      const int64_t R = config.dt_rank;
      o.A_log = t.Add(m + "A_log", {D, N}, false);
      o.D = t.Add(m + "D", {D}, false);
      o.conv_b = t.Add(m + "conv1d.bias", {C}, false);
      o.conv_w = t.Add(m + "conv1d.weight", {C, 1, K}, true);
      o.dt_bias = t.Add(m + "dt_proj.bias", {D}, false);
      o.dt_proj = t.Add(m + "dt_proj.weight", {D, R}, true);
      o.in_proj = t.Add(m + "in_proj.weight", {I, d}, true);
      o.out_proj = t.Add(m + "out_proj.weight", {d, D}, true);
      o.x_proj = t.Add(m + "x_proj.weight", {R + 2 * N, D}, true);
    } else {
      const int64_t H = config.nheads;
      o.A_log = t.Add(m + "A_log", {H}, false);
      o.D = t.Add(m + "D", {H}, false);
      o.conv_b = t.Add(m + "conv1d.bias", {C}, false);
      o.conv_w = t.Add(m + "conv1d.weight", {C, 1, K}, true);
      o.dt_bias = t.Add(m + "dt_bias", {H}, false);
      o.in_proj = t.Add(m + "in_proj.weight", {I, d}, true);
      o.gated_norm = t.Add(m + "norm.weight", {D}, false);
      o.out_proj = t.Add(m + "out_proj.weight", {d, D}, true);
    }
    t.layers_.push_back(o);
  }
  t.norm_f_ = t.Add("backbone.norm_f.weight", {d}, false);
  t.lm_head_ =
      config.tie_embeddings ? t.embedding_ : t.Add("lm_head.weight", {config.vocab_size, d}, true);
  *table = std::move(t);
  return Status::Ok();
}

}  // namespace ssmkit::train

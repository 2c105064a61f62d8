// FalconH1ForCausalLM (TII's Falcon-H1): per layer an RMSNorm -> attention (rope) and a Mamba-2
// mixer side by side on the same input, then an RMSNorm -> gated MLP; with muP multipliers:
//   embedding * embedding_multiplier; logits * lm_head_multiplier
//   mixer out = mamba(x * ssm_in_multiplier) * ssm_out_multiplier
//               + attention(x * attention_in_multiplier) * attention_out_multiplier
//   mamba: in_proj's outputs [z, x, B, C, dt] times ssm_multipliers[0..4] (the muP vector);
//     y gated by silu(z) without a norm (mamba_rms_norm false) or by the gated RMSNorm with the
//     gate after the norm (mamba_norm_before_gate, the default) or before it
//   attention: k times key_multiplier (folded into the softmax scale)
//   MLP: down(up(x) * act(gate(x) * mlp_multipliers[0])) * mlp_multipliers[1]
// mamba_d_ssm gives d_inner (null: mamba_expand * hidden_size; absent: the class's 1024).
// transformers' configuration_falcon_h1.py / modeling_falcon_h1.py.
#include <algorithm>
#include <string>

#include "model/families.hpp"

namespace ssmkit::model {
namespace {

// A list of exactly n floats.
Status FloatList(const Reader& r, const char* key, size_t n, float* out) {
  if (!r.Has(key)) return Status::Ok();
  const Json& list = r.json().at(key);
  if (!list.is_array() || list.size() != n ||
      !std::all_of(list.begin(), list.end(), [](const Json& v) { return v.is_number(); }))
    return r.Wrong(key, "a list of " + std::to_string(n) + " numbers");
  for (size_t i = 0; i < n; ++i) out[i] = list[i].get<float>();
  return Status::Ok();
}

}  // namespace

Status ParseFalconH1(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(
      ReadCommon(r, {4096, 32, 128000, false, 8192, "rms_norm_eps", 1e-5f, 0}, c));
  SSMKIT_RETURN_IF_ERROR(ReadAttention(r, 32, 8, c));
  SSMKIT_RETURN_IF_ERROR(ReadRope(r, /*use_partial=*/false, 0.0, c));
  c->d_inner = 1024;
  if (r.json().contains("mamba_d_ssm") && r.json().at("mamba_d_ssm").is_null()) c->d_inner = 0;
  SSMKIT_RETURN_IF_ERROR(r.Int("mamba_d_ssm", &c->d_inner));
  SSMKIT_RETURN_IF_ERROR(ReadMamba2(r, kMambaPrefixedKeys, kMambaPrefixedDefaults, c));
  bool projectors_bias = false;
  SSMKIT_RETURN_IF_ERROR(r.Bool("projectors_bias", &projectors_bias));
  c->out_proj_bias = projectors_bias ? 1 : 0;
  c->gated_norm = false;
  c->norm_before_gate = true;
  SSMKIT_RETURN_IF_ERROR(r.Bool("mamba_rms_norm", &c->gated_norm));
  SSMKIT_RETURN_IF_ERROR(r.Bool("mamba_norm_before_gate", &c->norm_before_gate));
  FeedForwardConfig& f = c->ffn;
  SSMKIT_RETURN_IF_ERROR(ReadActivation(r, "hidden_act", "silu", &f.activation));
  f.intermediate = 14336;
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &f.intermediate));
  SSMKIT_RETURN_IF_ERROR(r.Bool("mlp_bias", &f.bias));
  Multipliers& m = c->multipliers;
  SSMKIT_RETURN_IF_ERROR(r.Float("embedding_multiplier", &m.embedding));
  SSMKIT_RETURN_IF_ERROR(r.Float("lm_head_multiplier", &m.logits));
  SSMKIT_RETURN_IF_ERROR(r.Float("attention_in_multiplier", &m.attention_in));
  SSMKIT_RETURN_IF_ERROR(r.Float("attention_out_multiplier", &m.attention_out));
  SSMKIT_RETURN_IF_ERROR(r.Float("ssm_in_multiplier", &m.ssm_in));
  SSMKIT_RETURN_IF_ERROR(r.Float("ssm_out_multiplier", &m.ssm_out));
  SSMKIT_RETURN_IF_ERROR(r.Float("key_multiplier", &m.key));
  float mlp[2] = {1.0f, 1.0f}, ssm[5] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  SSMKIT_RETURN_IF_ERROR(FloatList(r, "mlp_multipliers", 2, mlp));
  SSMKIT_RETURN_IF_ERROR(FloatList(r, "ssm_multipliers", 5, ssm));
  m.mlp_gate = mlp[0];
  m.mlp_down = mlp[1];
  m.ssm_z = ssm[0];
  m.ssm_x = ssm[1];
  m.ssm_b = ssm[2];
  m.ssm_c = ssm[3];
  m.ssm_dt = ssm[4];
  for (int64_t i = 0; i < c->n_layer; ++i) {
    c->blocks.push_back({BlockKind::kParallelHybrid, i});
    c->blocks.push_back({BlockKind::kMlp, i});
  }
  return Status::Ok();
}

void PlanFalconH1(Planner& p, ModelWeights* w) {
  PlanDecoderLayers(p, w);
  const ModelConfig& c = p.config();
  // The muP vector (not stored: transformers computes it from the config): one multiplier per
  // in_proj output, by section [z (D), x (D), B (G N), C (G N), dt (H)].
  const Multipliers& m = c.multipliers;
  if (m.ssm_z == 1.0f && m.ssm_x == 1.0f && m.ssm_b == 1.0f && m.ssm_c == 1.0f && m.ssm_dt == 1.0f)
    return;
  p.plan().finish.push_back([&c, w]() {
    const int64_t D = c.d_inner, GN = c.ngroups * c.d_state, I = c.in_proj_dim();
    w->owned.emplace_back(new uint8_t[static_cast<size_t>(4 * I)]);
    float* scale = reinterpret_cast<float*>(w->owned.back().get());
    for (int64_t j = 0; j < I; ++j) {
      scale[j] = j < D                ? c.multipliers.ssm_z
                 : j < 2 * D          ? c.multipliers.ssm_x
                 : j < 2 * D + GN     ? c.multipliers.ssm_b
                 : j < 2 * D + 2 * GN ? c.multipliers.ssm_c
                                      : c.multipliers.ssm_dt;
    }
    const Tensor t = Tensor::Contiguous(scale, DType::kF32, {I});
    for (Block& b : w->blocks) {
      if (b.spec.kind == BlockKind::kParallelHybrid) b.mamba2.in_proj_scale = t;
    }
    return Status::Ok();
  });
}

}  // namespace ssmkit::model

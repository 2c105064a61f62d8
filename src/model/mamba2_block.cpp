#include "model/mamba2_block.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/views.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::model {
namespace {

// The default time_step_limit (0, inf) never acts after a softplus; another one must be
// applied by the model at decode, since selective_state_update has no limit (as in mamba_ssm).
bool HasDtLimit(const ModelConfig& c) {
  return c.dt_min > 0.0f || c.dt_max < std::numeric_limits<float>::infinity();
}

RmsNormOptions GatedNormOptions(const ModelConfig& c) {
  RmsNormOptions o;
  o.eps = c.norm_eps;
  o.group_size = c.d_inner / c.ngroups;
  o.norm_before_gate = false;
  return o;
}

}  // namespace

int64_t Mamba2PrefillFloats(const ModelConfig& c, int64_t T) {
  return T * (c.in_proj_dim() + 3 * c.conv_dim() + 2 * c.d_inner);
}

Mamba2PrefillActs CarveMamba2Prefill(const ModelConfig& c, int64_t T, float* base) {
  Mamba2PrefillActs a;
  a.zxbcdt = base;
  a.xbc_t = a.zxbcdt + T * c.in_proj_dim();
  a.conv_t = a.xbc_t + T * c.conv_dim();
  a.xbc = a.conv_t + T * c.conv_dim();
  a.y = a.xbc + T * c.conv_dim();
  a.yn = a.y + T * c.d_inner;
  return a;
}

int64_t Mamba2DecodeFloats(const ModelConfig& c, int64_t B) {
  return B * (c.in_proj_dim() + c.nheads + 2 * c.d_inner);
}

Mamba2DecodeActs CarveMamba2Decode(const ModelConfig& c, int64_t B, float* base) {
  Mamba2DecodeActs a;
  a.zxbcdt = base;
  a.dt = a.zxbcdt + B * c.in_proj_dim();
  a.y = a.dt + B * c.nheads;
  a.yn = a.y + B * c.d_inner;
  return a;
}

Status Mamba2MixerPrefill(const ModelConfig& c, const Mamba2Layer& w, int64_t B, int64_t L,
                          const int64_t* pad, const float* normed, const Mamba2PrefillActs& a,
                          const Tensor& conv_state, const Tensor& ssm_state, float* out) {
  const int64_t T = B * L, d = c.d_model, D = c.d_inner, N = c.d_state, G = c.ngroups;
  const int64_t H = c.nheads, P = c.headdim, C = c.conv_dim(), I = c.in_proj_dim();
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Rows(normed, T, d, d), w.in_proj, w.in_proj_bias}, Rows(a.zxbcdt, T, I, I)));
  // The conv op reads (B, C, L) with unit stride over L: to channel-major and back.
  Transpose(a.zxbcdt + D, I, T, C, a.xbc_t, T);
  ZeroPadColumns(a.xbc_t, C, B, L, pad);
  const Tensor conv_in = View(a.xbc_t, {B, C, L}, {L, T, 1});
  const Tensor conv_out = View(a.conv_t, {B, C, L}, {L, T, 1});
  SSMKIT_RETURN_IF_ERROR(
      CausalConv1dForward({conv_in, w.conv_weight, w.conv_bias, Tensor{}, Conv1dActivation::kSilu},
                          conv_out, conv_state));
  ZeroPadColumns(a.conv_t, C, B, L, pad);
  Transpose(a.conv_t, T, C, T, a.xbc, C);

  SsdInputs ssd;
  ssd.x = View(a.xbc, {B, L, H, P}, {L * C, C, P, 1});
  ssd.dt = View(a.zxbcdt + D + C, {B, L, H}, {L * I, I, 1});
  ssd.A = w.A;
  ssd.B = View(a.xbc + D, {B, L, G, N}, {L * C, C, N, 1});
  ssd.C = View(a.xbc + D + G * N, {B, L, G, N}, {L * C, C, N, 1});
  ssd.D = w.D;
  ssd.dt_bias = w.dt_bias;
  ssd.dt_softplus = true;
  ssd.dt_min = c.dt_min;
  ssd.dt_max = c.dt_max;
  SSMKIT_RETURN_IF_ERROR(SsdForward(ssd, View(a.y, {B, L, H, P}, {L * D, D, P, 1}), ssm_state));
  SSMKIT_RETURN_IF_ERROR(
      RmsNormForward({Rows(a.y, T, D, D), w.gated_norm, Tensor{}, Rows(a.zxbcdt, T, D, I)},
                     Rows(a.yn, T, D, D), GatedNormOptions(c)));
  return LinearForward({Rows(a.yn, T, D, D), w.out_proj, w.out_proj_bias}, Rows(out, T, d, d));
}

Status Mamba2MixerDecode(const ModelConfig& c, const Mamba2Layer& w, int64_t B, const float* normed,
                         const Mamba2DecodeActs& a, const Tensor& conv_state,
                         const Tensor& ssm_state, float* out) {
  const int64_t d = c.d_model, D = c.d_inner, N = c.d_state, G = c.ngroups;
  const int64_t H = c.nheads, P = c.headdim, C = c.conv_dim(), I = c.in_proj_dim();
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Rows(normed, B, d, d), w.in_proj, w.in_proj_bias}, Rows(a.zxbcdt, B, I, I)));
  const Tensor xbc = Rows(a.zxbcdt + D, B, C, I);
  SSMKIT_RETURN_IF_ERROR(CausalConv1dUpdate(
      {xbc, w.conv_weight, w.conv_bias, Conv1dActivation::kSilu}, conv_state, xbc));
  StateUpdateInputs step;
  step.x = View(a.zxbcdt + D, {B, H, P}, {I, P, 1});
  step.A = w.A;
  step.B = View(a.zxbcdt + 2 * D, {B, G, N}, {I, N, 1});
  step.C = View(a.zxbcdt + 2 * D + G * N, {B, G, N}, {I, N, 1});
  step.D = w.D;
  const float* dt_in = a.zxbcdt + D + C;  // (B, H), row stride I
  if (HasDtLimit(c)) {
    // dt = clamp(softplus(dt_in + dt_bias), dt_min, dt_max), as the SSD applies it in prefill.
    const float* bias = static_cast<const float*>(w.dt_bias.data);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const float v = dt_in[b * I + h] + bias[h];
        const float sp = v > 20.0f ? v : std::log1p(std::exp(v));
        a.dt[b * H + h] = std::clamp(sp, c.dt_min, c.dt_max);
      }
    }
    step.dt = Rows(a.dt, B, H, H);
  } else {
    step.dt = Rows(dt_in, B, H, I);
    step.dt_bias = w.dt_bias;
    step.dt_softplus = true;
  }
  SSMKIT_RETURN_IF_ERROR(SelectiveStateUpdate(step, ssm_state, View(a.y, {B, H, P}, {D, P, 1})));
  SSMKIT_RETURN_IF_ERROR(
      RmsNormForward({Rows(a.y, B, D, D), w.gated_norm, Tensor{}, Rows(a.zxbcdt, B, D, I)},
                     Rows(a.yn, B, D, D), GatedNormOptions(c)));
  return LinearForward({Rows(a.yn, B, D, D), w.out_proj, w.out_proj_bias}, Rows(out, B, d, d));
}

}  // namespace ssmkit::model

#include "model/mamba1_block.hpp"

#include "model/views.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::model {

int64_t Mamba1PrefillFloats(const ModelConfig& c, int64_t T) {
  return T * (2 * c.d_inner + c.d_inner + c.dt_rank + 2 * c.d_state + c.d_inner + c.d_inner);
}

Mamba1PrefillActs CarveMamba1Prefill(const ModelConfig& c, int64_t T, float* base) {
  Mamba1PrefillActs a;
  a.xz = base;
  a.xc = a.xz + 2 * c.d_inner * T;
  a.xdbl = a.xc + c.d_inner * T;
  a.delta = a.xdbl + (c.dt_rank + 2 * c.d_state) * T;
  a.y = a.delta + c.d_inner * T;
  return a;
}

int64_t Mamba1DecodeFloats(const ModelConfig& c, int64_t B) {
  return B * (2 * c.d_inner + c.dt_rank + 2 * c.d_state + c.d_inner + c.d_inner);
}

Mamba1DecodeActs CarveMamba1Decode(const ModelConfig& c, int64_t B, float* base) {
  Mamba1DecodeActs a;
  a.xz = base;
  a.xdbl = a.xz + B * 2 * c.d_inner;
  a.dt = a.xdbl + B * (c.dt_rank + 2 * c.d_state);
  a.y = a.dt + B * c.d_inner;
  return a;
}

Status Mamba1MixerPrefill(const ModelConfig& c, const Mamba1Layer& w, int64_t B, int64_t L,
                          const int64_t* pad, const float* normed, const Mamba1PrefillActs& a,
                          const Tensor& conv_state, const Tensor& ssm_state, float* out) {
  const int64_t T = B * L, d = c.d_model, D = c.d_inner, N = c.d_state, R = c.dt_rank;
  const int64_t E = R + 2 * N;
  // (B, features, L) view of a channel-major (features, T) buffer.
  auto seq = [&](const float* p, int64_t features) { return View(p, {B, features, L}, {L, T, 1}); };

  SSMKIT_RETURN_IF_ERROR(LinearForward({Rows(normed, T, d, d), w.in_proj, w.in_proj_bias},
                                       Columns(a.xz, T, 2 * D, T)));
  ZeroPadColumns(a.xz, D, B, L, pad);
  CausalConv1dInputs conv{seq(a.xz, D), w.conv_weight, w.conv_bias, Tensor{},
                          Conv1dActivation::kSilu};
  SSMKIT_RETURN_IF_ERROR(CausalConv1dForward(conv, seq(a.xc, D), conv_state));
  ZeroPadColumns(a.xc, D, B, L, pad);
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Columns(a.xc, T, D, T), w.x_proj, Tensor{}}, Columns(a.xdbl, T, E, T)));
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Columns(a.xdbl, T, R, T), w.dt_proj, Tensor{}}, Columns(a.delta, T, D, T)));
  SelectiveScanInputs scan;
  scan.u = seq(a.xc, D);
  scan.delta = seq(a.delta, D);
  scan.A = w.A;
  scan.B = seq(a.xdbl + R * T, N);
  scan.C = seq(a.xdbl + (R + N) * T, N);
  scan.D = w.D;
  scan.z = seq(a.xz + D * T, D);
  scan.delta_bias = w.dt_bias;
  scan.delta_softplus = true;
  SSMKIT_RETURN_IF_ERROR(SelectiveScanForward(scan, seq(a.y, D), ssm_state));
  return LinearForward({Columns(a.y, T, D, T), w.out_proj, w.out_proj_bias}, Rows(out, T, d, d));
}

Status Mamba1MixerDecode(const ModelConfig& c, const Mamba1Layer& w, int64_t B, const float* normed,
                         const Mamba1DecodeActs& a, const Tensor& conv_state,
                         const Tensor& ssm_state, float* out) {
  const int64_t d = c.d_model, D = c.d_inner, N = c.d_state, R = c.dt_rank, E = R + 2 * N;
  SSMKIT_RETURN_IF_ERROR(LinearForward({Rows(normed, B, d, d), w.in_proj, w.in_proj_bias},
                                       Rows(a.xz, B, 2 * D, 2 * D)));
  const Tensor x = Rows(a.xz, B, D, 2 * D);
  SSMKIT_RETURN_IF_ERROR(
      CausalConv1dUpdate({x, w.conv_weight, w.conv_bias, Conv1dActivation::kSilu}, conv_state, x));
  SSMKIT_RETURN_IF_ERROR(LinearForward({x, w.x_proj, Tensor{}}, Rows(a.xdbl, B, E, E)));
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Rows(a.xdbl, B, R, E), w.dt_proj, Tensor{}}, Rows(a.dt, B, D, D)));
  StateUpdateInputs step;
  step.x = x;
  step.dt = Rows(a.dt, B, D, D);
  step.A = w.A;
  step.B = Rows(a.xdbl + R, B, N, E);
  step.C = Rows(a.xdbl + R + N, B, N, E);
  step.D = w.D;
  step.z = Rows(a.xz + D, B, D, 2 * D);
  step.dt_bias = w.dt_bias;
  step.dt_softplus = true;
  SSMKIT_RETURN_IF_ERROR(SelectiveStateUpdate(step, ssm_state, Rows(a.y, B, D, D)));
  return LinearForward({Rows(a.y, B, D, D), w.out_proj, w.out_proj_bias}, Rows(out, B, d, d));
}

}  // namespace ssmkit::model

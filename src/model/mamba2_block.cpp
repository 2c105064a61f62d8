#include "model/mamba2_block.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/mixer_state.hpp"
#include "model/views.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::model {

bool HasDtLimit(const ModelConfig& c) {
  return c.dt_min > 0.0f || c.dt_max < std::numeric_limits<float>::infinity();
}

namespace {

RmsNormOptions GatedNormOptions(const ModelConfig& c) {
  RmsNormOptions o;
  o.eps = c.gated_norm_eps > 0.0f ? c.gated_norm_eps : c.norm_eps;
  o.group_size = c.d_inner / c.ngroups;
  o.norm_before_gate = c.norm_before_gate;
  return o;
}

int64_t StateFloats(const ModelConfig& c) {
  return std::max(c.conv_dim() * (c.d_conv - 1), c.d_inner * c.d_state);
}

// in_proj, then Falcon-H1's per-output multipliers (host f32 only): rows (rows, I) of zxbcdt.
Status InProj(const ModelConfig& c, const Mamba2Weights& w, int64_t rows, ActBuffer normed,
              ActBuffer zxbcdt) {
  const int64_t d = c.d_model, I = c.in_proj_dim();
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({normed.Rows(rows, d, d), w.in_proj, w.in_proj_bias}, zxbcdt.Rows(rows, I, I)));
  if (!w.in_proj_scale.defined()) return Status::Ok();
  if (!zxbcdt.on_host()) {
    return Status::Unsupported("mamba2: in_proj's multipliers (Falcon-H1) run on the CPU only");
  }
  const float* scale = static_cast<const float*>(w.in_proj_scale.data);
  float* out = zxbcdt.f32();
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < I; ++j) out[t * I + j] *= scale[j];
  }
  return Status::Ok();
}

// The gated norm (or nothing, when the SSD / state update applied the gate) and out_proj.
Status NormAndOutProj(const ModelConfig& c, const Mamba2Weights& w, int64_t rows, ActBuffer y,
                      ActBuffer zxbcdt, ActBuffer yn, ActBuffer out) {
  const int64_t d = c.d_model, D = c.d_inner, I = c.in_proj_dim();
  ActBuffer projected = y;
  if (w.gated_norm.defined()) {
    SSMKIT_RETURN_IF_ERROR(
        RmsNormForward({y.Rows(rows, D, D), w.gated_norm, Tensor{}, zxbcdt.Rows(rows, D, I)},
                       yn.Rows(rows, D, D), GatedNormOptions(c)));
    projected = yn;
  }
  return LinearForward({projected.Rows(rows, D, D), w.out_proj, w.out_proj_bias},
                       out.Rows(rows, d, d));
}

}  // namespace

int64_t Mamba2PrefillFloats(const ModelConfig& c, int64_t T) {
  return T * (c.in_proj_dim() + 3 * c.conv_dim() + 2 * c.d_inner) + StateFloats(c);
}

Mamba2PrefillActs CarveMamba2Prefill(const ModelConfig& c, int64_t T, float* base) {
  Mamba2PrefillActs a;
  a.zxbcdt = base;
  a.xbc_t = a.zxbcdt + T * c.in_proj_dim();
  a.conv_t = a.xbc_t + T * c.conv_dim();
  a.xbc = a.conv_t + T * c.conv_dim();
  a.y = a.xbc + T * c.conv_dim();
  a.yn = a.y + T * c.d_inner;
  a.state = a.yn + T * c.d_inner;
  return a;
}

int64_t Mamba2DecodeFloats(const ModelConfig& c, int64_t n) {
  return n * (c.in_proj_dim() + c.nheads + 2 * c.d_inner + c.conv_dim() * (c.d_conv - 1));
}

Mamba2DecodeActs CarveMamba2Decode(const ModelConfig& c, int64_t n, ActBuffer base) {
  Mamba2DecodeActs a;
  a.zxbcdt = base;
  a.dt = a.zxbcdt + n * c.in_proj_dim();
  a.y = a.dt + n * c.nheads;
  a.yn = a.y + n * c.d_inner;
  a.conv = a.yn + n * c.d_inner;
  return a;
}

Status Mamba2MixerPrefill(const ModelConfig& c, const Mamba2Weights& w, const SeqBatch& batch,
                          const float* normed, const Mamba2PrefillActs& a, const StateCache& cache,
                          int64_t state, float* out) {
  const int64_t T = batch.T, D = c.d_inner, N = c.d_state, G = c.ngroups;
  const int64_t H = c.nheads, P = c.headdim, C = c.conv_dim(), I = c.in_proj_dim();
  SSMKIT_RETURN_IF_ERROR(InProj(c, w, T, HostF32(normed), HostF32(a.zxbcdt)));
  // The conv op reads (1, C, L) with unit stride over L: to channel-major and back.
  Transpose(a.zxbcdt + D, I, T, C, a.xbc_t, T);
  for (int64_t i = 0; i < batch.n; ++i) {
    const int64_t o = batch.offset[i], L = batch.length(i);
    const Tensor conv_state = cache.conv(state, batch.slots[i], 1);
    const Tensor conv_in = View(a.xbc_t + o, {1, C, L}, {C * T, T, 1});
    const Tensor conv_out = View(a.conv_t + o, {1, C, L}, {C * T, T, 1});
    SSMKIT_RETURN_IF_ERROR(CausalConv1dForward(
        {conv_in, w.conv_weight, w.conv_bias, InitialState(conv_state, batch.start[i], a.state),
         Conv1dActivation::kSilu},
        conv_out, conv_state));
  }
  Transpose(a.conv_t, T, C, T, a.xbc, C);

  for (int64_t i = 0; i < batch.n; ++i) {
    const int64_t o = batch.offset[i], L = batch.length(i);
    const Tensor ssm_state = cache.ssm(state, batch.slots[i], 1);
    SsdInputs ssd;
    ssd.x = View(a.xbc + o * C, {1, L, H, P}, {L * C, C, P, 1});
    ssd.dt = View(a.zxbcdt + o * I + D + C, {1, L, H}, {L * I, I, 1});
    ssd.A = w.A;
    ssd.B = View(a.xbc + o * C + D, {1, L, G, N}, {L * C, C, N, 1});
    ssd.C = View(a.xbc + o * C + D + G * N, {1, L, G, N}, {L * C, C, N, 1});
    ssd.D = w.D;
    // Without the gated norm the gate is y * silu(z), which the SSD applies itself.
    if (!w.gated_norm.defined()) ssd.z = View(a.zxbcdt + o * I, {1, L, H, P}, {L * I, I, P, 1});
    ssd.dt_bias = w.dt_bias;
    ssd.initial_states = InitialState(ssm_state, batch.start[i], a.state);
    ssd.dt_softplus = true;
    ssd.dt_min = c.dt_min;
    ssd.dt_max = c.dt_max;
    SSMKIT_RETURN_IF_ERROR(
        SsdForward(ssd, View(a.y + o * D, {1, L, H, P}, {L * D, D, P, 1}), ssm_state));
  }
  return NormAndOutProj(c, w, T, HostF32(a.y), HostF32(a.zxbcdt), HostF32(a.yn), HostF32(out));
}

Status Mamba2MixerDecode(const ModelConfig& c, const Mamba2Weights& w, const SeqBatch& batch,
                         ActBuffer normed, const Mamba2DecodeActs& a, const StateCache& cache,
                         int64_t state, ActBuffer out) {
  const int64_t n = batch.n, D = c.d_inner, N = c.d_state, G = c.ngroups;
  const int64_t H = c.nheads, P = c.headdim, C = c.conv_dim(), I = c.in_proj_dim();
  SSMKIT_RETURN_IF_ERROR(CheckDecodeSlots(cache, batch, "mamba2"));
  if (HasDtLimit(c) && !a.dt.on_host()) {
    return Status::Unsupported(
        "mamba2: a time_step_limit other than (0, inf) runs on the CPU only");
  }
  SSMKIT_RETURN_IF_ERROR(InProj(c, w, n, normed, a.zxbcdt));
  const Tensor xbc = (a.zxbcdt + D).Rows(n, C, I);
  const DecodeConvStates conv(cache, state, batch, a.conv.f32());
  SSMKIT_RETURN_IF_ERROR(CausalConv1dUpdate(
      {xbc, w.conv_weight, w.conv_bias, Conv1dActivation::kSilu}, conv.tensor(), xbc));
  conv.Finish();
  StateUpdateInputs step;
  step.x = (a.zxbcdt + D).View({n, H, P}, {I, P, 1});
  step.A = w.A;
  step.B = (a.zxbcdt + 2 * D).View({n, G, N}, {I, N, 1});
  step.C = (a.zxbcdt + 2 * D + G * N).View({n, G, N}, {I, N, 1});
  step.D = w.D;
  if (!w.gated_norm.defined()) step.z = a.zxbcdt.View({n, H, P}, {I, P, 1});
  const ActBuffer dt_in = a.zxbcdt + D + C;  // (n, H), row stride I
  if (HasDtLimit(c)) {
    // dt = clamp(softplus(dt_in + dt_bias), dt_min, dt_max), as the SSD applies it in prefill.
    const float* bias = static_cast<const float*>(w.dt_bias.data);
    const float* in = dt_in.f32();
    float* dt = a.dt.f32();
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const float v = in[b * I + h] + bias[h];
        const float sp = v > 20.0f ? v : std::log1p(std::exp(v));
        dt[b * H + h] = std::clamp(sp, c.dt_min, c.dt_max);
      }
    }
    step.dt = a.dt.Rows(n, H, H);
  } else {
    step.dt = dt_in.Rows(n, H, I);
    step.dt_bias = w.dt_bias;
    step.dt_softplus = true;
  }
  Tensor ssm_state;
  DecodeSsmStates(cache, state, batch, &ssm_state, &step.state_batch_indices);
  SSMKIT_RETURN_IF_ERROR(SelectiveStateUpdate(step, ssm_state, a.y.View({n, H, P}, {D, P, 1})));
  return NormAndOutProj(c, w, n, a.y, a.zxbcdt, a.yn, out);
}

}  // namespace ssmkit::model

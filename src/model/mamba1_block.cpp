#include "model/mamba1_block.hpp"

#include <algorithm>

#include "model/mixer_state.hpp"
#include "model/views.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::model {
namespace {

int64_t StateFloats(const ModelConfig& c) {
  return std::max(c.d_inner * (c.d_conv - 1), c.d_inner * c.d_state);
}

// Jamba's RMSNorms of dt_in, B and C, in place on token-major rows (rows, E), row stride ld.
Status NormDtBC(const ModelConfig& c, const Mamba1Weights& w, int64_t rows, ActBuffer xdbl,
                int64_t ld) {
  if (!w.dt_norm.defined()) return Status::Ok();
  const int64_t R = c.dt_rank, N = c.d_state;
  RmsNormOptions o;
  o.eps = c.norm_eps;
  for (auto [offset, width, weight] :
       {std::tuple{int64_t{0}, R, &w.dt_norm}, std::tuple{R, N, &w.b_norm},
        std::tuple{R + N, N, &w.c_norm}}) {
    const Tensor x = (xdbl + offset).Rows(rows, width, ld);
    SSMKIT_RETURN_IF_ERROR(RmsNormForward({x, *weight, Tensor{}, Tensor{}}, x, o));
  }
  return Status::Ok();
}

}  // namespace

int64_t Mamba1PrefillFloats(const ModelConfig& c, int64_t T) {
  const int64_t E = c.dt_rank + 2 * c.d_state;
  return T * (2 * c.d_inner + c.d_inner + E + (c.dt_bc_norms ? E : 0) + c.d_inner + c.d_inner) +
         StateFloats(c);
}

Mamba1PrefillActs CarveMamba1Prefill(const ModelConfig& c, int64_t T, float* base) {
  const int64_t E = c.dt_rank + 2 * c.d_state;
  Mamba1PrefillActs a;
  a.xz = base;
  a.xc = a.xz + 2 * c.d_inner * T;
  a.xdbl = a.xc + c.d_inner * T;
  a.xdbl_rows = a.xdbl + E * T;
  a.delta = a.xdbl_rows + (c.dt_bc_norms ? E * T : 0);
  a.y = a.delta + c.d_inner * T;
  a.state = a.y + c.d_inner * T;
  return a;
}

int64_t Mamba1DecodeFloats(const ModelConfig& c, int64_t n) {
  return n * (2 * c.d_inner + c.dt_rank + 2 * c.d_state + c.d_inner + c.d_inner +
              c.d_inner * (c.d_conv - 1));
}

Mamba1DecodeActs CarveMamba1Decode(const ModelConfig& c, int64_t n, ActBuffer base) {
  Mamba1DecodeActs a;
  a.xz = base;
  a.xdbl = a.xz + n * 2 * c.d_inner;
  a.dt = a.xdbl + n * (c.dt_rank + 2 * c.d_state);
  a.y = a.dt + n * c.d_inner;
  a.conv = a.y + n * c.d_inner;
  return a;
}

Status Mamba1MixerPrefill(const ModelConfig& c, const Mamba1Weights& w, const SeqBatch& batch,
                          const float* normed, const Mamba1PrefillActs& a, const StateCache& cache,
                          int64_t state, float* out) {
  const int64_t T = batch.T, d = c.d_model, D = c.d_inner, N = c.d_state, R = c.dt_rank;
  const int64_t E = R + 2 * N;
  SSMKIT_RETURN_IF_ERROR(LinearForward({Rows(normed, T, d, d), w.in_proj, w.in_proj_bias},
                                       Columns(a.xz, T, 2 * D, T)));
  for (int64_t i = 0; i < batch.n; ++i) {
    // (1, features, L) view of sequence i in a channel-major (features, T) buffer.
    const int64_t o = batch.offset[i], L = batch.length(i);
    auto seq = [&](const float* p, int64_t features) {
      return View(p + o, {1, features, L}, {features * T, T, 1});
    };
    const Tensor conv_state = cache.conv(state, batch.slots[i], 1);
    CausalConv1dInputs conv{seq(a.xz, D), w.conv_weight, w.conv_bias,
                            InitialState(conv_state, batch.start[i], a.state),
                            Conv1dActivation::kSilu};
    SSMKIT_RETURN_IF_ERROR(CausalConv1dForward(conv, seq(a.xc, D), conv_state));
  }
  if (c.dt_bc_norms) {
    SSMKIT_RETURN_IF_ERROR(
        LinearForward({Columns(a.xc, T, D, T), w.x_proj, Tensor{}}, Rows(a.xdbl_rows, T, E, E)));
    SSMKIT_RETURN_IF_ERROR(NormDtBC(c, w, T, HostF32(a.xdbl_rows), E));
    Transpose(a.xdbl_rows, E, T, E, a.xdbl, T);
  } else {
    SSMKIT_RETURN_IF_ERROR(
        LinearForward({Columns(a.xc, T, D, T), w.x_proj, Tensor{}}, Columns(a.xdbl, T, E, T)));
  }
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Columns(a.xdbl, T, R, T), w.dt_proj, Tensor{}}, Columns(a.delta, T, D, T)));
  for (int64_t i = 0; i < batch.n; ++i) {
    const int64_t o = batch.offset[i], L = batch.length(i);
    auto seq = [&](const float* p, int64_t features) {
      return View(p + o, {1, features, L}, {features * T, T, 1});
    };
    const Tensor ssm_state = cache.ssm(state, batch.slots[i], 1);
    SelectiveScanInputs scan;
    scan.u = seq(a.xc, D);
    scan.delta = seq(a.delta, D);
    scan.A = w.A;
    scan.B = seq(a.xdbl + R * T, N);
    scan.C = seq(a.xdbl + (R + N) * T, N);
    scan.D = w.D;
    scan.z = seq(a.xz + D * T, D);
    scan.delta_bias = w.dt_bias;
    scan.initial_state = InitialState(ssm_state, batch.start[i], a.state);
    scan.delta_softplus = true;
    SSMKIT_RETURN_IF_ERROR(SelectiveScanForward(scan, seq(a.y, D), ssm_state));
  }
  return LinearForward({Columns(a.y, T, D, T), w.out_proj, w.out_proj_bias}, Rows(out, T, d, d));
}

Status Mamba1MixerDecode(const ModelConfig& c, const Mamba1Weights& w, const SeqBatch& batch,
                         ActBuffer normed, const Mamba1DecodeActs& a, const StateCache& cache,
                         int64_t state, ActBuffer out) {
  const int64_t n = batch.n, d = c.d_model, D = c.d_inner, N = c.d_state, R = c.dt_rank;
  const int64_t E = R + 2 * N;
  SSMKIT_RETURN_IF_ERROR(CheckDecodeSlots(cache, batch, "mamba1"));
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({normed.Rows(n, d, d), w.in_proj, w.in_proj_bias}, a.xz.Rows(n, 2 * D, 2 * D)));
  const Tensor x = a.xz.Rows(n, D, 2 * D);
  const DecodeConvStates conv(cache, state, batch, a.conv.f32());
  SSMKIT_RETURN_IF_ERROR(CausalConv1dUpdate(
      {x, w.conv_weight, w.conv_bias, Conv1dActivation::kSilu}, conv.tensor(), x));
  conv.Finish();
  SSMKIT_RETURN_IF_ERROR(LinearForward({x, w.x_proj, Tensor{}}, a.xdbl.Rows(n, E, E)));
  SSMKIT_RETURN_IF_ERROR(NormDtBC(c, w, n, a.xdbl, E));
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({a.xdbl.Rows(n, R, E), w.dt_proj, Tensor{}}, a.dt.Rows(n, D, D)));
  StateUpdateInputs step;
  step.x = x;
  step.dt = a.dt.Rows(n, D, D);
  step.A = w.A;
  step.B = (a.xdbl + R).Rows(n, N, E);
  step.C = (a.xdbl + R + N).Rows(n, N, E);
  step.D = w.D;
  step.z = (a.xz + D).Rows(n, D, 2 * D);
  step.dt_bias = w.dt_bias;
  step.dt_softplus = true;
  Tensor ssm_state;
  DecodeSsmStates(cache, state, batch, &ssm_state, &step.state_batch_indices);
  SSMKIT_RETURN_IF_ERROR(SelectiveStateUpdate(step, ssm_state, a.y.Rows(n, D, D)));
  return LinearForward({a.y.Rows(n, D, D), w.out_proj, w.out_proj_bias}, out.Rows(n, d, d));
}

}  // namespace ssmkit::model

// causal_conv1d (forward, backward) and causal_conv1d_update: argument checking, then dispatch
// to the backend. Every rule here has a test in tests/harness/cases/causal_conv1d.cpp and
// causal_conv1d_update.cpp (their bad inputs).
#include "ssmkit/conv1d.hpp"

#include <new>
#include <string>

#include "cpu/conv1d.hpp"
#include "cuda/backend.hpp"
#include "ops/check.hpp"
#include "ops/varlen.hpp"
#include "params/conv1d_params.hpp"
#include "ssmkit/op_tensors.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "causal_conv1d";
constexpr const char* kUpdateOp = "causal_conv1d_update";

SeqView MakeSeqView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.rank > 1 ? t.strides[1] : 0};
}

ChannelView MakeChannelView(const Tensor& t) {
  if (!t.defined()) return {};
  return {static_cast<float*>(t.data), t.strides[0]};
}

// weight (D, K) f32 with K in [2, 8]; sets *width.
Status CheckWeight(const char* op, const Tensor& weight, int64_t dim, int64_t* width) {
  if (!weight.defined()) return check::Mismatch(op, "weight", "a tensor (D, K)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, "weight", weight, {2}));
  const int64_t K = weight.shape[1];
  if (K < kMinConvWidth || K > kMaxConvWidth) {
    return check::Mismatch(op, "weight",
                           "conv width K in [" + std::to_string(kMinConvWidth) + ", " +
                               std::to_string(kMaxConvWidth) + "]",
                           "K = " + std::to_string(K) + " in " + weight.shape_string());
  }
  *width = K;
  return check::Tensor(op, "weight", weight, {"(D, K)", {dim, K}}, {DType::kF32});
}

Status CheckActivation(const char* op, Conv1dActivation activation) {
  const int a = static_cast<int>(activation);
  if (a == 0 || a == 1) return Status::Ok();
  return check::Mismatch(op, "activation", "kNone (0) or kSilu (1)", std::to_string(a));
}

// Checks the inputs shared by forward and backward and fills the input half of `p`.
Status CheckInputs(const CausalConv1dInputs& in, Device device, CausalConv1dParams* p) {
  if (!in.x.defined()) return check::Mismatch(kOp, "x", "a tensor (B, D, L)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x", in.x, {3}));
  const int64_t batch = in.x.shape[0], dim = in.x.shape[1], seqlen = in.x.shape[2];
  if (batch < 1) return check::Mismatch(kOp, "x", "batch B >= 1", "B = " + std::to_string(batch));
  if (dim < 1) return check::Mismatch(kOp, "x", "channels D >= 1", "D = " + std::to_string(dim));
  if (seqlen < 1) {
    return check::Mismatch(kOp, "x", "sequence length L >= 1", "L = " + std::to_string(seqlen));
  }
  const auto io_dtypes = {DType::kF32, DType::kBF16};
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, "x", in.x, {"(B, D, L)", {batch, dim, seqlen}}, io_dtypes));
  int64_t width = 0;
  SSMKIT_RETURN_IF_ERROR(CheckWeight(kOp, in.weight, dim, &width));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "bias", in.bias, {"(D)", {dim}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "initial_states", in.initial_states,
                                         {"(B, D, K-1)", {batch, dim, width - 1}}, io_dtypes));
  SSMKIT_RETURN_IF_ERROR(CheckActivation(kOp, in.activation));
  CuSeqlensView no_cu_seqlens;
  SSMKIT_RETURN_IF_ERROR(check::PackedSequences(kOp, in.seq_idx, ssmkit::Tensor{}, batch, seqlen,
                                                device, &p->seq_idx, &no_cu_seqlens));
  p->batch = batch;
  p->dim = dim;
  p->seqlen = seqlen;
  p->width = width;
  p->silu = in.activation == Conv1dActivation::kSilu;
  p->x = MakeSeqView(in.x);
  p->weight = MakeChannelView(in.weight);
  p->bias = MakeChannelView(in.bias);
  p->initial_states = MakeSeqView(in.initial_states);
  return Status::Ok();
}

Status CheckStates(const char* name, const Tensor& t, const CausalConv1dParams& p) {
  return check::Optional(kOp, name, t, {"(B, D, K-1)", {p.batch, p.dim, p.width - 1}},
                         {DType::kF32, DType::kBF16});
}

}  // namespace

Status CausalConv1dForward(const CausalConv1dInputs& inputs, const Tensor& out,
                           const Tensor& final_states) {
  CausalConv1dParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<CausalConv1dTensors>(
      kOp, inputs, {{"out", out}, {"final_states", final_states}}, &device));
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, device, &p));
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, "out", out, {"(B, D, L)", {p.batch, p.dim, p.seqlen}}, {inputs.x.dtype}));
  SSMKIT_RETURN_IF_ERROR(CheckStates("final_states", final_states, p));
  p.out = MakeSeqView(out);
  p.final_states = MakeSeqView(final_states);
  if (device == Device::kCuda) return cuda::CausalConv1dForward(p);
  return check::RunGuarded(kOp, [&] { return cpu::CausalConv1dForward(p); });
}

Status CausalConv1dBackward(const CausalConv1dInputs& inputs, const Tensor& dout,
                            const Tensor& dfinal_states, const CausalConv1dGrads& grads) {
  CausalConv1dBwdParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<CausalConv1dTensors>(
      kOp, inputs, {{"dout", dout}, {"dfinal_states", dfinal_states}}, grads, &device));
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, device, &p));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "dout", dout, {"(B, D, L)", {p.batch, p.dim, p.seqlen}},
                                       {inputs.x.dtype}));
  SSMKIT_RETURN_IF_ERROR(CheckStates("dfinal_states", dfinal_states, p));
  SSMKIT_RETURN_IF_ERROR(check::GradsLike(kOp, grads, CausalConv1dTensors::grads, inputs));
  p.dout = MakeSeqView(dout);
  p.dfinal_states = MakeSeqView(dfinal_states);
  p.dx = MakeSeqView(grads.dx);
  p.dinitial_states = MakeSeqView(grads.dinitial_states);
  p.dweight = MakeChannelView(grads.dweight);
  p.dbias = MakeChannelView(grads.dbias);
  if (device == Device::kCuda) return cuda::CausalConv1dBackward(p);
  return check::RunGuarded(kOp, [&] { return cpu::CausalConv1dBackward(p); });
}

Status CausalConv1dUpdate(const CausalConv1dUpdateInputs& inputs, const Tensor& conv_state,
                          const Tensor& out) {
  const CausalConv1dUpdateInputs& in = inputs;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<CausalConv1dUpdateTensors>(
      kUpdateOp, in, {{"conv_state", conv_state}, {"out", out}}, &device));
  if (!in.x.defined())
    return check::Mismatch(kUpdateOp, "x", "a tensor (B, D) or (B, D, T)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kUpdateOp, "x", in.x, {2, 3}));
  const bool steps_dim = in.x.rank == 3;
  const int64_t batch = in.x.shape[0], dim = in.x.shape[1], steps = steps_dim ? in.x.shape[2] : 1;
  if (batch < 1)
    return check::Mismatch(kUpdateOp, "x", "batch B >= 1", "B = " + std::to_string(batch));
  if (dim < 1)
    return check::Mismatch(kUpdateOp, "x", "channels D >= 1", "D = " + std::to_string(dim));
  if (steps < 1)
    return check::Mismatch(kUpdateOp, "x", "steps T >= 1", "T = " + std::to_string(steps));
  const auto io_dtypes = {DType::kF32, DType::kBF16};
  const check::ShapeSpec x_spec = steps_dim ? check::ShapeSpec{"(B, D, T)", {batch, dim, steps}}
                                            : check::ShapeSpec{"(B, D)", {batch, dim}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kUpdateOp, "x", in.x, x_spec, io_dtypes));
  int64_t width = 0;
  SSMKIT_RETURN_IF_ERROR(CheckWeight(kUpdateOp, in.weight, dim, &width));
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kUpdateOp, "bias", in.bias, {"(D)", {dim}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(CheckActivation(kUpdateOp, in.activation));
  if (!conv_state.defined()) {
    return check::Mismatch(kUpdateOp, "conv_state", "a tensor (B, D, S), S >= K-1", "null");
  }
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kUpdateOp, "conv_state", conv_state, {3}));
  const int64_t state_len = conv_state.shape[2];
  if (state_len < width - 1) {
    return check::Mismatch(kUpdateOp, "conv_state",
                           "state length S >= K-1 = " + std::to_string(width - 1),
                           "S = " + std::to_string(state_len) + " in " + conv_state.shape_string());
  }
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kUpdateOp, "conv_state", conv_state,
                                       {"(B, D, S)", {batch, dim, state_len}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kUpdateOp, "out", out, x_spec, {in.x.dtype}));
  CausalConv1dUpdateParams p;
  p.batch = batch;
  p.dim = dim;
  p.steps = steps;
  p.width = width;
  p.state_len = state_len;
  p.silu = in.activation == Conv1dActivation::kSilu;
  p.x = MakeSeqView(in.x);
  p.weight = MakeChannelView(in.weight);
  p.bias = MakeChannelView(in.bias);
  p.conv_state = MakeSeqView(conv_state);
  p.out = MakeSeqView(out);
  if (device == Device::kCuda) return cuda::CausalConv1dUpdate(p);
  return check::RunGuarded(kUpdateOp, [&] { return cpu::CausalConv1dUpdate(p); });
}

}  // namespace ssmkit

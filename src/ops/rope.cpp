// Rotary position embeddings: argument checking, the default frequencies computed the way
// transformers computes them, then dispatch (CPU; CUDA tensors: kUnsupported). Every rule
// here has a test in tests/harness/cases/rope.cpp (its bad inputs).
#include "ssmkit/rope.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cpu/rope.hpp"
#include "ops/check.hpp"
#include "ops/tensor_span.hpp"
#include "params/rope_params.hpp"

namespace ssmkit {
namespace {

constexpr const char* kForwardOp = "rope";
constexpr const char* kBackwardOp = "rope_backward";

HeadsSeqView MakeView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.strides[1], t.strides[2]};
}

std::string Number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

// transformers' default inv_freq: 1 / theta^(arange(0, R, 2) / R), each step in float32 (the
// base rounded to f32 first, as torch does for a Python float raised to a float32 tensor).
void DefaultInvFreq(double theta, int64_t rotary_dim, std::vector<float>* inv_freq) {
  inv_freq->resize(static_cast<size_t>(rotary_dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t f = 0; f < rotary_dim / 2; ++f) {
    const float exponent = static_cast<float>(2 * f) / static_cast<float>(rotary_dim);
    (*inv_freq)[f] = 1.0f / std::pow(base, exponent);
  }
}

// One of q / k and its output: (B, L, Hx, E) with B, L and E shared.
Status CheckPart(const char* op, const char* name, const Tensor& in, const char* out_name,
                 const Tensor& out, const char* legend, int64_t batch, int64_t len, int64_t E,
                 RopeParams::Part* part) {
  if (!in.defined()) {
    if (!out.defined()) return Status::Ok();
    return check::Mismatch(op, out_name, std::string("no tensor, since ") + name + " is absent",
                           "a tensor of shape " + out.shape_string());
  }
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, name, in, {4}));
  const int64_t heads = in.shape[2];
  if (heads < 1) return check::Mismatch(op, name, "heads >= 1", in.shape_string());
  const check::ShapeSpec spec{legend, {batch, len, heads, E}};
  const auto io = {DType::kF32, DType::kBF16};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, name, in, spec, io));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, out_name, out, spec, io));
  SSMKIT_RETURN_IF_ERROR(check::Writable(op, out_name, out));
  const bool same = out.data == in.data && out.dtype == in.dtype && out.strides == in.strides;
  if (!same) SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, out_name, out, name, in));
  *part = {MakeView(in), MakeView(out), heads};
  return Status::Ok();
}

Status Run(const char* op, bool backward, const RopeInputs& in, const Tensor& q_out,
           const Tensor& k_out, const RopeOptions& o) {
  const char* q_out_name = backward ? "dq" : "q_out";
  const char* k_out_name = backward ? "dk" : "k_out";
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(
      op, {{"q", in.q}, {"k", in.k}, {"positions", in.positions}, {"inv_freq", in.inv_freq}},
      {{q_out_name, q_out}, {k_out_name, k_out}}, &device));
  const Tensor& first = in.q.defined() ? in.q : in.k;
  if (!first.defined()) return check::Mismatch(op, "q, k", "at least one of q and k", "neither");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, in.q.defined() ? "q" : "k", first, {4}));
  const int64_t B = first.shape[0], L = first.shape[1], E = first.shape[3];
  if (B < 1 || L < 1 || E < 2) {
    return check::Mismatch(op, in.q.defined() ? "q" : "k", "B >= 1, L >= 1 and E >= 2",
                           first.shape_string());
  }
  const int64_t R = o.rotary_dim == 0 ? E : o.rotary_dim;
  if (R < 2 || R > E || R % 2 != 0) {
    return check::Mismatch(op, "options.rotary_dim",
                           "0 (= E) or an even R in [2, E] = [2, " + std::to_string(E) + "]",
                           std::to_string(o.rotary_dim));
  }
  if (!(std::isfinite(o.theta) && o.theta > 0.0 && std::isfinite(static_cast<float>(o.theta)))) {
    return check::Mismatch(op, "options.theta", "a finite value > 0 (in f32 range)",
                           Number(o.theta));
  }
  if (!std::isfinite(o.attention_scaling)) {
    return check::Mismatch(op, "options.attention_scaling", "a finite value",
                           Number(o.attention_scaling));
  }
  if (o.layout != RopeLayout::kHalf && o.layout != RopeLayout::kInterleaved) {
    return check::Mismatch(op, "options.layout", "kHalf (0) or kInterleaved (1)",
                           std::to_string(static_cast<int>(o.layout)));
  }
  RopeParams p;
  SSMKIT_RETURN_IF_ERROR(
      CheckPart(op, "q", in.q, q_out_name, q_out, "(B, L, H, E)", B, L, E, &p.parts[0]));
  SSMKIT_RETURN_IF_ERROR(
      CheckPart(op, "k", in.k, k_out_name, k_out, "(B, L, Hk, E)", B, L, E, &p.parts[1]));
  if (q_out.defined() && k_out.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, k_out_name, k_out, q_out_name, q_out));
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, k_out_name, k_out, "q", in.q));
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, q_out_name, q_out, "k", in.k));
  }
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(op, "positions", in.positions, {"(B, L)", {B, L}}, {DType::kI32}));
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(op, "inv_freq", in.inv_freq, {"(R/2)", {R / 2}}, {DType::kF32}));
  for (const check::NamedTensor& out :
       {check::NamedTensor{q_out_name, q_out}, {k_out_name, k_out}}) {
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, out.name, out.tensor, "positions", in.positions));
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, out.name, out.tensor, "inv_freq", in.inv_freq));
  }
  if (device == Device::kCuda) {
    return Status::Unsupported(std::string(op) + ": CUDA tensors are not supported yet (CPU only)");
  }
  thread_local std::vector<float> default_freq;
  if (in.inv_freq.defined()) {
    p.inv_freq = static_cast<const float*>(in.inv_freq.data);
  } else {
    DefaultInvFreq(o.theta, R, &default_freq);
    p.inv_freq = default_freq.data();
  }
  p.batch = B;
  p.len = L;
  p.head_dim = E;
  p.rotary_dim = R;
  p.interleaved = o.layout == RopeLayout::kInterleaved;
  p.backward = backward;
  p.attention_scaling = o.attention_scaling;
  p.positions = static_cast<const int32_t*>(in.positions.data);
  p.positions_stride_batch = in.positions.strides[0];
  p.positions_stride_seq = in.positions.strides[1];
  return check::RunGuarded(op, [&] { return cpu::Rope(p); });
}

}  // namespace

Status RopeForward(const RopeInputs& inputs, const Tensor& q_out, const Tensor& k_out,
                   const RopeOptions& options) {
  return Run(kForwardOp, false, inputs, q_out, k_out, options);
}

Status RopeBackward(const RopeInputs& inputs, const Tensor& dq, const Tensor& dk,
                    const RopeOptions& options) {
  return Run(kBackwardOp, true, inputs, dq, dk, options);
}

}  // namespace ssmkit

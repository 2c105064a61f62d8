// RMS norms (gated, and residual add + norm): argument checking, then dispatch to the
// backend. Every rule here has a test in tests/harness/cases/rms_norm.cpp and add_rms_norm.cpp
// (their bad inputs).
#include "ssmkit/norm.hpp"

#include <cmath>
#include <cstdio>
#include <new>
#include <string>

#include "cpu/norm.hpp"
#include "cuda/backend.hpp"
#include "ops/check.hpp"
#include "params/norm_params.hpp"
#include "ssmkit/op_tensors.hpp"

namespace ssmkit {
namespace {

constexpr const char* kGatedOp = "rmsnorm";
constexpr const char* kAddOp = "add_rmsnorm";

RowsView MakeRowsView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0]};
}

Status CheckEps(const char* op, float eps) {
  if (std::isfinite(eps) && eps > 0.0f) return Status::Ok();
  char given[32];
  std::snprintf(given, sizeof given, "%g", static_cast<double>(eps));
  return check::Mismatch(op, "options.eps", "a finite value > 0", given);
}

// x fixes M and E: a rank-2 tensor with M >= 1 rows and E >= 1 features.
Status CheckX(const char* op, const Tensor& x) {
  if (!x.defined()) return check::Mismatch(op, "x", "a tensor (M, E)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, "x", x, {2}));
  if (x.shape[0] < 1) {
    return check::Mismatch(op, "x", "rows M >= 1", "M = " + std::to_string(x.shape[0]));
  }
  if (x.shape[1] < 1) {
    return check::Mismatch(op, "x", "features E >= 1", "E = " + std::to_string(x.shape[1]));
  }
  return check::Tensor(op, "x", x, {"(M, E)", {x.shape[0], x.shape[1]}},
                       {DType::kF32, DType::kBF16});
}

// An (M, E) output: besides its shape and dtype, its rows must not overlap (threads write
// different rows at the same time).
Status CheckRowsOutput(const char* op, const char* name, const Tensor& t, int64_t rows,
                       int64_t features, DType dtype, bool optional) {
  if (optional && !t.defined()) return Status::Ok();
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, name, t, {"(M, E)", {rows, features}}, {dtype}));
  if (rows > 1 && t.strides[0] < features) {
    return check::Mismatch(
        op, name, "row stride >= E = " + std::to_string(features) + " (rows must not overlap)",
        "row stride " + std::to_string(t.strides[0]));
  }
  return Status::Ok();
}

// weight (E) f32 and optional bias (E) f32; fills the shared fields of `p`.
Status CheckAffine(const char* op, const Tensor& weight, const Tensor& bias, NormParams* p) {
  const check::ShapeSpec spec{"(E)", {p->features}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "weight", weight, spec, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(op, "bias", bias, spec, {DType::kF32}));
  p->weight = static_cast<const float*>(weight.data);
  p->bias = static_cast<const float*>(bias.data);
  return Status::Ok();
}

Status CheckGatedInputs(const RmsNormInputs& in, const RmsNormOptions& options, NormParams* p) {
  SSMKIT_RETURN_IF_ERROR(CheckEps(kGatedOp, options.eps));
  SSMKIT_RETURN_IF_ERROR(CheckX(kGatedOp, in.x));
  p->rows = in.x.shape[0];
  p->features = in.x.shape[1];
  if (options.group_size < 0 || (options.group_size > 0 && p->features % options.group_size != 0)) {
    return check::Mismatch(kGatedOp, "options.group_size",
                           "0 (one group of E) or a divisor of E = " + std::to_string(p->features),
                           std::to_string(options.group_size));
  }
  SSMKIT_RETURN_IF_ERROR(CheckAffine(kGatedOp, in.weight, in.bias, p));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kGatedOp, "z", in.z, {"(M, E)", {p->rows, p->features}},
                                         {DType::kF32, DType::kBF16}));
  p->group_size = options.group_size > 0 ? options.group_size : p->features;
  p->eps = options.eps;
  p->norm_before_gate = options.norm_before_gate;
  p->x = MakeRowsView(in.x);
  p->z = MakeRowsView(in.z);
  return Status::Ok();
}

Status CheckAddInputs(const AddRmsNormInputs& in, const AddRmsNormOptions& options, NormParams* p) {
  SSMKIT_RETURN_IF_ERROR(CheckEps(kAddOp, options.eps));
  SSMKIT_RETURN_IF_ERROR(CheckX(kAddOp, in.x));
  p->rows = in.x.shape[0];
  p->features = in.x.shape[1];
  SSMKIT_RETURN_IF_ERROR(check::Optional(kAddOp, "residual", in.residual,
                                         {"(M, E)", {p->rows, p->features}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(CheckAffine(kAddOp, in.weight, in.bias, p));
  p->group_size = p->features;
  p->eps = options.eps;
  p->x = MakeRowsView(in.x);
  p->residual = MakeRowsView(in.residual);
  return Status::Ok();
}

// A gradient of a per-feature input (weight, bias): (E) f32, or absent with its input.
Status CheckFeatureGrad(const char* op, const char* grad_name, const Tensor& grad,
                        const char* input_name, const Tensor& input, int64_t features) {
  if (!input.defined()) return check::AbsentWith(op, grad_name, grad, input_name);
  return check::Optional(op, grad_name, grad, {"(E)", {features}}, {DType::kF32});
}

// A gradient of a row input (x, z, residual): the input's dtype, or absent with its input.
Status CheckRowsGrad(const char* op, const char* grad_name, const Tensor& grad,
                     const char* input_name, const Tensor& input, const NormParams& p) {
  if (!input.defined()) return check::AbsentWith(op, grad_name, grad, input_name);
  return CheckRowsOutput(op, grad_name, grad, p.rows, p.features, input.dtype, true);
}

Status Run(const char* op, Device device, const NormParams& p) {
  if (device == Device::kCuda) return cuda::RmsNormForward(op, p);
  return check::RunGuarded(op, [&] { return cpu::RmsNormForward(p); });
}

Status RunBackward(const char* op, Device device, const NormBwdParams& p) {
  if (device == Device::kCuda) return cuda::RmsNormBackward(op, p);
  return check::RunGuarded(op, [&] { return cpu::RmsNormBackward(p); });
}

}  // namespace

Status RmsNormForward(const RmsNormInputs& inputs, const Tensor& out,
                      const RmsNormOptions& options) {
  NormParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::OpDevices<RmsNormTensors>(kGatedOp, inputs, {{"out", out}}, &device));
  SSMKIT_RETURN_IF_ERROR(CheckGatedInputs(inputs, options, &p));
  SSMKIT_RETURN_IF_ERROR(
      CheckRowsOutput(kGatedOp, "out", out, p.rows, p.features, inputs.x.dtype, false));
  p.out = MakeRowsView(out);
  return Run(kGatedOp, device, p);
}

Status RmsNormBackward(const RmsNormInputs& inputs, const Tensor& dout, const RmsNormGrads& grads,
                       const RmsNormOptions& options) {
  NormBwdParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::OpDevices<RmsNormTensors>(kGatedOp, inputs, {{"dout", dout}}, grads, &device));
  SSMKIT_RETURN_IF_ERROR(CheckGatedInputs(inputs, options, &p));
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kGatedOp, "dout", dout, {"(M, E)", {p.rows, p.features}}, {inputs.x.dtype}));
  SSMKIT_RETURN_IF_ERROR(CheckRowsGrad(kGatedOp, "dx", grads.dx, "x", inputs.x, p));
  SSMKIT_RETURN_IF_ERROR(
      CheckFeatureGrad(kGatedOp, "dweight", grads.dweight, "weight", inputs.weight, p.features));
  SSMKIT_RETURN_IF_ERROR(
      CheckFeatureGrad(kGatedOp, "dbias", grads.dbias, "bias", inputs.bias, p.features));
  SSMKIT_RETURN_IF_ERROR(CheckRowsGrad(kGatedOp, "dz", grads.dz, "z", inputs.z, p));
  p.dout = MakeRowsView(dout);
  p.dx = MakeRowsView(grads.dx);
  p.dz = MakeRowsView(grads.dz);
  p.dweight = static_cast<float*>(grads.dweight.data);
  p.dbias = static_cast<float*>(grads.dbias.data);
  return RunBackward(kGatedOp, device, p);
}

Status AddRmsNormForward(const AddRmsNormInputs& inputs, const Tensor& out,
                         const Tensor& residual_out, const AddRmsNormOptions& options) {
  NormParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<AddRmsNormTensors>(
      kAddOp, inputs, {{"out", out}, {"residual_out", residual_out}}, &device));
  SSMKIT_RETURN_IF_ERROR(CheckAddInputs(inputs, options, &p));
  SSMKIT_RETURN_IF_ERROR(
      CheckRowsOutput(kAddOp, "out", out, p.rows, p.features, inputs.x.dtype, false));
  SSMKIT_RETURN_IF_ERROR(CheckRowsOutput(kAddOp, "residual_out", residual_out, p.rows, p.features,
                                         DType::kF32, false));
  p.out = MakeRowsView(out);
  p.residual_out = MakeRowsView(residual_out);
  return Run(kAddOp, device, p);
}

Status AddRmsNormBackward(const AddRmsNormInputs& inputs, const Tensor& dout,
                          const Tensor& dresidual_out, const AddRmsNormGrads& grads,
                          const AddRmsNormOptions& options) {
  NormBwdParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<AddRmsNormTensors>(
      kAddOp, inputs, {{"dout", dout}, {"dresidual_out", dresidual_out}}, grads, &device));
  SSMKIT_RETURN_IF_ERROR(CheckAddInputs(inputs, options, &p));
  const check::ShapeSpec rows{"(M, E)", {p.rows, p.features}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kAddOp, "dout", dout, rows, {inputs.x.dtype}));
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kAddOp, "dresidual_out", dresidual_out, rows, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(CheckRowsGrad(kAddOp, "dx", grads.dx, "x", inputs.x, p));
  SSMKIT_RETURN_IF_ERROR(
      CheckRowsGrad(kAddOp, "dresidual", grads.dresidual, "residual", inputs.residual, p));
  SSMKIT_RETURN_IF_ERROR(
      CheckFeatureGrad(kAddOp, "dweight", grads.dweight, "weight", inputs.weight, p.features));
  SSMKIT_RETURN_IF_ERROR(
      CheckFeatureGrad(kAddOp, "dbias", grads.dbias, "bias", inputs.bias, p.features));
  p.dout = MakeRowsView(dout);
  p.dresidual_out = MakeRowsView(dresidual_out);
  p.dx = MakeRowsView(grads.dx);
  p.dresidual = MakeRowsView(grads.dresidual);
  p.dweight = static_cast<float*>(grads.dweight.data);
  p.dbias = static_cast<float*>(grads.dbias.data);
  return RunBackward(kAddOp, device, p);
}

}  // namespace ssmkit

// MlpForward / MlpBackward: argument checking, then the CPU backend; activation names and the
// fused gate/up view. Every rule here has a test in tests/mlp_errors_test.cpp.
// Dimension legend: T rows, d model width, F hidden width.
#include <string>
#include <vector>

#include "cpu/mlp.hpp"
#include "ops/check.hpp"
#include "ops/mlp_checks.hpp"
#include "params/mlp_params.hpp"
#include "ssmkit/mlp.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "mlp";

struct ActivationName {
  const char* name;
  MlpActivation activation;
};
// transformers' ACT2FN names (activations.py) for the functions we have.
constexpr ActivationName kActivationNames[] = {
    {"silu", MlpActivation::kSilu},          {"swish", MlpActivation::kSilu},
    {"gelu", MlpActivation::kGeluErf},       {"gelu_python", MlpActivation::kGeluErf},
    {"gelu_new", MlpActivation::kGeluTanh},  {"gelu_pytorch_tanh", MlpActivation::kGeluTanh},
    {"gelu_fast", MlpActivation::kGeluTanh}, {"relu", MlpActivation::kRelu},
    {"relu2", MlpActivation::kRelu2},
};

// The inputs as Args (for the device and overlap checks), into a reused vector.
void InputArgs(const MlpInputs& in, std::vector<check::Arg>& args) {
  args.clear();
  args.push_back({"x", -1, nullptr, &in.x});
  check::AddWeights(args, "weights", -1, in.weights);
  args.push_back({"gate_add", -1, nullptr, &in.gate_add});
  args.push_back({"up_add", -1, nullptr, &in.up_add});
}

// x, the weights, the options and the additive inputs; fills everything in p but out.
Status CheckInputs(const MlpInputs& in, const MlpOptions& options, MlpParams* p) {
  int64_t T = 0, d = 0;
  SSMKIT_RETURN_IF_ERROR(check::InputRows(kOp, in.x, &T, &d));
  int64_t F = 0;
  SSMKIT_RETURN_IF_ERROR(check::MlpWeightsFor(kOp, {"weights"}, in.weights, d, &F));
  const bool gated = in.weights.gate.defined();
  SSMKIT_RETURN_IF_ERROR(check::MlpOptionsFor(kOp, "options", options, gated));
  if (!gated && in.gate_add.defined()) {
    return check::Mismatch(kOp, "gate_add", "no tensor, since weights.gate is absent",
                           "a tensor of shape " + in.gate_add.shape_string());
  }
  SSMKIT_RETURN_IF_ERROR(check::OptionalRows(kOp, "gate_add", in.gate_add, "(T, F)", T, F));
  SSMKIT_RETURN_IF_ERROR(check::OptionalRows(kOp, "up_add", in.up_add, "(T, F)", T, F));
  p->rows = T;
  p->model = d;
  p->options = options;
  p->weights = WeightParamsOf(in.weights);
  p->x = static_cast<const float*>(in.x.data);
  p->x_stride = check::RowStride(in.x, d);
  if (in.gate_add.defined()) {
    p->gate_add = static_cast<const float*>(in.gate_add.data);
    p->gate_add_stride = check::RowStride(in.gate_add, F);
  }
  if (in.up_add.defined()) {
    p->up_add = static_cast<const float*>(in.up_add.data);
    p->up_add_stride = check::RowStride(in.up_add, F);
  }
  return Status::Ok();
}

// An optional (rows, cols) output: pointer and row stride into *data / *stride.
void SetRows(const Tensor& t, int64_t cols, float** data, int64_t* stride) {
  if (!t.defined()) return;
  *data = static_cast<float*>(t.data);
  *stride = check::RowStride(t, cols);
}

}  // namespace

Status MlpActivationFromName(std::string_view name, MlpActivation* activation) {
  for (const ActivationName& a : kActivationNames) {
    if (name == a.name) {
      *activation = a.activation;
      return Status::Ok();
    }
  }
  std::string known;
  for (const ActivationName& a : kActivationNames)
    known += (known.empty() ? "" : ", ") + std::string(a.name);
  std::string given = "\"";
  given.append(name).append("\"");
  return check::Mismatch(kOp, "activation name", "one of " + known, given);
}

const char* MlpActivationName(MlpActivation activation) {
  for (const ActivationName& a : kActivationNames) {
    if (a.activation == activation) return a.name;
  }
  return "unknown";
}

Status MlpForward(const MlpInputs& inputs, const Tensor& out, const MlpOptions& options) {
  thread_local std::vector<check::Arg> in_args, out_args;
  InputArgs(inputs, in_args);
  out_args.assign({{"out", -1, nullptr, &out}});
  SSMKIT_RETURN_IF_ERROR(check::CpuOnly(kOp, in_args, out_args));
  MlpParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, options, &p));
  SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "out", out, "(T, d)", p.rows, p.model));
  SSMKIT_RETURN_IF_ERROR(check::NoOverlaps(kOp, in_args, out_args));
  p.out = static_cast<float*>(out.data);
  p.out_stride = check::RowStride(out, p.model);
  return check::RunGuarded(kOp, [&] { return cpu::MlpForward(p); });
}

Status MlpBackward(const MlpInputs& inputs, const Tensor& dout, const MlpGrads& grads,
                   const MlpOptions& options) {
  thread_local std::vector<check::Arg> in_args, out_args;
  InputArgs(inputs, in_args);
  in_args.push_back({"dout", -1, nullptr, &dout});
  out_args.assign({{"grads", -1, "dx", &grads.dx},
                   {"grads", -1, "dgate_add", &grads.dgate_add},
                   {"grads", -1, "dup_add", &grads.dup_add}});
  check::AddGrads(out_args, "grads.weights", -1, grads.weights);
  SSMKIT_RETURN_IF_ERROR(check::CpuOnly(kOp, in_args, out_args));
  MlpBackwardParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, options, &p));
  SSMKIT_RETURN_IF_ERROR(check::FloatMlpWeights(kOp, {"weights"}, inputs.weights));
  const int64_t T = p.rows, d = p.model, F = p.weights.hidden;
  SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "dout", dout, "(T, d)", T, d));
  SSMKIT_RETURN_IF_ERROR(check::OptionalRows(kOp, "grads.dx", grads.dx, "(T, d)", T, d));
  if (!inputs.gate_add.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::AbsentWith(kOp, "grads.dgate_add", grads.dgate_add, "gate_add"));
  }
  if (!inputs.up_add.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::AbsentWith(kOp, "grads.dup_add", grads.dup_add, "up_add"));
  }
  SSMKIT_RETURN_IF_ERROR(
      check::OptionalRows(kOp, "grads.dgate_add", grads.dgate_add, "(T, F)", T, F));
  SSMKIT_RETURN_IF_ERROR(check::OptionalRows(kOp, "grads.dup_add", grads.dup_add, "(T, F)", T, F));
  SSMKIT_RETURN_IF_ERROR(
      check::MlpWeightGradsFor(kOp, {"grads.weights"}, grads.weights, inputs.weights));

  SSMKIT_RETURN_IF_ERROR(check::NoOverlaps(kOp, in_args, out_args));

  p.dout = static_cast<const float*>(dout.data);
  p.dout_stride = check::RowStride(dout, d);
  SetRows(grads.dx, d, &p.dx, &p.dx_stride);
  SetRows(grads.dgate_add, F, &p.dgate_add, &p.dgate_add_stride);
  SetRows(grads.dup_add, F, &p.dup_add, &p.dup_add_stride);
  p.grads = GradParamsOf(grads.weights);
  return check::RunGuarded(kOp, [&] { return cpu::MlpBackward(p); });
}

Status SplitGateUp(const Tensor& fused, Tensor* gate, Tensor* up) {
  constexpr const char* kSplit = "split_gate_up";
  if (!fused.defined()) return check::Mismatch(kSplit, "fused", "a tensor (2F, d) or (2F)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kSplit, "fused", fused, {1, 2}));
  const int64_t rows = fused.shape[0];
  if (rows < 2 || rows % 2 != 0) {
    return check::Mismatch(kSplit, "fused", "an even first dimension 2F >= 2",
                           fused.shape_string());
  }
  *gate = fused;
  *up = fused;
  gate->shape[0] = up->shape[0] = rows / 2;
  up->data = static_cast<char*>(fused.data) + rows / 2 * fused.strides[0] * DTypeSize(fused.dtype);
  return Status::Ok();
}

}  // namespace ssmkit

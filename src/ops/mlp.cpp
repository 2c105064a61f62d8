// MlpForward / MlpBackward: argument checking, then the CPU backend; activation names and the
// fused gate/up view. Every rule here has a test in tests/mlp_errors_test.cpp.
// Dimension legend: T rows, d model width, F hidden width.
#include <string>

#include "cpu/mlp.hpp"
#include "ops/check.hpp"
#include "ops/mlp_checks.hpp"
#include "ops/mlp_params.hpp"
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

// A row-strided matrix's row stride; any stride serves a single row.
int64_t RowStride(const Tensor& t, int64_t cols) { return t.shape[0] == 1 ? cols : t.strides[0]; }

Status CheckDevice(const MlpInputs& in, std::initializer_list<check::NamedTensor> outputs) {
  const MlpWeights& w = in.weights;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(kOp,
                                        {{"x", in.x},
                                         {"weights.gate", w.gate},
                                         {"weights.up", w.up},
                                         {"weights.down", w.down},
                                         {"weights.gate_bias", w.gate_bias},
                                         {"weights.up_bias", w.up_bias},
                                         {"weights.down_bias", w.down_bias},
                                         {"gate_add", in.gate_add},
                                         {"up_add", in.up_add}},
                                        outputs, &device));
  if (device != Device::kCpu) {
    return Status::Unsupported(std::string(kOp) + ": CUDA tensors: this op runs on the CPU only");
  }
  return Status::Ok();
}

// x, the weights, the options and the additive inputs; fills everything in p but out.
Status CheckInputs(const MlpInputs& in, const MlpOptions& options, MlpParams* p) {
  if (!in.x.defined()) return check::Mismatch(kOp, "x", "a tensor (T, d)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x", in.x, {2}));
  const int64_t T = in.x.shape[0], d = in.x.shape[1];
  if (T < 1 || d < 1) return check::Mismatch(kOp, "x", "T >= 1 and d >= 1", in.x.shape_string());
  SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "x", in.x, "(T, d)", T, d));
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
  p->x_stride = RowStride(in.x, d);
  if (in.gate_add.defined()) {
    p->gate_add = static_cast<const float*>(in.gate_add.data);
    p->gate_add_stride = RowStride(in.gate_add, F);
  }
  if (in.up_add.defined()) {
    p->up_add = static_cast<const float*>(in.up_add.data);
    p->up_add_stride = RowStride(in.up_add, F);
  }
  return Status::Ok();
}

// An optional (rows, cols) output: pointer and row stride into *data / *stride.
void SetRows(const Tensor& t, int64_t cols, float** data, int64_t* stride) {
  if (!t.defined()) return;
  *data = static_cast<float*>(t.data);
  *stride = RowStride(t, cols);
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
  SSMKIT_RETURN_IF_ERROR(CheckDevice(inputs, {{"out", out}}));
  MlpParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, options, &p));
  SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "out", out, "(T, d)", p.rows, p.model));
  if (check::Overlap(out, inputs.x)) return check::Overlapping(kOp, "out", "x");
  if (check::Overlap(out, inputs.gate_add)) return check::Overlapping(kOp, "out", "gate_add");
  if (check::Overlap(out, inputs.up_add)) {
    return check::Overlapping(kOp, "out", "up_add");
  }
  p.out = static_cast<float*>(out.data);
  p.out_stride = RowStride(out, p.model);
  return check::RunGuarded(kOp, [&] { return cpu::MlpForward(p); });
}

Status MlpBackward(const MlpInputs& inputs, const Tensor& dout, const MlpGrads& grads,
                   const MlpOptions& options) {
  const MlpWeightGrads& g = grads.weights;
  SSMKIT_RETURN_IF_ERROR(CheckDevice(inputs, {{"dout", dout},
                                              {"grads.dx", grads.dx},
                                              {"grads.dgate_add", grads.dgate_add},
                                              {"grads.dup_add", grads.dup_add},
                                              {"grads.weights.dgate", g.dgate},
                                              {"grads.weights.dup", g.dup},
                                              {"grads.weights.ddown", g.ddown},
                                              {"grads.weights.dgate_bias", g.dgate_bias},
                                              {"grads.weights.dup_bias", g.dup_bias},
                                              {"grads.weights.ddown_bias", g.ddown_bias}}));
  MlpBackwardParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, options, &p));
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
  SSMKIT_RETURN_IF_ERROR(check::MlpWeightGradsFor(kOp, {"grads.weights"}, g, inputs.weights));

  // No gradient output may overlap an input or another output.
  const MlpWeights& w = inputs.weights;
  const check::NamedTensor outputs[] = {{"grads.dx", grads.dx},
                                        {"grads.dgate_add", grads.dgate_add},
                                        {"grads.dup_add", grads.dup_add},
                                        {"grads.weights.dgate", g.dgate},
                                        {"grads.weights.dup", g.dup},
                                        {"grads.weights.ddown", g.ddown},
                                        {"grads.weights.dgate_bias", g.dgate_bias},
                                        {"grads.weights.dup_bias", g.dup_bias},
                                        {"grads.weights.ddown_bias", g.ddown_bias}};
  const check::NamedTensor others[] = {{"x", inputs.x},
                                       {"dout", dout},
                                       {"gate_add", inputs.gate_add},
                                       {"up_add", inputs.up_add},
                                       {"weights.gate", w.gate},
                                       {"weights.up", w.up},
                                       {"weights.down", w.down},
                                       {"weights.gate_bias", w.gate_bias},
                                       {"weights.up_bias", w.up_bias},
                                       {"weights.down_bias", w.down_bias}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    for (const check::NamedTensor& o : others) {
      if (check::Overlap(outputs[i].tensor, o.tensor)) {
        return check::Overlapping(kOp, outputs[i].name, o.name);
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (check::Overlap(outputs[i].tensor, outputs[j].tensor)) {
        return check::Overlapping(kOp, outputs[i].name, outputs[j].name);
      }
    }
  }

  p.dout = static_cast<const float*>(dout.data);
  p.dout_stride = RowStride(dout, d);
  SetRows(grads.dx, d, &p.dx, &p.dx_stride);
  SetRows(grads.dgate_add, F, &p.dgate_add, &p.dgate_add_stride);
  SetRows(grads.dup_add, F, &p.dup_add, &p.dup_add_stride);
  p.grads = GradParamsOf(g);
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

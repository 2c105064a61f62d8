// MoeForward / MoeBackward: argument checking, then the CPU backend; the view of 3-D expert
// tensors. Every rule here has a test in tests/mlp_errors_test.cpp.
// Dimension legend: T rows, d model width, d_x the experts' input width (d, or expert_x's), F
// expert hidden width, E experts, k per token.
#include <cmath>
#include <string>
#include <vector>

#include "cpu/mlp.hpp"
#include "ops/check.hpp"
#include "ops/mlp_checks.hpp"
#include "params/mlp_params.hpp"
#include "ssmkit/mlp.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "moe";

bool AnyDefined(const MlpWeights& w) {
  return w.gate.defined() || w.up.defined() || w.down.defined() || w.gate_bias.defined() ||
         w.up_bias.defined() || w.down_bias.defined();
}

// kSigmoidGroupTopK's options and correction bias; the defaults and no bias for the others.
Status CheckGroupRouting(const MoeInputs& in, const MoeOptions& o, int64_t E) {
  const Tensor& bias = in.score_correction_bias;
  if (o.routing != MoeRouting::kSigmoidGroupTopK) {
    const char* why = "the default with softmax routing (kSigmoidGroupTopK only)";
    if (o.groups != 1)
      return check::Mismatch(kOp, "options.groups", std::string("1, ") + why,
                             std::to_string(o.groups));
    if (o.top_k_groups != 1) {
      return check::Mismatch(kOp, "options.top_k_groups", std::string("1, ") + why,
                             std::to_string(o.top_k_groups));
    }
    if (o.routed_scaling != 1.0f) {
      return check::Mismatch(kOp, "options.routed_scaling", std::string("1, ") + why,
                             std::to_string(o.routed_scaling));
    }
    if (!bias.defined()) return Status::Ok();
    return check::Mismatch(kOp, "score_correction_bias",
                           "no tensor with softmax routing (kSigmoidGroupTopK only)",
                           "a tensor of shape " + bias.shape_string());
  }
  if (!bias.defined()) {
    return check::Mismatch(kOp, "score_correction_bias",
                           "a tensor (E) with kSigmoidGroupTopK (zeros for none)", "null");
  }
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, "score_correction_bias", bias, {"(E)", {E}}, {DType::kF32}));
  if (o.groups < 1 || E % o.groups != 0 || E / o.groups < 2) {
    return check::Mismatch(kOp, "options.groups",
                           "a divisor of E = " + std::to_string(E) +
                               " leaving >= 2 experts per group (each group is scored by its "
                               "two best)",
                           std::to_string(o.groups));
  }
  if (o.top_k_groups < 1 || o.top_k_groups > o.groups) {
    return check::Mismatch(kOp, "options.top_k_groups",
                           "1 <= top_k_groups <= groups = " + std::to_string(o.groups),
                           std::to_string(o.top_k_groups));
  }
  const int64_t kept = o.top_k_groups * (E / o.groups);
  if (o.top_k > kept) {
    return check::Mismatch(kOp, "options.top_k",
                           "<= the " + std::to_string(kept) + " experts of the top_k_groups = " +
                               std::to_string(o.top_k_groups) + " kept groups",
                           std::to_string(o.top_k));
  }
  if (!std::isfinite(o.routed_scaling)) {
    return check::Mismatch(kOp, "options.routed_scaling", "a finite number",
                           std::to_string(o.routed_scaling));
  }
  return Status::Ok();
}

// The inputs and options; fills everything in p but the outputs.
Status CheckInputs(const MoeInputs& in, const MoeOptions& options, MoeParams* p) {
  int64_t T = 0, d = 0;
  SSMKIT_RETURN_IF_ERROR(check::InputRows(kOp, in.x, &T, &d));
  const Tensor& rw = in.router_weight;
  if (!rw.defined()) return check::Mismatch(kOp, "router_weight", "a tensor (E, d)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "router_weight", rw, {2}));
  const int64_t E = rw.shape[0];
  if (E < 1) return check::Mismatch(kOp, "router_weight", "E >= 1", rw.shape_string());
  SSMKIT_RETURN_IF_ERROR(check::WeightMatrix(kOp, "router_weight", rw, "(E, d)", E, d));
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kOp, "router_bias", in.router_bias, {"(E)", {E}}, {DType::kF32}));

  if (options.top_k < 1 || options.top_k > E) {
    return check::Mismatch(kOp, "options.top_k", "1 <= k <= E = " + std::to_string(E),
                           std::to_string(options.top_k));
  }
  if (options.routing != MoeRouting::kSoftmaxTopK && options.routing != MoeRouting::kTopKSoftmax &&
      options.routing != MoeRouting::kSigmoidGroupTopK) {
    return check::Mismatch(kOp, "options.routing", "a MoeRouting value",
                           std::to_string(static_cast<int>(options.routing)));
  }
  if (options.normalize_top_k && options.routing == MoeRouting::kTopKSoftmax) {
    return check::Mismatch(kOp, "options.normalize_top_k",
                           "false with kTopKSoftmax (its weights sum to 1 already)", "true");
  }
  SSMKIT_RETURN_IF_ERROR(CheckGroupRouting(in, options, E));

  int64_t dx = d;  // the width the experts read and write
  const Tensor& ex = in.expert_x;
  if (ex.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "expert_x", ex, {2}));
    dx = ex.shape[1];
    if (dx < 1) return check::Mismatch(kOp, "expert_x", "d_x >= 1", ex.shape_string());
    SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "expert_x", ex, "(T, d_x)", T, dx));
  }

  if (static_cast<int64_t>(in.experts.size()) != E) {
    return check::Mismatch(kOp, "experts", "E = " + std::to_string(E) + " entries (router_weight)",
                           std::to_string(in.experts.size()));
  }
  const MlpWeights& first = in.experts[0];
  int64_t F = 0;
  for (int64_t e = 0; e < E; ++e) {
    const MlpWeights& w = in.experts[e];
    int64_t Fe = 0;
    SSMKIT_RETURN_IF_ERROR(check::MlpWeightsFor(kOp, {"experts", e}, w, dx, &Fe));
    if (e == 0) F = Fe;
    const bool same = Fe == F && w.gate.defined() == first.gate.defined() &&
                      w.gate_bias.defined() == first.gate_bias.defined() &&
                      w.up_bias.defined() == first.up_bias.defined() &&
                      w.down_bias.defined() == first.down_bias.defined();
    if (!same) {
      return check::Mismatch(kOp, ("experts[" + std::to_string(e) + "]").c_str(),
                             "the form of experts[0] (F = " + std::to_string(F) +
                                 ", the same gate and biases present)",
                             "F = " + std::to_string(Fe) + " or a different set of tensors");
    }
  }
  p->has_shared = AnyDefined(in.shared_expert);
  if (p->has_shared && ex.defined()) {
    return check::Mismatch(kOp, "shared_expert",
                           "none with expert_x (out holds the routed sum at width d_x; the "
                           "caller adds the shared expert at width d)",
                           "a shared expert");
  }
  if (p->has_shared) {
    int64_t Fs = 0;
    SSMKIT_RETURN_IF_ERROR(check::MlpWeightsFor(kOp, {"shared_expert"}, in.shared_expert, d, &Fs));
    if (in.shared_expert.gate.defined() != first.gate.defined()) {
      return check::Mismatch(kOp, "shared_expert.gate",
                             first.gate.defined() ? "a tensor, as the experts are gated"
                                                  : "no tensor, as the experts are ungated",
                             in.shared_expert.gate.defined() ? "a tensor" : "null");
    }
  }
  SSMKIT_RETURN_IF_ERROR(
      check::MlpOptionsFor(kOp, "options.mlp", options.mlp, first.gate.defined()));

  p->rows = T;
  p->model = d;
  p->experts = E;
  p->options = options;
  p->x = static_cast<const float*>(in.x.data);
  p->x_stride = check::RowStride(in.x, d);
  p->expert_width = dx;
  p->expert_x = ex.defined() ? static_cast<const float*>(ex.data) : p->x;
  p->expert_x_stride = ex.defined() ? check::RowStride(ex, dx) : p->x_stride;
  p->router_weight = rw.data;
  p->router_dtype = rw.dtype;
  p->router_bias = static_cast<const float*>(in.router_bias.data);
  p->score_bias = static_cast<const float*>(in.score_correction_bias.data);
  p->expert_weights = in.experts;
  p->shared_weights = in.shared_expert;
  return Status::Ok();
}

// The inputs as Args (for the device and overlap checks), into a reused vector.
void InputArgs(const MoeInputs& in, std::vector<check::Arg>& args) {
  args.clear();
  args.push_back({"x", -1, nullptr, &in.x});
  args.push_back({"expert_x", -1, nullptr, &in.expert_x});
  args.push_back({"router_weight", -1, nullptr, &in.router_weight});
  args.push_back({"router_bias", -1, nullptr, &in.router_bias});
  args.push_back({"score_correction_bias", -1, nullptr, &in.score_correction_bias});
  for (int64_t e = 0; e < static_cast<int64_t>(in.experts.size()); ++e) {
    check::AddWeights(args, "experts", e, in.experts[e]);
  }
  check::AddWeights(args, "shared_expert", -1, in.shared_expert);
}

}  // namespace

Status MoeForward(const MoeInputs& inputs, const MoeOutputs& outputs, const MoeOptions& options) {
  thread_local std::vector<check::Arg> in_args, out_args;
  InputArgs(inputs, in_args);
  out_args.clear();
  out_args.push_back({"outputs", -1, "out", &outputs.out});
  out_args.push_back({"outputs", -1, "router_logits", &outputs.router_logits});
  out_args.push_back({"outputs", -1, "expert_counts", &outputs.expert_counts});
  out_args.push_back({"outputs", -1, "top_k_index", &outputs.top_k_index});
  out_args.push_back({"outputs", -1, "top_k_weight", &outputs.top_k_weight});
  SSMKIT_RETURN_IF_ERROR(check::CpuOnly(kOp, in_args, out_args));

  MoeParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, options, &p));
  const int64_t T = p.rows, dx = p.expert_width, E = p.experts, k = options.top_k;
  SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "outputs.out", outputs.out,
                                     inputs.expert_x.defined() ? "(T, d_x)" : "(T, d)", T, dx));
  SSMKIT_RETURN_IF_ERROR(
      check::OptionalRows(kOp, "outputs.router_logits", outputs.router_logits, "(T, E)", T, E));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "outputs.expert_counts", outputs.expert_counts,
                                         {"(E)", {E}}, {DType::kI64}));
  const Tensor& ti = outputs.top_k_index;
  if (ti.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "outputs.top_k_index", ti, {2}));
    SSMKIT_RETURN_IF_ERROR(
        check::Tensor(kOp, "outputs.top_k_index", ti, {"(T, k)", {T, k}}, {DType::kI32}));
    if (T > 1 && ti.strides[0] < k) {
      return check::Mismatch(kOp, "outputs.top_k_index",
                             "row stride >= " + std::to_string(k) + " (rows must not overlap)",
                             "row stride " + std::to_string(ti.strides[0]));
    }
  }
  SSMKIT_RETURN_IF_ERROR(
      check::OptionalRows(kOp, "outputs.top_k_weight", outputs.top_k_weight, "(T, k)", T, k));
  SSMKIT_RETURN_IF_ERROR(check::NoOverlaps(kOp, in_args, out_args));

  p.out = static_cast<float*>(outputs.out.data);
  p.out_stride = check::RowStride(outputs.out, dx);
  if (outputs.router_logits.defined()) {
    p.router_logits = static_cast<float*>(outputs.router_logits.data);
    p.router_logits_stride = check::RowStride(outputs.router_logits, E);
  }
  p.expert_counts = static_cast<int64_t*>(outputs.expert_counts.data);
  if (ti.defined()) {
    p.top_k_index = static_cast<int32_t*>(ti.data);
    p.top_k_index_stride = check::RowStride(ti, k);
  }
  if (outputs.top_k_weight.defined()) {
    p.top_k_weight = static_cast<float*>(outputs.top_k_weight.data);
    p.top_k_weight_stride = check::RowStride(outputs.top_k_weight, k);
  }
  return check::RunGuarded(kOp, [&] { return cpu::MoeForward(p); });
}

Status MoeBackward(const MoeInputs& inputs, const Tensor& dout, const Tensor& drouter_logits,
                   const MoeGrads& grads, const MoeOptions& options) {
  if (inputs.expert_x.defined()) {
    return Status::Unsupported(std::string(kOp) +
                               ": expert_x: the backward does not take it (forward only)");
  }
  thread_local std::vector<check::Arg> in_args, out_args;
  InputArgs(inputs, in_args);
  in_args.push_back({"dout", -1, nullptr, &dout});
  in_args.push_back({"drouter_logits", -1, nullptr, &drouter_logits});
  out_args.clear();
  out_args.push_back({"grads", -1, "dx", &grads.dx});
  out_args.push_back({"grads", -1, "drouter_weight", &grads.drouter_weight});
  out_args.push_back({"grads", -1, "drouter_bias", &grads.drouter_bias});
  for (int64_t e = 0; e < static_cast<int64_t>(grads.experts.size()); ++e) {
    check::AddGrads(out_args, "grads.experts", e, grads.experts[e]);
  }
  check::AddGrads(out_args, "grads.shared_expert", -1, grads.shared_expert);
  SSMKIT_RETURN_IF_ERROR(check::CpuOnly(kOp, in_args, out_args));

  MoeBackwardParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, options, &p));
  for (int64_t e = 0; e < static_cast<int64_t>(inputs.experts.size()); ++e) {
    SSMKIT_RETURN_IF_ERROR(check::FloatMlpWeights(kOp, {"experts", e}, inputs.experts[e]));
  }
  SSMKIT_RETURN_IF_ERROR(check::FloatMlpWeights(kOp, {"shared_expert"}, inputs.shared_expert));
  const int64_t T = p.rows, d = p.model, E = p.experts;
  SSMKIT_RETURN_IF_ERROR(check::Rows(kOp, "dout", dout, "(T, d)", T, d));
  SSMKIT_RETURN_IF_ERROR(
      check::OptionalRows(kOp, "drouter_logits", drouter_logits, "(T, E)", T, E));
  SSMKIT_RETURN_IF_ERROR(check::OptionalRows(kOp, "grads.dx", grads.dx, "(T, d)", T, d));
  if (grads.drouter_weight.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "grads.drouter_weight", grads.drouter_weight,
                                         {"(E, d)", {E, d}}, {DType::kF32}));
    if (!grads.drouter_weight.is_contiguous()) {
      return check::Mismatch(kOp, "grads.drouter_weight", "a contiguous tensor", "strides");
    }
  }
  if (!inputs.router_bias.defined()) {
    SSMKIT_RETURN_IF_ERROR(
        check::AbsentWith(kOp, "grads.drouter_bias", grads.drouter_bias, "router_bias"));
  }
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kOp, "grads.drouter_bias", grads.drouter_bias, {"(E)", {E}}, {DType::kF32}));
  if (!grads.experts.empty() && static_cast<int64_t>(grads.experts.size()) != E) {
    return check::Mismatch(kOp, "grads.experts", "0 or E = " + std::to_string(E) + " entries",
                           std::to_string(grads.experts.size()));
  }
  for (int64_t e = 0; e < static_cast<int64_t>(grads.experts.size()); ++e) {
    SSMKIT_RETURN_IF_ERROR(
        check::MlpWeightGradsFor(kOp, {"grads.experts", e}, grads.experts[e], inputs.experts[e]));
  }
  SSMKIT_RETURN_IF_ERROR(check::MlpWeightGradsFor(kOp, {"grads.shared_expert"}, grads.shared_expert,
                                                  inputs.shared_expert));
  SSMKIT_RETURN_IF_ERROR(check::NoOverlaps(kOp, in_args, out_args));

  p.dout = static_cast<const float*>(dout.data);
  p.dout_stride = check::RowStride(dout, d);
  if (drouter_logits.defined()) {
    p.drouter_logits = static_cast<const float*>(drouter_logits.data);
    p.drouter_logits_stride = check::RowStride(drouter_logits, E);
  }
  if (grads.dx.defined()) {
    p.dx = static_cast<float*>(grads.dx.data);
    p.dx_stride = check::RowStride(grads.dx, d);
  }
  p.drouter_weight = static_cast<float*>(grads.drouter_weight.data);
  p.drouter_bias = static_cast<float*>(grads.drouter_bias.data);
  p.expert_grads = grads.experts;
  p.shared_grads = grads.shared_expert;
  return check::RunGuarded(kOp, [&] { return cpu::MoeBackward(p); });
}

namespace {

// Rows [row0, row0 + rows) of expert e of a contiguous 3-D (E, R, C) tensor: (rows, C), in its
// dtype (quantized rows are whole blocks, DTypeRowBytes).
Tensor ExpertRows(const Tensor& t, int64_t e, int64_t row0, int64_t rows) {
  const int64_t R = t.shape[1], C = t.shape[2], row_bytes = DTypeRowBytes(t.dtype, C);
  const char* base = static_cast<const char*>(t.data) + (e * R + row0) * row_bytes;
  return Tensor::Contiguous(base, t.dtype, {rows, C}, t.device);
}

// `t` is a contiguous 3-D tensor of `shape`, float or quantized (the reader of a quantized
// one checks that its rows are whole blocks).
Status Stacked(const char* op, const char* name, const Tensor& t, check::ShapeSpec shape) {
  SSMKIT_RETURN_IF_ERROR(check::Tensor(
      op, name, t, shape,
      {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
       DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}));
  if (!t.is_contiguous()) return check::Mismatch(op, name, "a contiguous tensor", t.shape_string());
  if (t.shape[2] % DTypeBlockElements(t.dtype) != 0) {
    return check::Mismatch(op, name, "rows of whole blocks", t.shape_string());
  }
  return Status::Ok();
}

Status ExpertCount(const char* op, int64_t E, std::span<MlpWeights> experts) {
  if (static_cast<int64_t>(experts.size()) == E) return Status::Ok();
  return check::Mismatch(op, "experts", "E = " + std::to_string(E) + " entries",
                         std::to_string(experts.size()));
}

}  // namespace

Status SplitFusedExperts(const Tensor& gate_up, const Tensor& down, std::span<MlpWeights> experts) {
  constexpr const char* kSplit = "split_fused_experts";
  if (!gate_up.defined()) return check::Mismatch(kSplit, "gate_up", "a tensor (E, 2F, d)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kSplit, "gate_up", gate_up, {3}));
  const int64_t E = gate_up.shape[0], F2 = gate_up.shape[1], d = gate_up.shape[2];
  if (E < 1 || F2 < 2 || F2 % 2 != 0 || d < 1) {
    return check::Mismatch(kSplit, "gate_up", "(E, 2F, d) with E >= 1, an even 2F >= 2, d >= 1",
                           gate_up.shape_string());
  }
  const int64_t F = F2 / 2;
  SSMKIT_RETURN_IF_ERROR(Stacked(kSplit, "gate_up", gate_up, {"(E, 2F, d)", {E, F2, d}}));
  SSMKIT_RETURN_IF_ERROR(Stacked(kSplit, "down", down, {"(E, d, F)", {E, d, F}}));
  SSMKIT_RETURN_IF_ERROR(ExpertCount(kSplit, E, experts));
  for (int64_t e = 0; e < E; ++e) {
    experts[e].gate = ExpertRows(gate_up, e, 0, F);
    experts[e].up = ExpertRows(gate_up, e, F, F);
    experts[e].down = ExpertRows(down, e, 0, d);
  }
  return Status::Ok();
}

Status SplitStackedExperts(const Tensor& gate, const Tensor& up, const Tensor& down,
                           std::span<MlpWeights> experts) {
  constexpr const char* kSplit = "split_stacked_experts";
  if (!up.defined()) return check::Mismatch(kSplit, "up", "a tensor (E, F, d)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kSplit, "up", up, {3}));
  const int64_t E = up.shape[0], F = up.shape[1], d = up.shape[2];
  if (E < 1 || F < 1 || d < 1) {
    return check::Mismatch(kSplit, "up", "(E, F, d) with E, F, d >= 1", up.shape_string());
  }
  if (gate.defined())
    SSMKIT_RETURN_IF_ERROR(Stacked(kSplit, "gate", gate, {"(E, F, d)", {E, F, d}}));
  SSMKIT_RETURN_IF_ERROR(Stacked(kSplit, "up", up, {"(E, F, d)", {E, F, d}}));
  SSMKIT_RETURN_IF_ERROR(Stacked(kSplit, "down", down, {"(E, d, F)", {E, d, F}}));
  SSMKIT_RETURN_IF_ERROR(ExpertCount(kSplit, E, experts));
  for (int64_t e = 0; e < E; ++e) {
    experts[e].gate = gate.defined() ? ExpertRows(gate, e, 0, F) : Tensor{};
    experts[e].up = ExpertRows(up, e, 0, F);
    experts[e].down = ExpertRows(down, e, 0, d);
  }
  return Status::Ok();
}

}  // namespace ssmkit

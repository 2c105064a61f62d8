#include "ops/mlp_checks.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "ops/check.hpp"

namespace ssmkit::check {
namespace {

// check::Tensor's message names `field`; rewrite it to name the full path. Runs on failure
// only, so the common path builds no string.
Status Renamed(const Status& status, const char* op, WeightsName name, const char* field) {
  if (status.ok()) return status;
  std::string path = name.prefix;
  if (name.index >= 0) path.append("[").append(std::to_string(name.index)).append("]");
  path += std::string(".") + field;
  const std::string old_head = std::string(op) + ": " + field + ": ";
  std::string message = status.message();
  if (message.rfind(old_head, 0) == 0) {
    message = std::string(op) + ": " + path + ": " + message.substr(old_head.size());
  }
  return {status.code(), message};
}

// A weight's gradient: the weight's shape, f32, contiguous.
Status GradMatrix(const char* op, const char* field, const ssmkit::Tensor& grad,
                  const char* input_field, const ssmkit::Tensor& input) {
  if (!input.defined()) return AbsentWith(op, field, grad, input_field);
  if (!grad.defined()) return Status::Ok();
  const std::string legend = std::string("(as ") + input_field + ")";
  const ShapeSpec spec{legend.c_str(), {input.shape.begin(), input.shape.begin() + input.rank}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, field, grad, spec, {DType::kF32}));
  if (!grad.is_contiguous()) return Mismatch(op, field, "a contiguous tensor", "strides");
  return Status::Ok();
}

Status Finite(const char* op, const char* name, float v) {
  if (std::isfinite(v)) return Status::Ok();
  char given[32];
  std::snprintf(given, sizeof given, "%g", static_cast<double>(v));
  return Mismatch(op, name, "a finite value", given);
}

}  // namespace

Status WeightMatrix(const char* op, const char* field, const ssmkit::Tensor& t, const char* legend,
                    int64_t rows, int64_t cols) {
  SSMKIT_RETURN_IF_ERROR(check::Tensor(
      op, field, t, {legend, {rows, cols}},
      {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
       DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}));
  if (!t.is_contiguous()) {
    return Mismatch(
        op, field, std::string("a contiguous row-major ") + legend + " tensor",
        "strides (" + std::to_string(t.strides[0]) + ", " + std::to_string(t.strides[1]) + ")");
  }
  const int64_t block = DTypeBlockElements(t.dtype);
  if (cols % block != 0) {
    return Mismatch(op, field,
                    std::string("rows of whole ") + DTypeName(t.dtype) + " blocks (" +
                        std::to_string(block) + " elements)",
                    std::to_string(cols) + " columns");
  }
  return Status::Ok();
}

Status FloatMlpWeights(const char* op, WeightsName name, const MlpWeights& w) {
  for (auto [field, t] :
       {std::pair{"gate", &w.gate}, std::pair{"up", &w.up}, std::pair{"down", &w.down}}) {
    if (t->defined() && DTypeIsQuantized(t->dtype)) {
      return Renamed(Mismatch(op, field, "f32 | bf16 | f16 (the backward widens float weights)",
                              DTypeName(t->dtype)),
                     op, name, field);
    }
  }
  return Status::Ok();
}

Status InputRows(const char* op, const ssmkit::Tensor& x, int64_t* rows, int64_t* cols) {
  if (!x.defined()) return Mismatch(op, "x", "a tensor (T, d)", "null");
  SSMKIT_RETURN_IF_ERROR(RankIn(op, "x", x, {2}));
  *rows = x.shape[0];
  *cols = x.shape[1];
  if (*rows < 1 || *cols < 1) return Mismatch(op, "x", "T >= 1 and d >= 1", x.shape_string());
  return Rows(op, "x", x, "(T, d)", *rows, *cols);
}

Status Rows(const char* op, const char* name, const ssmkit::Tensor& t, const char* legend,
            int64_t rows, int64_t cols) {
  if (!t.defined()) return Mismatch(op, name, std::string("a tensor ") + legend, "null");
  SSMKIT_RETURN_IF_ERROR(RankIn(op, name, t, {2}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, name, t, {legend, {rows, cols}}, {DType::kF32}));
  if (rows > 1 && t.strides[0] < cols) {
    return Mismatch(op, name, "row stride >= " + std::to_string(cols) + " (rows must not overlap)",
                    "row stride " + std::to_string(t.strides[0]));
  }
  return Status::Ok();
}

Status OptionalRows(const char* op, const char* name, const ssmkit::Tensor& t, const char* legend,
                    int64_t rows, int64_t cols) {
  return t.defined() ? Rows(op, name, t, legend, rows, cols) : Status::Ok();
}

Status MlpWeightsFor(const char* op, WeightsName name, const MlpWeights& w, int64_t d,
                     int64_t* hidden) {
  if (!w.up.defined()) {
    return Renamed(Mismatch(op, "up", "a tensor (F, d)", "null"), op, name, "up");
  }
  SSMKIT_RETURN_IF_ERROR(Renamed(RankIn(op, "up", w.up, {2}), op, name, "up"));
  const int64_t F = w.up.shape[0];
  if (F < 1) {
    return Renamed(Mismatch(op, "up", "F >= 1", w.up.shape_string()), op, name, "up");
  }
  SSMKIT_RETURN_IF_ERROR(Renamed(WeightMatrix(op, "up", w.up, "(F, d)", F, d), op, name, "up"));
  if (w.gate.defined()) {
    SSMKIT_RETURN_IF_ERROR(
        Renamed(WeightMatrix(op, "gate", w.gate, "(F, d)", F, d), op, name, "gate"));
  }
  if (!w.down.defined()) {
    return Renamed(Mismatch(op, "down", "a tensor (d, F)", "null"), op, name, "down");
  }
  SSMKIT_RETURN_IF_ERROR(
      Renamed(WeightMatrix(op, "down", w.down, "(d, F)", d, F), op, name, "down"));
  if (w.gate.defined()) {
    SSMKIT_RETURN_IF_ERROR(
        Renamed(Optional(op, "gate_bias", w.gate_bias, {"(F)", {F}}, {DType::kF32}), op, name,
                "gate_bias"));
  } else if (w.gate_bias.defined()) {
    return Renamed(Mismatch(op, "gate_bias", "no tensor, since gate is absent (ungated MLP)",
                            "a tensor of shape " + w.gate_bias.shape_string()),
                   op, name, "gate_bias");
  }
  SSMKIT_RETURN_IF_ERROR(Renamed(Optional(op, "up_bias", w.up_bias, {"(F)", {F}}, {DType::kF32}),
                                 op, name, "up_bias"));
  SSMKIT_RETURN_IF_ERROR(Renamed(
      Optional(op, "down_bias", w.down_bias, {"(d)", {d}}, {DType::kF32}), op, name, "down_bias"));
  *hidden = F;
  return Status::Ok();
}

Status MlpWeightGradsFor(const char* op, WeightsName name, const MlpWeightGrads& g,
                         const MlpWeights& w) {
  const struct {
    const char* field;
    const ssmkit::Tensor& grad;
    const char* input_field;
    const ssmkit::Tensor& input;
  } pairs[] = {{"dgate", g.dgate, "gate", w.gate},
               {"dup", g.dup, "up", w.up},
               {"ddown", g.ddown, "down", w.down},
               {"dgate_bias", g.dgate_bias, "gate_bias", w.gate_bias},
               {"dup_bias", g.dup_bias, "up_bias", w.up_bias},
               {"ddown_bias", g.ddown_bias, "down_bias", w.down_bias}};
  for (const auto& p : pairs) {
    SSMKIT_RETURN_IF_ERROR(
        Renamed(GradMatrix(op, p.field, p.grad, p.input_field, p.input), op, name, p.field));
  }
  return Status::Ok();
}

Status MlpOptionsFor(const char* op, const char* prefix, const MlpOptions& options, bool gated) {
  // The argument's name, built on failure only.
  const auto named = [prefix](const char* field) { return std::string(prefix) + "." + field; };
  if (static_cast<uint8_t>(options.activation) > static_cast<uint8_t>(MlpActivation::kRelu2)) {
    return Mismatch(op, named("activation").c_str(), "an MlpActivation value",
                    std::to_string(static_cast<int>(options.activation)));
  }
  if (!std::isfinite(options.gate_multiplier)) {
    return Finite(op, named("gate_multiplier").c_str(), options.gate_multiplier);
  }
  if (!std::isfinite(options.down_multiplier)) {
    return Finite(op, named("down_multiplier").c_str(), options.down_multiplier);
  }
  if (!gated && options.gate_multiplier != 1.0f) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", static_cast<double>(options.gate_multiplier));
    return Mismatch(op, named("gate_multiplier").c_str(), "1 (the MLP has no gate)", given);
  }
  return Status::Ok();
}

namespace {

// The bytes [first, last] a tensor spans.
struct ByteSpan {
  const char* first;
  const char* last;
};
ByteSpan SpanOf(const ssmkit::Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
  const char* base = static_cast<const char*>(t.data);
  return {base, base + (last + 1) * DTypeSize(t.dtype) - 1};
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

}  // namespace

bool Overlap(const ssmkit::Tensor& a, const ssmkit::Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  const ByteSpan sa = SpanOf(a), sb = SpanOf(b);
  if (sa.last < sb.first || sb.last < sa.first) return false;
  const int64_t ea = DTypeSize(a.dtype), eb = DTypeSize(b.dtype);
  const int64_t stride = a.rank == 2 ? a.strides[0] * ea : 0;
  const int64_t ca = a.rank == 2 ? a.shape[1] * ea : 0, cb = b.rank == 2 ? b.shape[1] * eb : 0;
  const bool rows = a.rank == 2 && b.rank == 2 && a.strides[1] == 1 && b.strides[1] == 1 &&
                    b.strides[0] * eb == stride && ca <= stride && cb <= stride && stride > 0;
  if (!rows) return true;
  // Row i of a is [i s, i s + ca) and row j of b [delta + j s, delta + j s + cb) (bytes from
  // a's start): they meet when -cb < delta - m s < ca for m = i - j, i.e. for m within 1 of
  // floor(delta / s), since ca, cb <= s.
  const int64_t delta = static_cast<const char*>(b.data) - static_cast<const char*>(a.data);
  const int64_t m0 = FloorDiv(delta, stride);
  for (int64_t m = m0 - 1; m <= m0 + 1; ++m) {
    if (m < -(b.shape[0] - 1) || m > a.shape[0] - 1) continue;
    const int64_t gap = delta - m * stride;
    if (-cb < gap && gap < ca) return true;
  }
  return false;
}

std::string Arg::Name() const {
  std::string s = prefix;
  if (index >= 0) s.append("[").append(std::to_string(index)).append("]");
  if (field != nullptr) s.append(".").append(field);
  return s;
}

void AddWeights(std::vector<Arg>& args, const char* prefix, int64_t index, const MlpWeights& w) {
  for (const auto& [field, t] : {std::pair{"gate", &w.gate},
                                 {"up", &w.up},
                                 {"down", &w.down},
                                 {"gate_bias", &w.gate_bias},
                                 {"up_bias", &w.up_bias},
                                 {"down_bias", &w.down_bias}}) {
    args.push_back({prefix, index, field, t});
  }
}

void AddGrads(std::vector<Arg>& args, const char* prefix, int64_t index, const MlpWeightGrads& g) {
  for (const auto& [field, t] : {std::pair{"dgate", &g.dgate},
                                 {"dup", &g.dup},
                                 {"ddown", &g.ddown},
                                 {"dgate_bias", &g.dgate_bias},
                                 {"dup_bias", &g.dup_bias},
                                 {"ddown_bias", &g.ddown_bias}}) {
    args.push_back({prefix, index, field, t});
  }
}

Status CpuOnly(const char* op, const std::vector<Arg>& inputs, const std::vector<Arg>& outputs) {
  int on_cuda = 0, on_cpu = 0;
  for (const std::vector<Arg>* list : {&inputs, &outputs}) {
    for (const Arg& a : *list) {
      if (a.tensor->defined()) (a.tensor->device == Device::kCuda ? on_cuda : on_cpu) += 1;
    }
  }
  if (on_cpu == 0 && on_cuda > 0) {
    return Status::Unsupported(std::string(op) + ": CUDA tensors: this op runs on the CPU only");
  }
  const Device majority = on_cuda > on_cpu ? Device::kCuda : Device::kCpu;
  auto name_of = [](Device d) { return d == Device::kCuda ? "a CUDA tensor" : "a CPU tensor"; };
  for (const std::vector<Arg>* list : {&inputs, &outputs}) {
    for (const Arg& a : *list) {
      if (a.tensor->defined() && a.tensor->device != majority) {
        return Mismatch(op, a.Name().c_str(), name_of(majority), name_of(a.tensor->device));
      }
    }
  }
  return Status::Ok();
}

Status NoOverlaps(const char* op, const std::vector<Arg>& inputs, const std::vector<Arg>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ssmkit::Tensor& out = *outputs[i].tensor;
    if (!out.defined()) continue;
    for (const Arg& in : inputs) {
      if (Overlap(out, *in.tensor)) {
        return Overlapping(op, outputs[i].Name().c_str(), in.Name().c_str());
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (Overlap(out, *outputs[j].tensor)) {
        return Overlapping(op, outputs[i].Name().c_str(), outputs[j].Name().c_str());
      }
    }
  }
  return Status::Ok();
}

Status Overlapping(const char* op, const char* name, const char* other) {
  return Mismatch(op, name, std::string("memory not overlapping ") + other,
                  "an overlapping tensor");
}

}  // namespace ssmkit::check

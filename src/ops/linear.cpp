// LinearForward: argument checking, then the CPU backend. Every rule here has a test in
// tests/linear_errors_test.cpp. Dimension legend: T rows, K input features, M output features.
#include "ssmkit/linear.hpp"

#include <algorithm>
#include <new>
#include <string>

#include "cpu/linear.hpp"
#include "ops/check.hpp"
#include "ops/linear_params.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "linear";

// x or out: (rows, cols) f32 on the CPU, stored row-major (strides (ld >= cols, 1)) or
// feature-major (strides (1, ld >= rows)). Returns the two strides through row/feature.
Status CheckMatrix(const char* name, const Tensor& t, const char* legend, int64_t rows,
                   int64_t cols, int64_t* stride_row, int64_t* stride_feature) {
  // check::Tensor insists on a unit last stride; test shape and dtype on a row-major
  // twin, then the layout here.
  Tensor shape_only = t;
  shape_only.strides = {};
  if (t.rank == 2) shape_only.strides = {cols, 1};
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, name, shape_only, {legend, {rows, cols}}, {DType::kF32}));
  const int64_t s0 = t.strides[0], s1 = t.strides[1];
  const bool row_major = (s1 == 1 || cols == 1) && (s0 >= cols || rows == 1);
  const bool feature_major = (s0 == 1 || rows == 1) && (s1 >= rows || cols == 1);
  if (row_major) {
    *stride_row = rows == 1 ? cols : s0;
    *stride_feature = 1;
  } else if (feature_major) {
    *stride_row = 1;
    *stride_feature = cols == 1 ? rows : s1;
  } else {
    return check::Mismatch(kOp, name,
                           "strides (ld >= " + std::to_string(cols) +
                               ", 1) or (1, ld >= " + std::to_string(rows) + ")",
                           "(" + std::to_string(s0) + ", " + std::to_string(s1) + ")");
  }
  return Status::Ok();
}

// The bytes [first, last] a (rows, cols) matrix with these strides spans.
struct Span {
  const char* first;
  const char* last;
};
Span SpanOf(const void* data, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  const char* base = static_cast<const char*>(data);
  const int64_t last =
      ((rows - 1) * s_row + (cols - 1) * s_col) * static_cast<int64_t>(sizeof(float));
  return {base, base + last + static_cast<int64_t>(sizeof(float)) - 1};
}

Status CheckAll(const LinearInputs& in, const Tensor& out, LinearParams* p) {
  const Tensor& w = in.weight;
  if (!w.defined()) return check::Mismatch(kOp, "weight", "a tensor (M, K)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "weight", w, {2}));
  const int64_t M = w.shape[0], K = w.shape[1];
  if (M < 1 || K < 1) return check::Mismatch(kOp, "weight", "M >= 1 and K >= 1", w.shape_string());
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "weight", w, {"(M, K)", {M, K}},
                                       {DType::kF32, DType::kBF16, DType::kF16}));
  if (!w.is_contiguous()) {
    return check::Mismatch(
        kOp, "weight", "a contiguous row-major (M, K) tensor",
        "strides (" + std::to_string(w.strides[0]) + ", " + std::to_string(w.strides[1]) + ")");
  }
  if (!in.x.defined()) return check::Mismatch(kOp, "x", "a tensor (T, K)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x", in.x, {2}));
  const int64_t T = in.x.shape[0];
  if (T < 1) return check::Mismatch(kOp, "x", "rows T >= 1", in.x.shape_string());
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "bias", in.bias, {"(M)", {M}}, {DType::kF32}));
  if (!out.defined()) return check::Mismatch(kOp, "out", "a tensor (T, M)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "out", out, {2}));
  SSMKIT_RETURN_IF_ERROR(
      CheckMatrix("x", in.x, "(T, K)", T, K, &p->x_stride_row, &p->x_stride_feature));
  SSMKIT_RETURN_IF_ERROR(
      CheckMatrix("out", out, "(T, M)", T, M, &p->out_stride_row, &p->out_stride_feature));
  const Span xs = SpanOf(in.x.data, T, K, p->x_stride_row, p->x_stride_feature);
  const Span os = SpanOf(out.data, T, M, p->out_stride_row, p->out_stride_feature);
  if (xs.first <= os.last && os.first <= xs.last) {
    return check::Mismatch(kOp, "out", "memory not overlapping x", "an overlapping tensor");
  }
  p->rows = T;
  p->in_features = K;
  p->out_features = M;
  p->x = static_cast<const float*>(in.x.data);
  p->weight = w.data;
  p->weight_dtype = w.dtype;
  p->bias = static_cast<const float*>(in.bias.data);
  p->out = static_cast<float*>(out.data);
  return Status::Ok();
}

}  // namespace

Status LinearForward(const LinearInputs& inputs, const Tensor& out) {
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::Devices(kOp, {{"x", inputs.x}, {"weight", inputs.weight}, {"bias", inputs.bias}},
                     {{"out", out}}, &device));
  if (device != Device::kCpu) {
    return Status::Unsupported(std::string(kOp) + ": CUDA tensors: this op runs on the CPU only");
  }
  LinearParams p;
  SSMKIT_RETURN_IF_ERROR(CheckAll(inputs, out, &p));
  return check::RunGuarded(kOp, [&] { return cpu::Linear(p); });
}

}  // namespace ssmkit

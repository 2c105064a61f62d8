// LinearForward and LinearBackward: argument checking, then the backend (the CPU's, or cuBLAS for
// a forward whose tensors are on the GPU). Every rule here has a test in
// tests/linear_errors_test.cpp. Dimension legend: T rows, K input features, M output features.
#include "ssmkit/linear.hpp"

#include <algorithm>
#include <new>
#include <initializer_list>
#include <string>
#include <vector>

#include "cpu/linear.hpp"
#include "cuda/backend.hpp"
#include "ops/check.hpp"
#include "params/linear_params.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "linear";

// x or out: (rows, cols) of one of `dtypes`, stored row-major (strides (ld >= cols, 1)) or
// feature-major (strides (1, ld >= rows)). Returns the two strides through row/feature.
Status CheckMatrix(const char* name, const Tensor& t, const char* legend, int64_t rows,
                   int64_t cols, std::initializer_list<DType> dtypes, int64_t* stride_row,
                   int64_t* stride_feature) {
  // check::Tensor insists on a unit last stride; test shape and dtype on a row-major
  // twin, then the layout here.
  Tensor shape_only = t;
  shape_only.strides = {};
  if (t.rank == 2) shape_only.strides = {cols, 1};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, name, shape_only, {legend, {rows, cols}}, dtypes));
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

// The bytes [first, last] a (rows, cols) matrix with these strides spans (f32 unless told).
struct Span {
  const char* first;
  const char* last;
};
Span SpanOf(const void* data, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col,
            DType dtype = DType::kF32) {
  const char* base = static_cast<const char*>(data);
  const int64_t size = DTypeSize(dtype);
  const int64_t last = ((rows - 1) * s_row + (cols - 1) * s_col) * size;
  return {base, base + last + size - 1};
}

bool Overlap(const Span& a, const Span& b) { return a.first <= b.last && b.first <= a.last; }

// The checks forward and backward share: weight (M, K) of `weight_dtypes`, x (T, K) of
// `x_dtypes`, bias (M).
Status CheckInputs(const LinearInputs& in, std::initializer_list<DType> weight_dtypes,
                   std::initializer_list<DType> x_dtypes, LinearParams* p) {
  const Tensor& w = in.weight;
  if (!w.defined()) return check::Mismatch(kOp, "weight", "a tensor (M, K)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "weight", w, {2}));
  const int64_t M = w.shape[0], K = w.shape[1];
  if (M < 1 || K < 1) return check::Mismatch(kOp, "weight", "M >= 1 and K >= 1", w.shape_string());
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "weight", w, {"(M, K)", {M, K}}, weight_dtypes));
  const int64_t block = DTypeBlockElements(w.dtype);
  if (K % block != 0) {
    return check::Mismatch(kOp, "weight",
                           std::string("K a multiple of ") + DTypeName(w.dtype) + "'s block of " +
                               std::to_string(block) + " elements",
                           "K = " + std::to_string(K));
  }
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
  SSMKIT_RETURN_IF_ERROR(
      CheckMatrix("x", in.x, "(T, K)", T, K, x_dtypes, &p->x_stride_row, &p->x_stride_feature));
  p->rows = T;
  p->in_features = K;
  p->out_features = M;
  p->x = static_cast<const float*>(in.x.data);
  p->weight = w.data;
  p->weight_dtype = w.dtype;
  p->bias = static_cast<const float*>(in.bias.data);
  return Status::Ok();
}

Status CheckAll(const LinearInputs& in, const Tensor& out, LinearParams* p) {
  SSMKIT_RETURN_IF_ERROR(
      CheckInputs(in,
                  {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                   DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K},
                  {DType::kF32}, p));
  const int64_t T = p->rows, K = p->in_features, M = p->out_features;
  if (!out.defined()) return check::Mismatch(kOp, "out", "a tensor (T, M)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "out", out, {2}));
  SSMKIT_RETURN_IF_ERROR(CheckMatrix("out", out, "(T, M)", T, M, {DType::kF32}, &p->out_stride_row,
                                     &p->out_stride_feature));
  const Span xs = SpanOf(in.x.data, T, K, p->x_stride_row, p->x_stride_feature);
  const Span os = SpanOf(out.data, T, M, p->out_stride_row, p->out_stride_feature);
  if (Overlap(xs, os)) {
    return check::Mismatch(kOp, "out", "memory not overlapping x", "an overlapping tensor");
  }
  p->out = static_cast<float*>(out.data);
  return Status::Ok();
}

Status CheckBackward(const LinearInputs& in, const Tensor& dout, const LinearGrads& g,
                     LinearBackwardParams* p) {
  if (in.weight.defined() && DTypeIsQuantized(in.weight.dtype)) {
    return check::Mismatch(kOp, "weight",
                           "dtype f32 (no gradient of a quantized weight: decode it with "
                           "DequantizeWeight to train it)",
                           DTypeName(in.weight.dtype));
  }
  SSMKIT_RETURN_IF_ERROR(CheckInputs(in, {DType::kF32}, {DType::kF32}, p));
  const int64_t T = p->rows, K = p->in_features, M = p->out_features;
  if (!dout.defined()) return check::Mismatch(kOp, "dout", "a tensor (T, M)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "dout", dout, {2}));
  SSMKIT_RETURN_IF_ERROR(CheckMatrix("dout", dout, "(T, M)", T, M, {DType::kF32},
                                     &p->dout_stride_row, &p->dout_stride_feature));
  // Every input's bytes, and each gradient's as it is accepted: a gradient must overlap none.
  struct Named {
    const char* name;
    Span span;
  };
  std::vector<Named> taken = {
      {"x", SpanOf(in.x.data, T, K, p->x_stride_row, p->x_stride_feature)},
      {"weight", SpanOf(in.weight.data, M, K, K, 1)},
      {"dout", SpanOf(dout.data, T, M, p->dout_stride_row, p->dout_stride_feature)}};
  if (in.bias.defined()) taken.push_back({"bias", SpanOf(in.bias.data, 1, M, M, 1)});
  auto claim = [&](const char* name, const Span& span) {
    for (const Named& other : taken) {
      if (Overlap(span, other.span)) {
        return check::Mismatch(kOp, name, std::string("memory not overlapping ") + other.name,
                               "an overlapping tensor");
      }
    }
    taken.push_back({name, span});
    return Status::Ok();
  };
  if (g.dx.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "dx", g.dx, {2}));
    SSMKIT_RETURN_IF_ERROR(CheckMatrix("dx", g.dx, "(T, K)", T, K, {DType::kF32}, &p->dx_stride_row,
                                       &p->dx_stride_feature));
    SSMKIT_RETURN_IF_ERROR(
        claim("dx", SpanOf(g.dx.data, T, K, p->dx_stride_row, p->dx_stride_feature)));
    p->dx = static_cast<float*>(g.dx.data);
  }
  if (g.dweight.defined()) {
    SSMKIT_RETURN_IF_ERROR(
        check::Tensor(kOp, "dweight", g.dweight, {"(M, K)", {M, K}}, {DType::kF32}));
    if (!g.dweight.is_contiguous()) {
      return check::Mismatch(kOp, "dweight", "a contiguous row-major (M, K) tensor",
                             "strides (" + std::to_string(g.dweight.strides[0]) + ", " +
                                 std::to_string(g.dweight.strides[1]) + ")");
    }
    SSMKIT_RETURN_IF_ERROR(claim("dweight", SpanOf(g.dweight.data, M, K, K, 1)));
    p->dweight = static_cast<float*>(g.dweight.data);
  }
  SSMKIT_RETURN_IF_ERROR(check::GradLike(kOp, "dbias", g.dbias, "bias", in.bias));
  if (g.dbias.defined()) {
    SSMKIT_RETURN_IF_ERROR(claim("dbias", SpanOf(g.dbias.data, 1, M, M, 1)));
    p->dbias = static_cast<float*>(g.dbias.data);
  }
  p->dout = static_cast<const float*>(dout.data);
  return Status::Ok();
}

// On CUDA, cuBLAS's 16-bit GEMMs: weight bf16 or f16, x in the weight's dtype, out f32 or the
// weight's dtype, both row-major. f32 and quantized weights are a valid request the GPU does not
// serve (Unsupported), a wrong x or out an InvalidArgument.
Status CheckCuda(const LinearInputs& in, const Tensor& out, LinearCudaParams* c) {
  const Tensor& w = in.weight;
  if (w.defined() && w.dtype != DType::kBF16 && w.dtype != DType::kF16) {
    return Status::Unsupported(std::string(kOp) +
                               ": weight: on CUDA expected bf16 or f16 (cuBLAS's 16-bit GEMMs), "
                               "given " +
                               DTypeName(w.dtype) +
                               ": f32 and quantized weights run on the CPU only");
  }
  LinearParams p;
  SSMKIT_RETURN_IF_ERROR(CheckInputs(in, {DType::kBF16, DType::kF16}, {w.dtype}, &p));
  const int64_t T = p.rows, K = p.in_features, M = p.out_features;
  if (!out.defined()) return check::Mismatch(kOp, "out", "a tensor (T, M)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "out", out, {2}));
  SSMKIT_RETURN_IF_ERROR(CheckMatrix("out", out, "(T, M)", T, M, {DType::kF32, w.dtype},
                                     &p.out_stride_row, &p.out_stride_feature));
  if (!p.x_row_major() || !p.out_row_major()) {
    return Status::Unsupported(std::string(kOp) +
                               ": x and out on CUDA: row-major only (strides (ld, 1)), given "
                               "a feature-major one");
  }
  const Span xs = SpanOf(in.x.data, T, K, p.x_stride_row, 1, w.dtype);
  const Span os = SpanOf(out.data, T, M, p.out_stride_row, 1, out.dtype);
  if (Overlap(xs, os)) {
    return check::Mismatch(kOp, "out", "memory not overlapping x", "an overlapping tensor");
  }
  *c = LinearCudaParams{.rows = T,
                        .in_features = K,
                        .out_features = M,
                        .dtype = w.dtype,
                        .x = in.x.data,
                        .x_stride_row = p.x_stride_row,
                        .weight = w.data,
                        .bias = p.bias,
                        .out = out.data,
                        .out_dtype = out.dtype,
                        .out_stride_row = p.out_stride_row};
  return Status::Ok();
}

}  // namespace

Status LinearForward(const LinearInputs& inputs, const Tensor& out) {
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::Devices(kOp, {{"x", inputs.x}, {"weight", inputs.weight}, {"bias", inputs.bias}},
                     {{"out", out}}, &device));
  if (device == Device::kCuda) {
    LinearCudaParams c;
    SSMKIT_RETURN_IF_ERROR(CheckCuda(inputs, out, &c));
    return cuda::LinearForward(c);
  }
  LinearParams p;
  SSMKIT_RETURN_IF_ERROR(CheckAll(inputs, out, &p));
  return check::RunGuarded(kOp, [&] { return cpu::Linear(p); });
}

Status LinearBackward(const LinearInputs& inputs, const Tensor& dout, const LinearGrads& grads) {
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(
      kOp, {{"x", inputs.x}, {"weight", inputs.weight}, {"bias", inputs.bias}, {"dout", dout}},
      {{"dx", grads.dx}, {"dweight", grads.dweight}, {"dbias", grads.dbias}}, &device));
  if (device != Device::kCpu) {
    return Status::Unsupported(std::string(kOp) + ": CUDA tensors: this op runs on the CPU only");
  }
  LinearBackwardParams p;
  SSMKIT_RETURN_IF_ERROR(CheckBackward(inputs, dout, grads, &p));
  return check::RunGuarded(kOp, [&] { return cpu::LinearBackward(p); });
}

}  // namespace ssmkit

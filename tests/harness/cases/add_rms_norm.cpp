// Residual add + RMSNorm (include/ssmkit/norm.hpp) in the op harness: with and without a
// residual, bias and a gradient through residual_out, f32 and bf16, odd widths, strided rows,
// a Mamba width on 3 threads, the in-place residual stream, gradients against finite
// differences, each gradient alone, and every argument rule of src/ops/norm.cpp.
#include <limits>

#include "harness/op_spec.hpp"
#include "ref/norm_ref.hpp"
#include "ssmkit/norm.hpp"

namespace ssmkit::testing::harness {
namespace {

enum InPlace : int {
  kSeparate = 0,    // out and residual_out tensors of their own
  kStream = 1,      // out = x, residual_out = residual: the residual stream updated in place
  kFirstLayer = 2,  // layer 0, no residual yet: residual_out = x
};

struct AddNorm {
  int64_t rows = 4, features = 8, pad = 0;  // pad: strided rows of every (M, E)
  bool residual = true, bias = true;
  bool dresidual_out = true;  // a gradient reaching residual_out from later layers
  DType dtype = DType::kF32;
  float eps = 1e-5f;
  InPlace in_place = kSeparate;
  std::string Name() const {
    return "M=" + std::to_string(rows) + " E=" + std::to_string(features) +
           " pad=" + std::to_string(pad) + " residual=" + std::to_string(residual) +
           " bias=" + std::to_string(bias) + " dresidual_out=" + std::to_string(dresidual_out) +
           " " + DTypeName(dtype) + " in_place=" + std::to_string(in_place);
  }
};

// The tensors receiving out and residual_out.
std::string OutName(const AddNorm& p) { return p.in_place == kStream ? "x" : "out"; }
std::string ResidualOutName(const AddNorm& p) {
  if (p.in_place == kStream) return "residual";
  return p.in_place == kFirstLayer ? "x" : "residual_out";
}

void Make(const AddNorm& p, Problem& prob) {
  const int64_t M = p.rows, E = p.features;
  prob.DefaultTol(DTypeTol(p.dtype));
  const bool x_written = p.in_place != kSeparate;
  Arg& x =
      x_written ? prob.InOut("x", {M, E}, p.dtype, p.pad) : prob.Input("x", {M, E}, p.dtype, p.pad);
  x.Normal();
  // residual_out = x + residual in f32: exact in layer 0, one rounding otherwise.
  if (p.in_place == kFirstLayer) x.Tol(0.0);
  if (p.residual) {
    Arg& r = p.in_place == kStream ? prob.InOut("residual", {M, E}, DType::kF32, p.pad)
                                   : prob.Input("residual", {M, E}, DType::kF32, p.pad);
    r.Normal(2.0);
    if (p.in_place == kStream) r.Tol(1e-6);
  }
  // dweight and dbias are sums over rows, reduced in another order on the GPU.
  prob.Input("weight", {E}, DType::kF32).Uniform(0.5, 1.5).GradTol(DTypeTol(p.dtype), 1e-4);
  if (p.bias) prob.Input("bias", {E}, DType::kF32).Normal(0.1).GradTol(DTypeTol(p.dtype), 1e-4);
  if (OutName(p) == "out") prob.Output("out", {M, E}, p.dtype, p.pad);
  if (ResidualOutName(p) == "residual_out") {
    Arg& r = prob.Output("residual_out", {M, E}, DType::kF32, p.pad).Tol(1e-6);
    if (!p.dresidual_out) r.NoUpstream();
  }
}

ref::NormShape Shape(const AddNorm& p) {
  return {p.rows, p.features, 0, static_cast<double>(p.eps), true};
}

void OracleForward(const AddNorm& p, Values& v) {
  const size_t n = static_cast<size_t>(p.rows * p.features);
  // From a copy of x: in place, x receives a result.
  const std::vector<double> x(v["x"], v["x"] + n);
  std::vector<double> out(n), residual_out(n);
  ref::AddRmsNormForward(Shape(p), {x.data(), v["residual"], v["weight"], v["bias"]}, out.data(),
                         residual_out.data());
  v.at(OutName(p)) = out;
  v.at(ResidualOutName(p)) = residual_out;
}

void OracleBackward(const AddNorm& p, Values& v) {
  ref::AddRmsNormBackward(Shape(p), {v["x"], v["residual"], v["weight"], v["bias"]}, v["dout"],
                          v["dresidual_out"], {v["dx"], v["dresidual"], v["dweight"], v["dbias"]});
}

Status Forward(const AddNorm& p, Bound& b) {
  return AddRmsNormForward({b["x"], b["residual"], b["weight"], b["bias"]}, b[OutName(p)],
                           b[ResidualOutName(p)], {p.eps});
}

Status Backward(const AddNorm& p, Bound& b) {
  return AddRmsNormBackward({b["x"], b["residual"], b["weight"], b["bias"]}, b["dout"],
                            b["dresidual_out"], {b["dx"], b["dresidual"], b["dweight"], b["dbias"]},
                            {p.eps});
}

std::vector<Case<AddNorm>> Cases() {
  std::vector<AddNorm> widths, small, mamba;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t E : {37, 768, 3}) {
      for (bool residual : {false, true}) {
        for (bool bias : {false, true}) {
          for (int64_t M : {1, 6}) {
            for (int64_t pad : {0, 5}) widths.push_back({M, E, pad, residual, bias, true, dtype});
          }
        }
      }
    }
    // Three threads: dweight and dbias summed from several uneven blocks of rows.
    for (bool residual : {false, true})
      mamba.push_back({160, 768, 0, residual, residual, true, dtype});
  }
  for (int64_t E : {5, 19}) {
    for (bool residual : {false, true}) {
      for (bool bias : {false, true}) {
        for (bool dresidual_out : {false, true})
          small.push_back({3, E, 1, residual, bias, dresidual_out, DType::kF32, 1e-3f});
      }
    }
  }
  AddNorm stream{9, 768};
  stream.in_place = kStream;
  AddNorm first_layer{9, 768, 0, false};
  first_layer.in_place = kFirstLayer;
  return {
      {"widths", widths},
      {"rows5_e37", {{5, 37}}},
      {"small", small, {.finite_differences = true, .grads_alone = true}},
      {"mamba_width", mamba, {.threads = 3}},
      {"in_place", {stream, first_layer}, {.backward = false}},
      // tests/gpu/norm_gpu_test.cpp's: a Mamba width on 50 rows.
      {"gpu_shapes",
       {{50, 768}, {50, 768, 0, false}, {50, 768, 0, true, true, true, DType::kBF16}}},
  };
}

using Bad = BadInput<AddNorm>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;

std::vector<Bad> BadInputs() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"EpsZero",
       kFwd,
       [](AddNorm& p, Bound&) { p.eps = 0.0f; },
       {"add_rmsnorm: options.eps:", "expected a finite value > 0", "given 0"}},
      {"EpsNaN",
       kFwd,
       [nan](AddNorm& p, Bound&) { p.eps = nan; },
       {"add_rmsnorm: options.eps:", "expected a finite value > 0", "given nan"}},
      {"EpsInfinite",
       kBwd,
       [inf](AddNorm& p, Bound&) { p.eps = inf; },
       {"add_rmsnorm: options.eps:", "given inf"}},
      {"XRankWrong",
       kFwd,
       [](AddNorm&, Bound& b) { b["x"].rank = 3; },
       {"add_rmsnorm: x:", "expected rank 2", "given rank 3"}},
      {"ZeroFeatures",
       kBwd,
       [](AddNorm&, Bound& b) { b["x"].shape[1] = 0; },
       {"add_rmsnorm: x:", "expected features E >= 1", "given E = 0"}},
      {"XNegativeRowStride",
       kFwd,
       [](AddNorm&, Bound& b) { b["x"].strides[0] = -8; },
       {"add_rmsnorm: x:", "expected non-negative strides", "given stride -8 on dimension 0"}},
      {"WeightShape",
       kFwd,
       [](AddNorm&, Bound& b) { b["weight"].shape[0] = 7; },
       {"add_rmsnorm: weight:", "expected shape (E) = (8,)", "given (7,)"}},
      {"BiasDtype",
       kBwd,
       [](AddNorm&, Bound& b) { b["bias"].dtype = DType::kI32; },
       {"add_rmsnorm: bias:", "expected dtype f32", "given i32"}},
      {"ResidualShape",
       kFwd,
       [](AddNorm&, Bound& b) { b["residual"].shape[0] = 5; },
       {"add_rmsnorm: residual:", "expected shape (M, E) = (4, 8)", "given (5, 8)"}},
      {"ResidualDtype",
       kFwd,
       [](AddNorm&, Bound& b) { b["residual"].dtype = DType::kBF16; },
       {"add_rmsnorm: residual:", "expected dtype f32", "given bf16"}},
      {"OutShape",
       kFwd,
       [](AddNorm&, Bound& b) { b["out"].shape[0] = 2; },
       {"add_rmsnorm: out:", "expected shape (M, E) = (4, 8)", "given (2, 8)"}},
      {"NullResidualOut",
       kFwd,
       [](AddNorm&, Bound& b) { b["residual_out"].data = nullptr; },
       {"add_rmsnorm: residual_out:", "expected a tensor of shape (M, E)", "given null"}},
      {"ResidualOutDtype",
       kFwd,
       [](AddNorm&, Bound& b) { b["residual_out"].dtype = DType::kBF16; },
       {"add_rmsnorm: residual_out:", "expected dtype f32", "given bf16"}},
      {"ResidualOutRowsOverlap",
       kFwd,
       [](AddNorm&, Bound& b) { b["residual_out"].strides[0] = 0; },
       {"add_rmsnorm: residual_out:", "expected row stride >= E = 8", "given row stride 0"}},
      {"DoutDtypeNotX",
       kBwd,
       [](AddNorm&, Bound& b) { b["dout"].dtype = DType::kBF16; },
       {"add_rmsnorm: dout:", "expected dtype f32", "given bf16"}},
      {"DresidualOutShape",
       kBwd,
       [](AddNorm&, Bound& b) { b["dresidual_out"].shape[0] = 1; },
       {"add_rmsnorm: dresidual_out:", "expected shape (M, E) = (4, 8)", "given (1, 8)"}},
      {"DresidualOutDtype",
       kBwd,
       [](AddNorm&, Bound& b) { b["dresidual_out"].dtype = DType::kBF16; },
       {"add_rmsnorm: dresidual_out:", "expected dtype f32", "given bf16"}},
      {"DxDtypeNotX",
       kBwd,
       [](AddNorm&, Bound& b) { b["dx"].dtype = DType::kBF16; },
       {"add_rmsnorm: dx:", "expected dtype f32", "given bf16"}},
      {"DweightDtype",
       kBwd,
       [](AddNorm&, Bound& b) { b["dweight"].dtype = DType::kBF16; },
       {"add_rmsnorm: dweight:", "expected dtype f32", "given bf16"}},
      {"DbiasShape",
       kBwd,
       [](AddNorm&, Bound& b) { b["dbias"].shape[0] = 1; },
       {"add_rmsnorm: dbias:", "expected shape (E) = (8,)", "given (1,)"}},
      {"DresidualWithoutResidual",
       kBwd,
       [](AddNorm&, Bound& b) { b["residual"] = Tensor{}; },
       {"add_rmsnorm: dresidual:", "expected no tensor, since residual is absent",
        "given a tensor of shape (4, 8)"}},
      {"DresidualDtype",
       kBwd,
       [](AddNorm&, Bound& b) { b["dresidual"].dtype = DType::kBF16; },
       {"add_rmsnorm: dresidual:", "expected dtype f32", "given bf16"}},
      {"DresidualRowsOverlap",
       kBwd,
       [](AddNorm&, Bound& b) { b["dresidual"].strides[0] = 1; },
       {"add_rmsnorm: dresidual:", "expected row stride >= E = 8", "given row stride 1"}},
  };
}

OpSpec<AddNorm> AddRmsNormSpec() {
  return {.name = "add_rms_norm",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = AddNorm{},
          .bad_inputs = BadInputs(),
          .fd = {.oracle = 1e-6, .op = 1e-4}};
}

}  // namespace

SSMKIT_HARNESS_OP(AddRmsNormSpec);

}  // namespace ssmkit::testing::harness

// Gated RMSNorm (include/ssmkit/norm.hpp) in the op harness: group sizes, gates before and after
// the norm, biases, f32 and bf16, odd widths and strided rows, a Mamba-2 width on 3 threads,
// gradients against finite differences, each gradient alone, and every argument rule of
// src/ops/norm.cpp and src/ops/check.cpp.
#include <limits>

#include "harness/op_spec.hpp"
#include "ref/norm_ref.hpp"
#include "ssmkit/norm.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Gated {
  int64_t rows = 4, features = 8, group_size = 0, pad = 0;  // pad: strided rows of every (M, E)
  int gate = 1;  // 0 none, 1 z gates the normalised output, 2 z gates the input
  bool bias = true;
  DType dtype = DType::kF32;
  float eps = 1e-6f;
  std::string Name() const {
    return "M=" + std::to_string(rows) + " E=" + std::to_string(features) +
           " S=" + std::to_string(group_size) + " pad=" + std::to_string(pad) +
           " gate=" + std::to_string(gate) + " bias=" + std::to_string(bias) + " " +
           DTypeName(dtype) + " eps=" + std::to_string(eps);
  }
};

void Make(const Gated& p, Problem& prob) {
  const int64_t M = p.rows, E = p.features;
  prob.DefaultTol(DTypeTol(p.dtype));
  prob.Input("x", {M, E}, p.dtype, p.pad).Normal();
  // dweight and dbias are sums over rows, reduced in another order on the GPU.
  prob.Input("weight", {E}, DType::kF32).Uniform(0.5, 1.5).GradTol(DTypeTol(p.dtype), 1e-4);
  if (p.bias) prob.Input("bias", {E}, DType::kF32).Normal(0.1).GradTol(DTypeTol(p.dtype), 1e-4);
  if (p.gate > 0) prob.Input("z", {M, E}, p.dtype, p.pad).Normal(1.5);
  prob.Output("out", {M, E}, p.dtype, p.pad);
}

RmsNormOptions Options(const Gated& p) {
  RmsNormOptions o;
  o.eps = p.eps;
  o.group_size = p.group_size;
  o.norm_before_gate = p.gate != 2;
  return o;
}

ref::NormShape Shape(const Gated& p) {
  return {p.rows, p.features, p.group_size, static_cast<double>(p.eps), p.gate != 2};
}

void OracleForward(const Gated& p, Values& v) {
  ref::RmsNormForward(Shape(p), {v["x"], v["weight"], v["bias"], v["z"]}, v["out"]);
}

void OracleBackward(const Gated& p, Values& v) {
  ref::RmsNormBackward(Shape(p), {v["x"], v["weight"], v["bias"], v["z"]}, v["dout"],
                       {v["dx"], v["dweight"], v["dbias"], v["dz"]});
}

Status Forward(const Gated& p, Bound& b) {
  return RmsNormForward({b["x"], b["weight"], b["bias"], b["z"]}, b["out"], Options(p));
}

Status Backward(const Gated& p, Bound& b) {
  return RmsNormBackward({b["x"], b["weight"], b["bias"], b["z"]}, b["dout"],
                         {b["dx"], b["dweight"], b["dbias"], b["dz"]}, Options(p));
}

// Every gate and bias setting of each (rows, E, S, pad, dtype).
std::vector<Gated> GatesAndBiases(std::vector<Gated> shapes) {
  std::vector<Gated> all;
  for (const Gated& shape : shapes) {
    for (int gate = 0; gate < 3; ++gate) {
      for (bool bias : {false, true}) {
        Gated p = shape;
        p.gate = gate;
        p.bias = bias;
        all.push_back(p);
      }
    }
  }
  return all;
}

std::vector<Case<Gated>> Cases() {
  // One group at an odd width (SIMD tails), several groups of an odd size (each padded on its
  // own), groups of one vector, a Mamba-2 width; groups of one feature apart, forward only
  // (each feature normalised by itself: its gradient, ~eps / |x|^3, is all cancellation in
  // f32); one row and several, dense and strided rows.
  std::vector<Gated> widths, ones;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [E, S] : std::vector<std::pair<int64_t, int64_t>>{
             {37, 0}, {148, 37}, {64, 16}, {96, 0}, {1536, 384}, {5, 1}}) {
      for (int64_t M : {1, 5}) {
        for (int64_t pad : {0, 3})
          (S == 1 ? ones : widths).push_back({M, E, S, pad, 1, true, dtype});
      }
    }
  }
  // Groups of 8 (a quarter vector on AVX2), rows one element apart.
  std::vector<Gated> odd;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (auto [E, S] : std::vector<std::pair<int64_t, int64_t>>{{37, 0}, {148, 37}, {64, 8}})
      odd.push_back({5, E, S, 1, 1, false, dtype});
  }
  std::vector<Gated> small;
  for (auto [E, S] : std::vector<std::pair<int64_t, int64_t>>{{7, 0}, {12, 4}, {20, 5}})
    small.push_back({3, E, S, 2, 1, true, DType::kF32, 1e-3f});
  // Three threads: dweight and dbias summed from several uneven blocks of rows.
  std::vector<Gated> mamba;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t S : {0, 384}) {
      for (int gate = 0; gate < 3; ++gate)
        mamba.push_back({64, 1536, S, 0, gate, gate != 1, dtype});
    }
  }
  return {
      {"widths", GatesAndBiases(widths)},
      {"groups_of_one", GatesAndBiases(ones), {.backward = false}},
      {"odd_groups", GatesAndBiases(odd)},
      // eps large enough to matter against mean(x^2) ~ 1; S = E given explicitly.
      {"large_eps", {{7, 40, 40, 0, 1, true, DType::kF32, 0.5f}}},
      {"small", GatesAndBiases(small), {.finite_differences = true, .grads_alone = true}},
      // One row (decode) at an odd width, each gradient alone.
      {"single_row", {{1, 37, 0, 0, 1, true}}, {.grads_alone = true}},
      {"mamba2_width", mamba, {.threads = 3}},
      // tests/gpu/norm_gpu_test.cpp's: below one block of features, groups, no gate or bias,
      // m2-130m's E = 1536 on many rows (several dweight tiles).
      {"gpu_shapes",
       {{37, 96},
        {37, 96, 0, 0, 2},
        {37, 96, 24},
        {37, 96, 0, 0, 0, false},
        {300, 1536},
        {300, 1536, 0, 0, 1, true, DType::kBF16}}},
  };
}

using Bad = BadInput<Gated>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;

std::vector<Bad> BadInputs() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"EpsZero",
       kFwd,
       [](Gated& p, Bound&) { p.eps = 0.0f; },
       {"rmsnorm: options.eps:", "expected a finite value > 0", "given 0"}},
      {"EpsNegative",
       kBwd,
       [](Gated& p, Bound&) { p.eps = -1e-5f; },
       {"rmsnorm: options.eps:", "expected a finite value > 0", "given -1e-05"}},
      {"EpsNaN",
       kFwd,
       [nan](Gated& p, Bound&) { p.eps = nan; },
       {"rmsnorm: options.eps:", "given nan"}},
      {"EpsInfinite",
       kBwd,
       [inf](Gated& p, Bound&) { p.eps = inf; },
       {"rmsnorm: options.eps:", "given inf"}},
      {"GroupSizeNotDividingE",
       kFwd,
       [](Gated& p, Bound&) { p.group_size = 3; },
       {"rmsnorm: options.group_size:", "expected 0 (one group of E) or a divisor of E = 8",
        "given 3"}},
      {"GroupSizeNegative",
       kBwd,
       [](Gated& p, Bound&) { p.group_size = -2; },
       {"rmsnorm: options.group_size:", "a divisor of E = 8", "given -2"}},
      {"GroupSizeLargerThanE",
       kFwd,
       [](Gated& p, Bound&) { p.group_size = 16; },
       {"rmsnorm: options.group_size:", "given 16"}},
      {"NullX",
       kFwd,
       [](Gated&, Bound& b) { b["x"].data = nullptr; },
       {"rmsnorm: x:", "expected a tensor (M, E)", "given null"}},
      {"XRankWrong",
       kFwd,
       [](Gated&, Bound& b) { b["x"].rank = 3; },
       {"rmsnorm: x:", "expected rank 2", "given rank 3"}},
      {"ZeroRows",
       kFwd,
       [](Gated&, Bound& b) { b["x"].shape[0] = 0; },
       {"rmsnorm: x:", "expected rows M >= 1", "given M = 0"}},
      {"ZeroFeatures",
       kBwd,
       [](Gated&, Bound& b) { b["x"].shape[1] = 0; },
       {"rmsnorm: x:", "expected features E >= 1", "given E = 0"}},
      {"XDtype",
       kFwd,
       [](Gated&, Bound& b) { b["x"].dtype = DType::kF16; },
       {"rmsnorm: x:", "expected dtype f32 or bf16", "given f16"}},
      {"XFeaturesNotContiguous",
       kBwd,
       [](Gated&, Bound& b) { b["x"].strides[1] = 2; },
       {"rmsnorm: x:", "expected stride 1 on the last dimension", "given stride 2"}},
      {"XNegativeRowStride",
       kFwd,
       [](Gated&, Bound& b) { b["x"].strides[0] = -8; },
       {"rmsnorm: x:", "expected non-negative strides", "given stride -8 on dimension 0"}},
      {"XOnCuda",
       kFwd,
       [](Gated&, Bound& b) { b["x"].device = Device::kCuda; },
       {"rmsnorm: x:", "expected a CPU tensor", "given a CUDA tensor"}},
      {"NullWeight",
       kFwd,
       [](Gated&, Bound& b) { b["weight"].data = nullptr; },
       {"rmsnorm: weight:", "expected a tensor of shape (E) = (8,)", "given null"}},
      {"WeightShape",
       kFwd,
       [](Gated&, Bound& b) { b["weight"].shape[0] = 7; },
       {"rmsnorm: weight:", "expected shape (E) = (8,)", "given (7,)"}},
      {"WeightDtype",
       kBwd,
       [](Gated&, Bound& b) { b["weight"].dtype = DType::kBF16; },
       {"rmsnorm: weight:", "expected dtype f32", "given bf16"}},
      {"BiasShape",
       kFwd,
       [](Gated&, Bound& b) { b["bias"].shape[0] = 4; },
       {"rmsnorm: bias:", "expected shape (E) = (8,)", "given (4,)"}},
      {"BiasDtype",
       kBwd,
       [](Gated&, Bound& b) { b["bias"].dtype = DType::kI32; },
       {"rmsnorm: bias:", "expected dtype f32", "given i32"}},
      {"ZShape",
       kFwd,
       [](Gated&, Bound& b) { b["z"].shape[1] = 9; },
       {"rmsnorm: z:", "expected shape (M, E) = (4, 8)", "given (4, 9)"}},
      {"ZDtype",
       kBwd,
       [](Gated&, Bound& b) { b["z"].dtype = DType::kI64; },
       {"rmsnorm: z:", "expected dtype f32 or bf16", "given i64"}},
      {"NullOut",
       kFwd,
       [](Gated&, Bound& b) { b["out"].data = nullptr; },
       {"rmsnorm: out:", "expected a tensor of shape (M, E) = (4, 8)", "given null"}},
      {"OutShape",
       kFwd,
       [](Gated&, Bound& b) { b["out"].shape[0] = 2; },
       {"rmsnorm: out:", "expected shape (M, E) = (4, 8)", "given (2, 8)"}},
      {"OutDtypeNotX",
       kFwd,
       [](Gated&, Bound& b) { b["out"].dtype = DType::kBF16; },
       {"rmsnorm: out:", "expected dtype f32", "given bf16"}},
      {"OutRowsOverlap",
       kFwd,
       [](Gated&, Bound& b) { b["out"].strides[0] = 4; },
       {"rmsnorm: out:", "expected row stride >= E = 8 (rows must not overlap)",
        "given row stride 4"}},
      {"NullDout",
       kBwd,
       [](Gated&, Bound& b) { b["dout"].data = nullptr; },
       {"rmsnorm: dout:", "expected a tensor of shape (M, E) = (4, 8)", "given null"}},
      {"DoutShape",
       kBwd,
       [](Gated&, Bound& b) { b["dout"].shape[1] = 16; },
       {"rmsnorm: dout:", "expected shape (M, E) = (4, 8)", "given (4, 16)"}},
      {"DoutDtypeNotX",
       kBwd,
       [](Gated&, Bound& b) { b["dout"].dtype = DType::kBF16; },
       {"rmsnorm: dout:", "expected dtype f32", "given bf16"}},
      {"DxShape",
       kBwd,
       [](Gated&, Bound& b) { b["dx"].shape[0] = 3; },
       {"rmsnorm: dx:", "expected shape (M, E) = (4, 8)", "given (3, 8)"}},
      {"DxRowsOverlap",
       kBwd,
       [](Gated&, Bound& b) { b["dx"].strides[0] = 7; },
       {"rmsnorm: dx:", "expected row stride >= E = 8", "given row stride 7"}},
      {"DweightShape",
       kBwd,
       [](Gated&, Bound& b) { b["dweight"].shape[0] = 9; },
       {"rmsnorm: dweight:", "expected shape (E) = (8,)", "given (9,)"}},
      {"DbiasWithoutBias",
       kBwd,
       [](Gated&, Bound& b) { b["bias"] = Tensor{}; },
       {"rmsnorm: dbias:", "expected no tensor, since bias is absent",
        "given a tensor of shape (8,)"}},
      {"DzWithoutZ",
       kBwd,
       [](Gated&, Bound& b) { b["z"] = Tensor{}; },
       {"rmsnorm: dz:", "expected no tensor, since z is absent", "given a tensor of shape (4, 8)"}},
      {"DzDtypeNotZ",
       kBwd,
       [](Gated&, Bound& b) { b["dz"].dtype = DType::kBF16; },
       {"rmsnorm: dz:", "expected dtype f32", "given bf16"}},
  };
}

OpSpec<Gated> RmsNormSpec() {
  return {.name = "rms_norm",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Gated{},
          .bad_inputs = BadInputs(),
          .fd = {.oracle = 1e-6, .op = 1e-4}};
}

}  // namespace

SSMKIT_HARNESS_OP(RmsNormSpec);

}  // namespace ssmkit::testing::harness

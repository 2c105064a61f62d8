// Causal conv1d, forward and backward (include/ssmkit/conv1d.hpp), in the op harness: every
// width K in 2..8, L = 1, L < K - 1 (final_states reaching into initial_states), odd L, with
// and without bias / silu / initial_states / final_states, B > 1, f32 and bf16 inputs and
// states, strided rows, gradients against finite differences, each gradient alone, and every
// argument rule of src/ops/conv1d.cpp and src/ops/check.cpp.
#include <algorithm>
#include <cmath>

#include "harness/op_spec.hpp"
#include "ref/conv1d_ref.hpp"
#include "ssmkit/conv1d.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Conv {
  int64_t B = 2, D = 3, L = 5, K = 4;
  int64_t pad = 0;  // strided rows of x, out, dout and dx
  DType dtype = DType::kF32;
  DType states_dtype = DType::kF32;  // initial_states and final_states
  bool bias = true;
  Conv1dActivation activation = Conv1dActivation::kSilu;
  bool initial = true, final = true;
  bool silu() const { return activation == Conv1dActivation::kSilu; }
  std::string Name() const {
    return "B=" + std::to_string(B) + " D=" + std::to_string(D) + " L=" + std::to_string(L) +
           " K=" + std::to_string(K) + " pad=" + std::to_string(pad) + " " + DTypeName(dtype) +
           " states " + DTypeName(states_dtype) + (bias ? " bias" : "") + (silu() ? " silu" : "") +
           (initial ? " initial" : "") + (final ? " final" : "");
  }
};

void Make(const Conv& p, Problem& prob) {
  prob.DefaultTol(DTypeTol(p.dtype));
  prob.Input("x", {p.B, p.D, p.L}, p.dtype, p.pad).Normal();
  // dweight and dbias are sums of B * L terms in f32, reduced in another order on the GPU:
  // their rounding grows like a random walk over the terms (at L = 2^17 the SCALAR target
  // measured 1.05e-5, seed 1795868718475616306).
  const double sum_tol =
      std::max(DTypeTol(p.dtype), 1e-7 * std::sqrt(static_cast<double>(p.B * p.L)));
  prob.Input("weight", {p.D, p.K}, DType::kF32).Uniform(-0.8, 0.8).GradTol(sum_tol, 1e-4);
  if (p.bias) prob.Input("bias", {p.D}, DType::kF32).Uniform(-0.5, 0.5).GradTol(sum_tol, 1e-4);
  if (p.initial) prob.Input("initial_states", {p.B, p.D, p.K - 1}, p.states_dtype).Normal();
  prob.Output("out", {p.B, p.D, p.L}, p.dtype, p.pad);
  // final_states are copies of inputs: exact (the GPU tests have held 1e-6).
  if (p.final) prob.Output("final_states", {p.B, p.D, p.K - 1}, p.states_dtype).Tol(0.0, 1e-6);
}

ref::Conv1dShape Shape(const Conv& p) { return {p.B, p.D, p.L, p.K, p.silu()}; }

void OracleForward(const Conv& p, Values& v) {
  ref::CausalConv1dForward(Shape(p), {v["x"], v["weight"], v["bias"], v["initial_states"]},
                           v["out"], v["final_states"]);
}

void OracleBackward(const Conv& p, Values& v) {
  ref::CausalConv1dBackward(Shape(p), {v["x"], v["weight"], v["bias"], v["initial_states"]},
                            v["dout"], v["dfinal_states"],
                            {v["dx"], v["dweight"], v["dbias"], v["dinitial_states"]});
}

CausalConv1dInputs Inputs(const Conv& p, Bound& b) {
  return {b["x"], b["weight"], b["bias"], b["initial_states"], p.activation};
}

Status Forward(const Conv& p, Bound& b) {
  return CausalConv1dForward(Inputs(p, b), b["out"], b["final_states"]);
}

Status Backward(const Conv& p, Bound& b) {
  return CausalConv1dBackward(Inputs(p, b), b["dout"], b["dfinal_states"],
                              {b["dx"], b["dweight"], b["dbias"], b["dinitial_states"]});
}

Conv1dActivation Act(bool silu) { return silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone; }

std::vector<Case<Conv>> Cases() {
  std::vector<Conv> widths, small, mid, targets;
  for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
    std::vector<int64_t> lengths = {1, 7, 37, 64};
    if (K > 2) lengths.push_back(K - 2);  // L < K - 1
    for (int64_t L : lengths) {
      for (int options = 0; options < 16; ++options) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          widths.push_back({2, 3, L, K, options % 3, dtype, DType::kF32, (options & 1) != 0,
                            Act((options & 2) != 0), (options & 4) != 0, (options & 8) != 0});
        }
      }
    }
  }
  for (int64_t K : {2, 3, 4, 8}) {
    for (int64_t L : {int64_t{1}, K - 1 > 1 ? K - 2 : int64_t{2}, int64_t{9}}) {
      for (int options = 0; options < 4; ++options) {
        const bool extras = (options & 2) != 0;
        // final (and so a gradient reaching final_states) with every option but the first
        small.push_back({2, 2, L, K, options == 3, DType::kF32, DType::kF32, extras,
                         Act((options & 1) != 0), extras, options != 0});
      }
    }
  }
  for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      mid.push_back({3, 24, 203, K, K == 6 ? 3 : 0, dtype, K % 2 ? DType::kF32 : dtype, K != 5,
                     Act(K % 2 == 0), K != 5, K != 3});
    }
  }
  std::vector<Conv> mixed;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (DType states : {DType::kF32, DType::kBF16})
      mixed.push_back({5, 17, 131, 4, 0, dtype, states});
    for (int64_t K : {2, 4, 7}) targets.push_back({2, 3, 29, K, 0, dtype, DType::kF32, true});
  }
  // tests/gpu/conv1d_gpu_test.cpp's shapes, around the CUDA kernels' tiles (512 positions;
  // 128 vectors of 8 in the "unrolled" kernels, which take rows of a multiple of 8): every width
  // at L = 37 and 40, options off, L < K - 1 and below a vector, tiles with a partial last one,
  // L = 2^17.
  std::vector<Conv> gpu;
  for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
    gpu.push_back({2, 5, 37, K});
    for (DType dtype : {DType::kF32, DType::kBF16}) gpu.push_back({2, 5, 40, K, 0, dtype, dtype});
  }
  for (int64_t L : {37, 40})
    gpu.push_back({2, 5, L, 4, 0, DType::kF32, DType::kF32, false, Act(false), false, true});
  gpu.push_back({2, 5, 2, 6});
  gpu.push_back({2, 5, 8, 8, 0, DType::kBF16, DType::kBF16});
  gpu.push_back({2, 5, 4, 8});
  for (DType dtype : {DType::kF32, DType::kBF16}) gpu.push_back({2, 64, 1500, 4, 0, dtype, dtype});
  gpu.push_back({2, 64, 2056, 4, 0, DType::kBF16, DType::kBF16});
  gpu.push_back({1, 8, 1 << 17, 4});
  return {
      {"widths_and_options", widths},
      {"small", small, {.finite_differences = true, .grads_alone = true}},
      {"mid_shapes", mid},
      {"mixed_state_dtypes", mixed},
      {"l29", targets},
      {"each_grad_alone", {{2, 5, 19, 4}}, {.grads_alone = true}},
      {"gpu_shapes", gpu},
  };
}

using Bad = BadInput<Conv>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;

std::vector<Bad> BadInputs() {
  return {
      {"NullX",
       kFwd,
       [](Conv&, Bound& b) { b["x"].data = nullptr; },
       {"causal_conv1d: x:", "expected a tensor (B, D, L)", "given null"}},
      {"XRankWrong",
       kFwd,
       [](Conv&, Bound& b) { b["x"].rank = 2; },
       {"causal_conv1d: x:", "expected rank 3", "given rank 2"}},
      {"ZeroBatch",
       kFwd,
       [](Conv&, Bound& b) { b["x"].shape[0] = 0; },
       {"causal_conv1d: x:", "expected batch B >= 1", "given B = 0"}},
      {"ZeroChannels",
       kBwd,
       [](Conv&, Bound& b) { b["x"].shape[1] = 0; },
       {"causal_conv1d: x:", "expected channels D >= 1", "given D = 0"}},
      {"ZeroLength",
       kFwd,
       [](Conv&, Bound& b) { b["x"].shape[2] = 0; },
       {"causal_conv1d: x:", "expected sequence length L >= 1", "given L = 0"}},
      {"XDtype",
       kFwd,
       [](Conv&, Bound& b) { b["x"].dtype = DType::kF16; },
       {"causal_conv1d: x:", "expected dtype f32 or bf16", "given f16"}},
      {"XTimeNotContiguous",
       kFwd,
       [](Conv&, Bound& b) { b["x"].strides[2] = 2; },
       {"causal_conv1d: x:", "expected stride 1 on the last dimension", "given stride 2"}},
      {"XNegativeStride",
       kBwd,
       [](Conv&, Bound& b) { b["x"].strides[1] = -5; },
       {"causal_conv1d: x:", "expected non-negative strides", "given stride -5 on dimension 1"}},
      {"XOnCuda",
       kFwd,
       [](Conv&, Bound& b) { b["x"].device = Device::kCuda; },
       {"causal_conv1d: x:", "expected a CPU tensor", "given a CUDA tensor"}},
      {"NullWeight",
       kFwd,
       [](Conv&, Bound& b) { b["weight"].data = nullptr; },
       {"causal_conv1d: weight:", "expected a tensor (D, K)", "given null"}},
      {"WeightRank",
       kFwd,
       [](Conv&, Bound& b) { b["weight"].rank = 1; },
       {"causal_conv1d: weight:", "expected rank 2", "given rank 1"}},
      {"WidthTooSmall",
       kFwd,
       [](Conv&, Bound& b) { b["weight"].shape[1] = 1; },
       {"causal_conv1d: weight:", "expected conv width K in [2, 8]", "given K = 1 in (3, 1)"}},
      {"WidthTooLarge",
       kBwd,
       [](Conv&, Bound& b) { b["weight"].shape[1] = 9; },
       {"causal_conv1d: weight:", "expected conv width K in [2, 8]", "given K = 9"}},
      {"WeightChannels",
       kFwd,
       [](Conv&, Bound& b) { b["weight"].shape[0] = 4; },
       {"causal_conv1d: weight:", "expected shape (D, K) = (3, 4)", "given (4, 4)"}},
      {"WeightDtype",
       kFwd,
       [](Conv&, Bound& b) { b["weight"].dtype = DType::kBF16; },
       {"causal_conv1d: weight:", "expected dtype f32", "given bf16"}},
      {"WeightTapsNotContiguous",
       kFwd,
       [](Conv&, Bound& b) { b["weight"].strides[1] = 3; },
       {"causal_conv1d: weight:", "expected stride 1 on the last dimension", "given stride 3"}},
      {"BiasShape",
       kFwd,
       [](Conv&, Bound& b) { b["bias"].shape[0] = 2; },
       {"causal_conv1d: bias:", "expected shape (D) = (3,)", "given (2,)"}},
      {"BiasDtype",
       kBwd,
       [](Conv&, Bound& b) { b["bias"].dtype = DType::kI32; },
       {"causal_conv1d: bias:", "expected dtype f32", "given i32"}},
      {"InitialStatesShape",
       kFwd,
       [](Conv&, Bound& b) { b["initial_states"].shape[2] = 4; },
       {"causal_conv1d: initial_states:", "expected shape (B, D, K-1) = (2, 3, 3)",
        "given (2, 3, 4)"}},
      {"InitialStatesDtype",
       kFwd,
       [](Conv&, Bound& b) { b["initial_states"].dtype = DType::kF16; },
       {"causal_conv1d: initial_states:", "expected dtype f32 or bf16", "given f16"}},
      {"OutNull",
       kFwd,
       [](Conv&, Bound& b) { b["out"].data = nullptr; },
       {"causal_conv1d: out:", "expected a tensor of shape (B, D, L) = (2, 3, 5)", "given null"}},
      {"OutShape",
       kFwd,
       [](Conv&, Bound& b) { b["out"].shape[2] = 4; },
       {"causal_conv1d: out:", "expected shape (B, D, L) = (2, 3, 5)", "given (2, 3, 4)"}},
      {"OutDtypeMustMatchX",
       kFwd,
       [](Conv&, Bound& b) { b["out"].dtype = DType::kBF16; },
       {"causal_conv1d: out:", "expected dtype f32", "given bf16"}},
      {"FinalStatesShape",
       kFwd,
       [](Conv&, Bound& b) { b["final_states"].shape[0] = 1; },
       {"causal_conv1d: final_states:", "expected shape (B, D, K-1) = (2, 3, 3)",
        "given (1, 3, 3)"}},
      {"FinalStatesDtype",
       kFwd,
       [](Conv&, Bound& b) { b["final_states"].dtype = DType::kI32; },
       {"causal_conv1d: final_states:", "expected dtype f32 or bf16", "given i32"}},
      {"DoutNull",
       kBwd,
       [](Conv&, Bound& b) { b["dout"].data = nullptr; },
       {"causal_conv1d: dout:", "expected a tensor of shape (B, D, L)", "given null"}},
      {"DoutShape",
       kBwd,
       [](Conv&, Bound& b) { b["dout"].shape[1] = 2; },
       {"causal_conv1d: dout:", "expected shape (B, D, L) = (2, 3, 5)", "given (2, 2, 5)"}},
      {"DoutDtype",
       kBwd,
       [](Conv&, Bound& b) { b["dout"].dtype = DType::kBF16; },
       {"causal_conv1d: dout:", "expected dtype f32", "given bf16"}},
      {"DfinalStatesShape",
       kBwd,
       [](Conv&, Bound& b) { b["dfinal_states"].shape[2] = 2; },
       {"causal_conv1d: dfinal_states:", "expected shape (B, D, K-1) = (2, 3, 3)",
        "given (2, 3, 2)"}},
      {"DxShape",
       kBwd,
       [](Conv&, Bound& b) { b["dx"].shape[2] = 6; },
       {"causal_conv1d: dx:", "expected shape (as x) = (2, 3, 5)", "given (2, 3, 6)"}},
      {"DxDtypeMustMatchX",
       kBwd,
       [](Conv&, Bound& b) { b["dx"].dtype = DType::kBF16; },
       {"causal_conv1d: dx:", "expected dtype f32", "given bf16"}},
      {"DweightShape",
       kBwd,
       [](Conv&, Bound& b) { b["dweight"].shape[1] = 3; },
       {"causal_conv1d: dweight:", "expected shape (as weight) = (3, 4)", "given (3, 3)"}},
      {"DbiasForAbsentBias",
       kBwd,
       [](Conv&, Bound& b) { b["bias"] = Tensor{}; },
       {"causal_conv1d: dbias:", "expected no tensor, since bias is absent",
        "given a tensor of shape (3,)"}},
      {"DinitialStatesForAbsentInitialStates",
       kBwd,
       [](Conv&, Bound& b) { b["initial_states"] = Tensor{}; },
       {"causal_conv1d: dinitial_states:", "expected no tensor, since initial_states is absent"}},
      {"DinitialStatesDtypeMustMatchInitialStates",
       kBwd,
       [](Conv&, Bound& b) { b["dinitial_states"].dtype = DType::kBF16; },
       {"causal_conv1d: dinitial_states:", "expected dtype f32", "given bf16"}},
      {"BackwardChecksInputsToo",
       kBwd,
       [](Conv&, Bound& b) { b["weight"].shape[1] = 10; },
       {"causal_conv1d: weight:", "given K = 10"}},
      {"ActivationOutOfRange",
       kFwd,
       [](Conv& p, Bound&) { p.activation = static_cast<Conv1dActivation>(7); },
       {"causal_conv1d: activation:", "expected kNone (0) or kSilu (1)", "given 7"}},
  };
}

OpSpec<Conv> CausalConv1dSpec() {
  return {.name = "causal_conv1d",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Conv{},
          .bad_inputs = BadInputs(),
          .cuda_variants = {&cuda::kConv1dVariants, &cuda::kConv1dBackwardVariants},
          .fd = {.oracle = 1e-7, .op = 1e-5}};
}

}  // namespace

SSMKIT_HARNESS_OP(CausalConv1dSpec);

}  // namespace ssmkit::testing::harness

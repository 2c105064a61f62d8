// causal_conv1d_update, the decode step (include/ssmkit/conv1d.hpp), in the op harness: every
// width, one step in the (B, D) form and T steps in (B, D, T), state lengths S >= K - 1, out
// aliasing x, channel counts with and without a vector tail, many rows on 2 threads, and every
// argument rule of src/ops/conv1d.cpp (conv_state, updated in place, untouched on error).
#include <algorithm>

#include "harness/op_spec.hpp"
#include "ref/conv1d_ref.hpp"
#include "ssmkit/conv1d.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Update {
  int64_t B = 2, D = 3, T = 0, K = 4, S = 3;  // T = 0: the (B, D) form, one step
  DType dtype = DType::kF32;
  bool bias = true;
  Conv1dActivation activation = Conv1dActivation::kSilu;
  bool alias = false;  // out = x
  int64_t steps() const { return std::max<int64_t>(T, 1); }
  std::vector<int64_t> XShape() const {
    return T > 0 ? std::vector<int64_t>{B, D, T} : std::vector<int64_t>{B, D};
  }
  std::string Name() const {
    return "B=" + std::to_string(B) + " D=" + std::to_string(D) + " T=" + std::to_string(T) +
           " K=" + std::to_string(K) + " S=" + std::to_string(S) + " " + DTypeName(dtype) +
           (bias ? " bias" : "") + (activation == Conv1dActivation::kSilu ? " silu" : "") +
           (alias ? " out=x" : "");
  }
};

std::string OutName(const Update& p) { return p.alias ? "x" : "out"; }

void Make(const Update& p, Problem& prob) {
  prob.DefaultTol(DTypeTol(p.dtype));
  (p.alias ? prob.InOut("x", p.XShape(), p.dtype) : prob.Input("x", p.XShape(), p.dtype)).Normal();
  prob.Input("weight", {p.D, p.K}, DType::kF32).Uniform(-0.8, 0.8);
  if (p.bias) prob.Input("bias", {p.D}, DType::kF32).Uniform(-0.5, 0.5);
  // The state holds copies of inputs: exact (the GPU tests have held 1e-7).
  prob.InOut("conv_state", {p.B, p.D, p.S}, DType::kF32).Normal().Tol(0.0, 1e-7);
  if (!p.alias) prob.Output("out", p.XShape(), p.dtype);
}

void OracleForward(const Update& p, Values& v) {
  // From a copy of x: with out = x the oracle's out overwrites it.
  const std::vector<double> x(v["x"], v["x"] + p.B * p.D * p.steps());
  ref::CausalConv1dUpdate({p.B, p.D, p.steps(), p.K, p.activation == Conv1dActivation::kSilu}, p.S,
                          x.data(), v["weight"], v["bias"], v["conv_state"], v[OutName(p)]);
}

Status Forward(const Update& p, Bound& b) {
  return CausalConv1dUpdate({b["x"], b["weight"], b["bias"], p.activation}, b["conv_state"],
                            b[OutName(p)]);
}

std::vector<Case<Update>> Cases() {
  std::vector<Update> steps, t5;
  // D = 37: whole vectors of channels and a tail in each batch row (the channel-vectorised
  // path at S = K - 1, f32); D = 5: the tail alone.
  for (int64_t D : {5, 37}) {
    for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
      for (int64_t T : {0, 1, 3, 11}) {
        for (int64_t extra : {0, 1, 4}) {
          for (DType dtype : {DType::kF32, DType::kBF16}) {
            const bool alias = (T == 3 && extra == 4) || (T == 0 && extra == 0 && K % 2 == 1);
            steps.push_back({2, D, T, K, K - 1 + extra, dtype, (K + T) % 2 == 0,
                             extra != 1 ? Conv1dActivation::kSilu : Conv1dActivation::kNone,
                             alias});
          }
        }
      }
    }
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t K : {2, 4, 7}) t5.push_back({2, 5, 5, K, K - 1, dtype});
  }
  // Enough rows for the threaded path and for several activation passes per block.
  const std::vector<Update> many_rows = {{3, 1536 * 8, 0}, {3, 1536 * 8, 8}};
  // tests/gpu/conv1d_gpu_test.cpp's: 70 channels, T = 1 and 3, S > K - 1, out = x.
  std::vector<Update> gpu;
  for (int64_t T : {1, 3}) {
    for (int64_t S : {3, 4, 7}) {
      for (bool alias : {false, true})
        gpu.push_back({3, 70, T, 4, S, DType::kF32, true, Conv1dActivation::kSilu, alias});
    }
  }
  return {
      {"steps", steps},
      {"t5", t5},
      {"many_rows", many_rows, {.threads = 2}},
      {"gpu_shapes", gpu},
  };
}

using Bad = BadInput<Update>;
constexpr Call kFwd = Call::kForward;

std::vector<Bad> BadInputs() {
  return {
      {"UpdateNullX",
       kFwd,
       [](Update&, Bound& b) { b["x"].data = nullptr; },
       {"causal_conv1d_update: x:", "expected a tensor (B, D) or (B, D, T)", "given null"}},
      {"UpdateXRank",
       kFwd,
       [](Update&, Bound& b) { b["x"].rank = 1; },
       {"causal_conv1d_update: x:", "expected rank 2 or 3", "given rank 1"}},
      {"UpdateZeroBatch",
       kFwd,
       [](Update&, Bound& b) { b["x"].shape[0] = 0; },
       {"causal_conv1d_update: x:", "expected batch B >= 1", "given B = 0"}},
      {"UpdateZeroChannels",
       kFwd,
       [](Update&, Bound& b) { b["x"].shape[1] = 0; },
       {"causal_conv1d_update: x:", "expected channels D >= 1", "given D = 0"}},
      {"UpdateZeroSteps",
       kFwd,
       [](Update&, Bound& b) {
         b["x"] = Tensor::Contiguous(b["x"].data, DType::kF32, {2, 3, 0});
       },
       {"causal_conv1d_update: x:", "expected steps T >= 1", "given T = 0"}},
      {"UpdateXDtype",
       kFwd,
       [](Update&, Bound& b) { b["x"].dtype = DType::kI64; },
       {"causal_conv1d_update: x:", "expected dtype f32 or bf16", "given i64"}},
      {"UpdateXChannelsNotContiguous",
       kFwd,
       [](Update&, Bound& b) { b["x"].strides[1] = 2; },
       {"causal_conv1d_update: x:", "expected stride 1 on the last dimension", "given stride 2"}},
      {"UpdateWidthOutOfRange",
       kFwd,
       [](Update&, Bound& b) { b["weight"].shape[1] = 9; },
       {"causal_conv1d_update: weight:", "expected conv width K in [2, 8]", "given K = 9"}},
      {"UpdateWeightChannels",
       kFwd,
       [](Update&, Bound& b) { b["weight"].shape[0] = 2; },
       {"causal_conv1d_update: weight:", "expected shape (D, K) = (3, 4)", "given (2, 4)"}},
      {"UpdateBiasShape",
       kFwd,
       [](Update&, Bound& b) { b["bias"].shape[0] = 4; },
       {"causal_conv1d_update: bias:", "expected shape (D) = (3,)", "given (4,)"}},
      {"UpdateActivation",
       kFwd,
       [](Update& p, Bound&) { p.activation = static_cast<Conv1dActivation>(-1); },
       {"causal_conv1d_update: activation:", "expected kNone (0) or kSilu (1)", "given -1"}},
      {"ConvStateNull",
       kFwd,
       [](Update&, Bound& b) { b["conv_state"].data = nullptr; },
       {"causal_conv1d_update: conv_state:", "expected a tensor (B, D, S), S >= K-1",
        "given null"}},
      {"ConvStateRank",
       kFwd,
       [](Update&, Bound& b) { b["conv_state"].rank = 2; },
       {"causal_conv1d_update: conv_state:", "expected rank 3", "given rank 2"}},
      {"ConvStateTooShort",
       kFwd,
       [](Update&, Bound& b) { b["conv_state"].shape[2] = 2; },
       {"causal_conv1d_update: conv_state:", "expected state length S >= K-1 = 3",
        "given S = 2 in (2, 3, 2)"}},
      {"ConvStateBatch",
       kFwd,
       [](Update&, Bound& b) { b["conv_state"].shape[0] = 3; },
       {"causal_conv1d_update: conv_state:", "expected shape (B, D, S) = (2, 3, 3)",
        "given (3, 3, 3)"}},
      {"ConvStateDtype",
       kFwd,
       [](Update&, Bound& b) { b["conv_state"].dtype = DType::kBF16; },
       {"causal_conv1d_update: conv_state:", "expected dtype f32", "given bf16"}},
      {"ConvStateNotContiguous",
       kFwd,
       [](Update&, Bound& b) { b["conv_state"].strides[2] = 2; },
       {"causal_conv1d_update: conv_state:", "expected stride 1 on the last dimension"}},
      {"UpdateOutShape",
       kFwd,
       [](Update&, Bound& b) {
         b["out"] = Tensor::Contiguous(b["out"].data, DType::kF32, {2, 3, 1});
       },
       {"causal_conv1d_update: out:", "expected shape (B, D) = (2, 3)", "given (2, 3, 1)"}},
      {"UpdateOutDtype",
       kFwd,
       [](Update&, Bound& b) { b["out"].dtype = DType::kBF16; },
       {"causal_conv1d_update: out:", "expected dtype f32", "given bf16"}},
      {"UpdateOutNull",
       kFwd,
       [](Update&, Bound& b) { b["out"].data = nullptr; },
       {"causal_conv1d_update: out:", "expected a tensor of shape (B, D) = (2, 3)", "given null"}},
      {"UpdateStepsMustMatchOut",
       kFwd,
       [](Update&, Bound& b) {
         b["x"] = b.Spare({2, 3, 2}, DType::kF32);
       },
       {"causal_conv1d_update: out:", "expected shape (B, D, T) = (2, 3, 2)", "given (2, 3)"}},
  };
}

OpSpec<Update> CausalConv1dUpdateSpec() {
  return {.name = "causal_conv1d_update",
          .make = Make,
          .oracle_forward = OracleForward,
          .forward = Forward,
          .cases = Cases(),
          .valid = Update{},
          .bad_inputs = BadInputs()};
}

}  // namespace

SSMKIT_HARNESS_OP(CausalConv1dUpdateSpec);

}  // namespace ssmkit::testing::harness

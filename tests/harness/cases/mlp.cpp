// The MLP, forward and backward (include/ssmkit/mlp.hpp), in the op harness: decode and prefill at
// the hybrid models' widths (granite-4.0-h, falcon-h1 with its multipliers, bamba with biases,
// nemotron-h's ungated relu2, zamba2's gelu with the adapters' adds), every activation gated and
// ungated, f32 / bf16 / f16 weights, odd sizes, one element, prefill over two chunks of rows,
// strided rows, gradients against finite differences and each alone, and every argument rule of
// the MLP in src/ops/mlp.cpp and src/ops/mlp_checks.cpp. CPU only (no CUDA kernels).
//
// Bounds (relative L2 against the oracle), as the old tests had them: out 1e-5 (f32 sums, every
// weight dtype widened exactly), the gradients 2e-5 (f32, whatever the weights' dtype). Finite
// differences: step 1e-6, the oracle within 1e-6, the op within 1e-4.
//
// tests/mlp_test.cpp keeps what a table cannot say: bits across runs, a NaN row staying in its
// row, gate and up as the halves of one fused matrix, adapter gradients as column blocks of one
// buffer, the activation names. The MoE's bad inputs stay in tests/mlp_errors_test.cpp.
#include <cmath>

#include "harness/op_spec.hpp"
#include "ref/mlp_ref.hpp"
#include "ssmkit/mlp.hpp"

namespace ssmkit::testing::harness {
namespace {

using Act = MlpActivation;

struct Mlp {
  std::string label;  // the model (and use) the shape comes from
  int64_t T = 1, d = 1, F = 1;
  bool gated = true;
  Act act = Act::kSilu;
  DType wdtype = DType::kF32;  // gate, up, down
  bool bias = false;
  bool adds = false;           // gate_add / up_add (Zamba2's adapters)
  float gm = 1.0f, dm = 1.0f;  // the gate and down multipliers
  int64_t pad = 0;             // extra elements per row of x, out, the adds and their gradients

  std::string Name() const {
    return label + ": T=" + std::to_string(T) + " d=" + std::to_string(d) +
           " F=" + std::to_string(F) + (gated ? " gated " : " ungated ") + MlpActivationName(act) +
           " w=" + DTypeName(wdtype) + (bias ? " bias" : "") + (adds ? " adds" : "") +
           " gm=" + std::to_string(gm) + " dm=" + std::to_string(dm) +
           " pad=" + std::to_string(pad);
  }
};

// Uniform with standard deviation `stddev`, as nn.Linear initialises a layer.
Arg& UniformStd(Arg& a, double stddev) {
  return a.Uniform(-stddev * std::sqrt(3.0), stddev * std::sqrt(3.0));
}

// Weights at realistic scales: gate and up of variance 1/d (pre-activations of unit scale), down
// 1/F, biases 0.1^2; their gradients f32.
void Make(const Mlp& p, Problem& prob) {
  prob.DefaultTol(2e-5);  // the gradients
  prob.Input("x", {p.T, p.d}, DType::kF32, p.pad).Normal();
  const double in = 1.0 / std::sqrt(static_cast<double>(p.d));
  const double out = 1.0 / std::sqrt(static_cast<double>(p.F));
  if (p.gated) UniformStd(prob.Input("gate", {p.F, p.d}, p.wdtype), in).GradDType(DType::kF32);
  UniformStd(prob.Input("up", {p.F, p.d}, p.wdtype), in).GradDType(DType::kF32);
  UniformStd(prob.Input("down", {p.d, p.F}, p.wdtype), out).GradDType(DType::kF32);
  if (p.bias) {
    if (p.gated) UniformStd(prob.Input("gate_bias", {p.F}, DType::kF32), 0.1);
    UniformStd(prob.Input("up_bias", {p.F}, DType::kF32), 0.1);
    UniformStd(prob.Input("down_bias", {p.d}, DType::kF32), 0.1);
  }
  if (p.adds) {
    if (p.gated) prob.Input("gate_add", {p.T, p.F}, DType::kF32, p.pad).Normal(0.3);
    prob.Input("up_add", {p.T, p.F}, DType::kF32, p.pad).Normal(0.3);
  }
  prob.DefaultTol(1e-5);
  prob.Output("out", {p.T, p.d}, DType::kF32, p.pad);
}

ref::MlpShape RefShape(const Mlp& p) { return {p.d, p.F, p.gated, p.act, p.gm, p.dm}; }

ref::MlpWeights RefWeights(Values& v) {
  return {v["gate"], v["up"], v["down"], v["gate_bias"], v["up_bias"], v["down_bias"]};
}

void OracleForward(const Mlp& p, Values& v) {
  ref::MlpForward(RefShape(p), p.T, v["x"], RefWeights(v), v["gate_add"], v["up_add"], v["out"]);
}

void OracleBackward(const Mlp& p, Values& v) {
  ref::MlpBackward(
      RefShape(p), p.T, v["x"], RefWeights(v), v["gate_add"], v["up_add"], v["dout"], v["dx"],
      v["dgate_add"], v["dup_add"],
      {v["dgate"], v["dup"], v["ddown"], v["dgate_bias"], v["dup_bias"], v["ddown_bias"]});
}

MlpInputs Inputs(Bound& b) {
  return {b["x"],
          {b["gate"], b["up"], b["down"], b["gate_bias"], b["up_bias"], b["down_bias"]},
          b["gate_add"],
          b["up_add"]};
}

MlpOptions Options(const Mlp& p) { return {p.act, p.gm, p.dm}; }

Status Forward(const Mlp& p, Bound& b) { return MlpForward(Inputs(b), b["out"], Options(p)); }

Status Backward(const Mlp& p, Bound& b) {
  return MlpBackward(
      Inputs(b), b["dout"],
      {b["dx"],
       b["dgate_add"],
       b["dup_add"],
       {b["dgate"], b["dup"], b["ddown"], b["dgate_bias"], b["dup_bias"], b["ddown_bias"]}},
      Options(p));
}

constexpr Act kActs[] = {Act::kSilu, Act::kGeluErf, Act::kGeluTanh, Act::kRelu, Act::kRelu2};

// label, T, d, F, gated, act, weight dtype, bias, adds, gate and down multipliers, pad
std::vector<Case<Mlp>> Cases() {
  constexpr DType kBF16 = DType::kBF16, kF16 = DType::kF16, kF32 = DType::kF32;
  const std::vector<Mlp> forward = {
      // granite-4.0-h-350m shared_mlp (d 768, shared_intermediate_size 2048), SwiGLU
      {"granite-4.0-h-350m decode", 1, 768, 2048},
      {"granite-4.0-h-350m decode bf16", 1, 768, 2048, true, Act::kSilu, kBF16},
      {"granite-4.0-h-350m batch 4 bf16", 4, 768, 2048, true, Act::kSilu, kBF16},
      // granite-4.0-h-1b shared_mlp (d 1536, 4096)
      {"granite-4.0-h-1b decode bf16", 1, 1536, 4096, true, Act::kSilu, kBF16},
      {"granite-4.0-h-1b prefill", 10, 1536, 4096},
      // falcon-h1-0.5b: mlp_multipliers (gate, down), padded rows
      {"falcon-h1 muP multipliers", 3, 1024, 2048, true, Act::kSilu, kF32, false, false, 0.8125f,
       0.5625f, 3},
      // bamba / falcon-h1 with mlp_bias
      {"bamba mlp_bias prefill", 24, 768, 1536, true, Act::kSilu, kBF16, true},
      // nemotron-h: ungated up -> relu2 -> down
      {"nemotron-h relu2 decode", 1, 1024, 3072, false, Act::kRelu2, kBF16},
      {"nemotron-h relu2 prefill bias", 17, 256, 768, false, Act::kRelu2, kF32, true},
      // zamba2: gelu (erf) with the LoRA adapters' output added before the activation
      {"zamba2 gelu adapters", 5, 768, 2048, true, Act::kGeluErf, kF32, true, true, 1.0f, 1.0f, 2},
      {"zamba2 gelu adapters decode", 1, 512, 1024, true, Act::kGeluErf, kBF16, false, true},
      // the other activations, odd sizes (SIMD tails, pieces that are not whole granules)
      {"gelu tanh odd", 13, 77, 131, true, Act::kGeluTanh, kF16, true, true, 1.5f, 0.75f, 1},
      {"relu odd", 2, 33, 45, true, Act::kRelu, kF32, true},
      {"ungated silu odd", 9, 41, 19, false, Act::kSilu, kBF16, false, true},
      {"ungated gelu", 7, 64, 200, false, Act::kGeluErf},
      {"ungated gelu tanh", 3, 64, 200, false, Act::kGeluTanh, kF32, true},
      {"ungated relu", 11, 50, 90, false, Act::kRelu, kF16, true, true},
      // one element: products only (a bias or an add could cancel to a value whose relative
      // error is not that of the op); the sums are tested at the widths above
      {"tiny", 1, 1, 1},
      // prefill longer than one chunk of rows (MlpChunkRows = 2^20 / 4096 = 256 rows)
      {"prefill over two chunks", 300, 32, 4096, true, Act::kSilu, kBF16, true},
  };
  // The old every-target tests' shapes, every activation gated and ungated.
  std::vector<Mlp> targets, grad_targets, fd;
  for (Act act : kActs) {
    for (bool gated : {true, false}) {
      for (int64_t T : {1, 9})
        targets.push_back({"targets", T, 37, 53, gated, act, kBF16, true, true});
      grad_targets.push_back({"targets", 5, 29, 43, gated, act, kBF16, true, true, 1.0f, 0.75f});
      fd.push_back({"fd", 3, 6, 5, gated, act, kF32, true, true, gated ? 1.25f : 1.0f, 0.75f});
    }
  }
  const std::vector<Mlp> backward = {
      {"granite-4.0-h-350m train", 8, 768, 2048, true, Act::kSilu},
      {"granite-4.0-h-350m train bf16 weights", 3, 768, 2048, true, Act::kSilu, kBF16},
      {"falcon-h1 muP bias", 6, 256, 512, true, Act::kSilu, kF32, true, false, 0.8125f, 0.5625f, 2},
      {"nemotron-h relu2", 10, 128, 384, false, Act::kRelu2, kF32, true},
      {"zamba2 gelu adapters", 5, 96, 192, true, Act::kGeluErf, kF16, true, true, 1.0f, 1.0f, 1},
      {"gelu tanh odd", 7, 37, 59, true, Act::kGeluTanh, kF32, true, true, 1.25f, 0.5f},
      {"relu odd", 4, 21, 33, true, Act::kRelu, kBF16, false, true},
      {"ungated silu adds", 6, 40, 70, false, Act::kSilu, kF32, true, true},
      {"decode row", 1, 64, 256, true, Act::kSilu, kF32, true},
      // two chunks: weight gradients accumulated across them
      {"train over two chunks", 300, 24, 4096, true, Act::kSilu, kF32, true},
  };
  constexpr Checks kForward = {.backward = false};
  return {
      {"forward", forward, kForward},
      {"targets", targets, kForward},
      {"grad_shapes", backward},
      {"grad_targets", grad_targets},
      {"grad_small", fd, {.finite_differences = true, .grads_alone = true}},
  };
}

using Bad = BadInput<Mlp>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;

// T = 3, d = 5, F = 4, gated, every bias and add, bf16 weights.
Mlp Valid() { return {"valid", 3, 5, 4, true, Act::kSilu, DType::kBF16, true, true}; }

// The gate's tensors absent (the ungated form), its gradients too on a backward.
void Ungate(Bound& b) {
  for (const char* name : {"gate", "gate_bias", "gate_add", "dgate", "dgate_bias", "dgate_add"})
    b[name] = Tensor{};
}

std::vector<Bad> ForwardRules() {
  return {
      {"XNull", kFwd, [](Mlp&, Bound& b) { b["x"] = Tensor{}; }, {"mlp: x:", "null"}},
      {"XRank",
       kFwd,
       [](Mlp&, Bound& b) {
         b["x"].rank = 3;
         b["x"].shape[2] = 1;
         b["x"].strides[2] = 1;
       },
       {"mlp: x:", "rank 2", "given rank 3"}},
      {"XEmpty", kFwd, [](Mlp&, Bound& b) { b["x"].shape[0] = 0; }, {"mlp: x:", "T >= 1"}},
      {"XDtype",
       kFwd,
       [](Mlp&, Bound& b) { b["x"].dtype = DType::kBF16; },
       {"mlp: x:", "dtype f32", "bf16"}},
      {"XLastStride",
       kFwd,
       [](Mlp&, Bound& b) { b["x"].strides[1] = 2; },
       {"mlp: x:", "stride 1 on the last dimension"}},
      {"XRowsOverlap",
       kFwd,
       [](Mlp&, Bound& b) { b["x"].strides[0] = 2; },
       {"mlp: x:", "row stride >= 5", "row stride 2"}},
      {"UpNull", kFwd, [](Mlp&, Bound& b) { b["up"] = Tensor{}; }, {"mlp: weights.up:", "null"}},
      {"UpDtype",
       kFwd,
       [](Mlp&, Bound& b) { b["up"].dtype = DType::kI32; },
       {"mlp: weights.up:", "dtype f32 or bf16 or f16", "i32"}},
      {"UpQuantizedRows",  // d = 5 is no whole number of q8_0's 32-element blocks
       kFwd,
       [](Mlp&, Bound& b) { b["up"].dtype = DType::kQ8_0; },
       {"mlp: weights.up:", "rows of whole q8_0 blocks (32 elements)", "5 columns"}},
      {"UpWidth",
       kFwd,
       [](Mlp&, Bound& b) { b["up"].shape[1] = 6; },
       {"mlp: weights.up:", "(F, d) = (4, 5)", "(4, 6)"}},
      {"UpNotContiguous",
       kFwd,
       [](Mlp&, Bound& b) { b["up"].strides[0] = 7; },
       {"mlp: weights.up:", "contiguous"}},
      {"GateShape",
       kFwd,
       [](Mlp&, Bound& b) { b["gate"].shape[0] = 3; },
       {"mlp: weights.gate:", "(F, d) = (4, 5)", "(3, 5)"}},
      {"DownNull",
       kFwd,
       [](Mlp&, Bound& b) { b["down"] = Tensor{}; },
       {"mlp: weights.down:", "null"}},
      {"DownShape",
       kFwd,
       [](Mlp&, Bound& b) {
         b["down"] = Tensor::Contiguous(b["down"].data, DType::kBF16, {4, 5});
       },
       {"mlp: weights.down:", "(d, F) = (5, 4)", "(4, 5)"}},
      {"GateBiasWithoutGate",
       kFwd,
       [](Mlp&, Bound& b) { b["gate"] = b["gate_add"] = Tensor{}; },
       {"mlp: weights.gate_bias:", "gate is absent"}},
      {"UpBiasDtype",
       kFwd,
       [](Mlp&, Bound& b) { b["up_bias"].dtype = DType::kBF16; },
       {"mlp: weights.up_bias:", "dtype f32"}},
      {"DownBiasShape",
       kFwd,
       [](Mlp&, Bound& b) { b["down_bias"].shape[0] = 4; },
       {"mlp: weights.down_bias:", "(d) = (5,)", "(4,)"}},
      {"GateAddWithoutGate",
       kFwd,
       [](Mlp&, Bound& b) { b["gate"] = b["gate_bias"] = Tensor{}; },
       {"mlp: gate_add:", "weights.gate is absent"}},
      {"GateAddShape",
       kFwd,
       [](Mlp&, Bound& b) { b["gate_add"].shape[1] = 5; },
       {"mlp: gate_add:", "(T, F) = (3, 4)", "(3, 5)"}},
      {"UpAddDtype",
       kFwd,
       [](Mlp&, Bound& b) { b["up_add"].dtype = DType::kBF16; },
       {"mlp: up_add:", "dtype f32"}},
      {"Activation",
       kFwd,
       [](Mlp& p, Bound&) { p.act = static_cast<Act>(9); },
       {"mlp: options.activation:", "an MlpActivation value", "9"}},
      {"GateMultiplierNan",
       kFwd,
       [](Mlp& p, Bound&) { p.gm = std::nanf(""); },
       {"mlp: options.gate_multiplier:", "finite", "nan"}},
      {"DownMultiplierInf",
       kFwd,
       [](Mlp& p, Bound&) { p.dm = INFINITY; },
       {"mlp: options.down_multiplier:", "finite", "inf"}},
      {"GateMultiplierWithoutGate",
       kFwd,
       [](Mlp& p, Bound& b) {
         Ungate(b);
         p.gm = 2.0f;
       },
       {"mlp: options.gate_multiplier:", "no gate", "2"}},
      {"OutNull", kFwd, [](Mlp&, Bound& b) { b["out"] = Tensor{}; }, {"mlp: out:", "null"}},
      {"OutShape",
       kFwd,
       [](Mlp&, Bound& b) { b["out"].shape[1] = 4; },
       {"mlp: out:", "(T, d) = (3, 5)", "(3, 4)"}},
      {"OutOverlapsX",
       kFwd,
       [](Mlp&, Bound& b) { b["x"] = b["out"]; },  // out's memory read as x: refused unwritten
       {"mlp: out:", "not overlapping x"}},
      {"OneTensorOnCuda",
       kFwd,
       [](Mlp&, Bound& b) { b["down"].device = Device::kCuda; },
       {"mlp: weights.down:", "a CPU tensor", "a CUDA tensor"}},
      {"AllOnCudaIsUnsupported",
       kFwd,
       [](Mlp&, Bound& b) {
         for (const char* name : {"x", "gate", "up", "down", "gate_bias", "up_bias", "down_bias",
                                  "gate_add", "up_add", "out"})
           b[name].device = Device::kCuda;
       },
       {"CPU only"},
       StatusCode::kUnsupported},
  };
}

std::vector<Bad> BackwardRules() {
  return {
      {"DoutShape",
       kBwd,
       [](Mlp&, Bound& b) { b["dout"].shape[0] = 4; },
       {"mlp: dout:", "(T, d) = (3, 5)", "(4, 5)"}},
      {"DxDtype",
       kBwd,
       [](Mlp&, Bound& b) { b["dx"].dtype = DType::kBF16; },
       {"mlp: grads.dx:", "dtype f32"}},
      {"DgateAddWithoutGateAdd",
       kBwd,
       [](Mlp&, Bound& b) { b["gate_add"] = Tensor{}; },
       {"mlp: grads.dgate_add:", "gate_add is absent"}},
      {"DupAddShape",
       kBwd,
       [](Mlp&, Bound& b) { b["dup_add"].shape[1] = 3; },
       {"mlp: grads.dup_add:", "(T, F) = (3, 4)", "(3, 3)"}},
      {"DgateWithoutGate",
       kBwd,
       [](Mlp&, Bound& b) {
         const Tensor dgate = b["dgate"];
         Ungate(b);
         b["dgate"] = dgate;
       },
       {"mlp: grads.weights.dgate:", "gate is absent"}},
      {"DupDtype",
       kBwd,
       [](Mlp&, Bound& b) { b["dup"].dtype = DType::kBF16; },  // bf16 weights, f32 gradients
       {"mlp: grads.weights.dup:", "dtype f32", "bf16"}},
      {"DdownShape",
       kBwd,
       [](Mlp&, Bound& b) {
         b["ddown"].shape = {4, 5};
       },
       {"mlp: grads.weights.ddown:", "(as down) = (5, 4)", "(4, 5)"}},
      {"DdownBiasWithoutBias",
       kBwd,
       [](Mlp&, Bound& b) { b["down_bias"] = Tensor{}; },
       {"mlp: grads.weights.ddown_bias:", "down_bias is absent"}},
      {"DxOverlapsDout",
       kBwd,
       [](Mlp&, Bound& b) { b["dx"] = b["dout"]; },
       {"mlp: grads.dx:", "not overlapping dout"}},
      {"DupOverlapsDgate",
       kBwd,
       [](Mlp&, Bound& b) { b["dup"] = b["dgate"]; },
       {"mlp: grads.weights.dup:", "not overlapping grads.weights.dgate"}},
  };
}

OpSpec<Mlp> MlpSpec() {
  return {.name = "mlp",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Valid(),
          .bad_inputs = Concat<Mlp>({ForwardRules(), BackwardRules()}),
          .cuda = false};
}

}  // namespace

SSMKIT_HARNESS_OP(MlpSpec);

}  // namespace ssmkit::testing::harness

// MlpForward / MlpBackward against the fp64 oracle at the shapes of the hybrid models that use
// them (each case labelled with its model), f32 / bf16 / f16 weights, gated and ungated, every
// activation, biases, additive inputs, muP multipliers, padded rows, decode and prefill (and
// prefill longer than one chunk); the oracle's and the fast path's gradients against fp64
// central finite differences; every compiled SIMD target; determinism; NaN propagation; the
// fused gate/up view. Outputs are NaN-poisoned before every call.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mlp_fixture.hpp"
#include "ssmkit/mlp.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

using Act = MlpActivation;

struct MlpCase {
  const char* label;  // the model (and use) the shape comes from
  int64_t T, d, F;
  bool gated = true;
  Act act = Act::kSilu;
  DType wdtype = DType::kF32;
  bool bias = false;
  bool adds = false;  // gate_add / up_add (Zamba2's adapters)
  float gm = 1.0f, dm = 1.0f;
  int64_t pad = 0;  // extra elements per row of x, out and the adds

  std::string Describe() const {
    return std::string(label) + ": T=" + std::to_string(T) + " d=" + std::to_string(d) +
           " F=" + std::to_string(F) + (gated ? " gated " : " ungated ") + ActName(act) +
           " w=" + DTypeName(wdtype) + (bias ? " bias" : "") + (adds ? " adds" : "") +
           " gm=" + std::to_string(gm) + " dm=" + std::to_string(dm) +
           " pad=" + std::to_string(pad);
  }
};

// One problem: the kernel's tensors and the oracle's values.
struct MlpProblem {
  MlpCase c;
  WeightSet w;
  PaddedTensor x, gate_add, up_add;
  std::vector<double> x_d, gate_add_d, up_add_d;

  MlpProblem(const MlpCase& mc, Rng& rng)
      : c(mc),
        w(rng, mc.d, mc.F, mc.gated, mc.bias, mc.wdtype),
        x({mc.T, mc.d}, DType::kF32, mc.pad) {
    x_d = x.Fill(rng.NormalVec(c.T * c.d));
    if (c.adds) {
      up_add = PaddedTensor({c.T, c.F}, DType::kF32, c.pad);
      up_add_d = up_add.Fill(rng.NormalVec(c.T * c.F, 0.3));
      if (c.gated) {
        gate_add = PaddedTensor({c.T, c.F}, DType::kF32, c.pad);
        gate_add_d = gate_add.Fill(rng.NormalVec(c.T * c.F, 0.3));
      }
    }
  }
  MlpInputs Inputs() {
    MlpInputs in;
    in.x = x.view();
    in.weights = w.Views();
    if (c.adds) {
      in.up_add = up_add.view();
      if (c.gated) in.gate_add = gate_add.view();
    }
    return in;
  }
  MlpOptions Options() const { return {c.act, c.gm, c.dm}; }
  ref::MlpShape Shape() const { return {c.d, c.F, c.gated, c.act, c.gm, c.dm}; }
  const double* RefGateAdd() const { return gate_add_d.empty() ? nullptr : gate_add_d.data(); }
  const double* RefUpAdd() const { return up_add_d.empty() ? nullptr : up_add_d.data(); }
  std::vector<double> RefForward() const {
    std::vector<double> out(c.T * c.d);
    ref::MlpForward(Shape(), c.T, x_d.data(), w.Ref(), RefGateAdd(), RefUpAdd(), out.data());
    return out;
  }
};

constexpr double kTolerance = 1e-5;  // f32 accumulation, every weight dtype (exact widening)

// Runs the forward; returns ||out - ref|| / ||ref||, and the output bytes through `bits`.
double ForwardError(const MlpCase& c, uint64_t seed, std::vector<uint8_t>* bits = nullptr) {
  Rng rng(seed);
  MlpProblem prob(c, rng);
  PaddedTensor out({c.T, c.d}, DType::kF32, c.pad);
  out.Poison();
  const Status s = MlpForward(prob.Inputs(), out.view(), prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(out.PaddingUntouched()) << "wrote between rows";
  if (bits != nullptr) *bits = out.Bytes();
  return RelativeError(out.ToDouble(), prob.RefForward());
}

// The forward cases: decode (T = 1) and prefill at the hybrid models' widths, and odd sizes.
const MlpCase kForwardCases[] = {
    // granite-4.0-h-350m shared_mlp (d 768, shared_intermediate_size 2048), SwiGLU
    {"granite-4.0-h-350m decode", 1, 768, 2048},
    {"granite-4.0-h-350m decode bf16", 1, 768, 2048, true, Act::kSilu, DType::kBF16},
    {"granite-4.0-h-350m batch 4 bf16", 4, 768, 2048, true, Act::kSilu, DType::kBF16},
    // granite-4.0-h-1b shared_mlp (d 1536, 4096)
    {"granite-4.0-h-1b decode bf16", 1, 1536, 4096, true, Act::kSilu, DType::kBF16},
    {"granite-4.0-h-1b prefill", 10, 1536, 4096},
    // falcon-h1-0.5b: mlp_multipliers (gate, down), padded rows
    {"falcon-h1 muP multipliers", 3, 1024, 2048, true, Act::kSilu, DType::kF32, false, false,
     0.8125f, 0.5625f, 3},
    // bamba / falcon-h1 with mlp_bias
    {"bamba mlp_bias prefill", 24, 768, 1536, true, Act::kSilu, DType::kBF16, true},
    // nemotron-h: ungated up -> relu2 -> down
    {"nemotron-h relu2 decode", 1, 1024, 3072, false, Act::kRelu2, DType::kBF16},
    {"nemotron-h relu2 prefill bias", 17, 256, 768, false, Act::kRelu2, DType::kF32, true},
    // zamba2: gelu (erf) with the LoRA adapters' output added before the activation
    {"zamba2 gelu adapters", 5, 768, 2048, true, Act::kGeluErf, DType::kF32, true, true, 1.0f, 1.0f,
     2},
    {"zamba2 gelu adapters decode", 1, 512, 1024, true, Act::kGeluErf, DType::kBF16, false, true},
    // the other activations, odd sizes (SIMD tails, pieces that are not whole granules)
    {"gelu tanh odd", 13, 77, 131, true, Act::kGeluTanh, DType::kF16, true, true, 1.5f, 0.75f, 1},
    {"relu odd", 2, 33, 45, true, Act::kRelu, DType::kF32, true},
    {"ungated silu odd", 9, 41, 19, false, Act::kSilu, DType::kBF16, false, true},
    {"ungated gelu", 7, 64, 200, false, Act::kGeluErf},
    {"ungated gelu tanh", 3, 64, 200, false, Act::kGeluTanh, DType::kF32, true},
    {"ungated relu", 11, 50, 90, false, Act::kRelu, DType::kF16, true, true},
    // one element: products only (a bias or an add could cancel to a value whose relative
    // error is not that of the op); the sums are tested at the widths above
    {"tiny", 1, 1, 1},
    // prefill longer than one chunk of rows (MlpChunkRows = 2^20 / 4096 = 256 rows)
    {"prefill over two chunks", 300, 32, 4096, true, Act::kSilu, DType::kBF16, true},
};

TEST(MlpForward, MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  double worst = 0.0;
  for (const MlpCase& c : kForwardCases) {
    SCOPED_TRACE(c.Describe());
    const double err = ForwardError(c, seed);
    EXPECT_LE(err, kTolerance);
    worst = std::max(worst, err);
  }
  std::printf("  worst relative error, forward: %.3g\n", worst);
}

TEST(MlpForward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    for (Act act : {Act::kSilu, Act::kGeluErf, Act::kGeluTanh, Act::kRelu, Act::kRelu2}) {
      for (bool gated : {true, false}) {
        for (int64_t T : {1, 9}) {
          const MlpCase c{"targets", T, 37, 53, gated, act, DType::kBF16, true, true};
          SCOPED_TRACE(c.Describe());
          EXPECT_LE(ForwardError(c, seed + T), kTolerance);
        }
      }
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(MlpForward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const MlpCase& c : {MlpCase{"decode", 1, 512, 1536, true, Act::kSilu, DType::kBF16},
                           MlpCase{"prefill", 40, 256, 1024, true, Act::kGeluErf}}) {
    std::vector<uint8_t> a, b;
    ForwardError(c, seed, &a);
    ForwardError(c, seed, &b);
    EXPECT_EQ(a, b) << c.Describe();
  }
}

// A NaN in one row of x makes that row of out NaN (for every activation) and no other.
TEST(MlpForward, NanStaysInItsRow) {
  for (Act act : {Act::kSilu, Act::kGeluErf, Act::kGeluTanh, Act::kRelu, Act::kRelu2}) {
    for (bool gated : {true, false}) {
      for (int64_t T : {3, 12}) {
        Rng rng(FreshSeed());
        MlpProblem prob({"nan", T, 24, 40, gated, act}, rng);
        Tensor x = prob.x.view();
        static_cast<float*>(x.data)[1 * x.strides[0] + 5] = std::nanf("");
        HostTensor out({T, 24}, DType::kF32);
        out.Poison();
        ASSERT_TRUE(MlpForward(prob.Inputs(), out.view(), prob.Options()).ok());
        const std::vector<double> o = out.ToDouble();
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < 24; ++i) {
            EXPECT_EQ(std::isnan(o[t * 24 + i]), t == 1)
                << ActName(act) << " gated=" << gated << " T=" << T << " t=" << t << " i=" << i;
          }
        }
      }
    }
  }
}

// GraniteMoeHybrid's shared_mlp.input_linear (2F, d), chunked [gate, up]: two views, no copy.
TEST(MlpForward, FusedGateUpViews) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t T = 5, d = 96, F = 160;
  MlpProblem prob({"fused", T, d, F, true, Act::kSilu, DType::kBF16, true}, rng);
  // The fused matrix holds gate then up; its halves replace the separate tensors.
  HostTensor fused({2 * F, d}, DType::kBF16);
  std::vector<double> both = prob.w.gate_d;
  both.insert(both.end(), prob.w.up_d.begin(), prob.w.up_d.end());
  fused.Fill(both);
  HostTensor fused_bias({2 * F}, DType::kF32);
  std::vector<double> bias = prob.w.gate_bias_d;
  bias.insert(bias.end(), prob.w.up_bias_d.begin(), prob.w.up_bias_d.end());
  fused_bias.Fill(bias);
  MlpInputs in = prob.Inputs();
  ASSERT_TRUE(SplitGateUp(fused.view(), &in.weights.gate, &in.weights.up).ok());
  ASSERT_TRUE(SplitGateUp(fused_bias.view(), &in.weights.gate_bias, &in.weights.up_bias).ok());
  EXPECT_EQ(in.weights.gate.data, fused.data());
  HostTensor out({T, d}, DType::kF32);
  out.Poison();
  ASSERT_TRUE(MlpForward(in, out.view(), prob.Options()).ok());
  EXPECT_LE(RelativeError(out.ToDouble(), prob.RefForward()), kTolerance);
}

TEST(MlpActivationNames, TransformersNames) {
  const std::pair<const char*, Act> names[] = {{"silu", Act::kSilu},
                                               {"swish", Act::kSilu},
                                               {"gelu", Act::kGeluErf},
                                               {"gelu_new", Act::kGeluTanh},
                                               {"gelu_pytorch_tanh", Act::kGeluTanh},
                                               {"relu", Act::kRelu},
                                               {"relu2", Act::kRelu2}};
  for (const auto& [name, act] : names) {
    Act got = Act::kRelu;
    ASSERT_TRUE(MlpActivationFromName(name, &got).ok()) << name;
    EXPECT_EQ(got, act) << name;
  }
  Act got;
  const Status s = MlpActivationFromName("quick_gelu", &got);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("quick_gelu"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("relu2"), std::string::npos) << s.message();
}

// ------------------------------------------------------------------ backward

// The fast backward's outputs, NaN-poisoned before the call.
struct FastGrads {
  PaddedTensor dx, dgate_add, dup_add;
  WeightGrads weights;
  FastGrads(MlpProblem& prob) : dx({prob.c.T, prob.c.d}, DType::kF32, prob.c.pad), weights(prob.w) {
    dx.Poison();
    if (prob.c.adds) {
      dup_add = PaddedTensor({prob.c.T, prob.c.F}, DType::kF32, prob.c.pad);
      dup_add.Poison();
      if (prob.c.gated) {
        dgate_add = PaddedTensor({prob.c.T, prob.c.F}, DType::kF32, prob.c.pad);
        dgate_add.Poison();
      }
    }
  }
  MlpGrads Views(const MlpCase& c) {
    MlpGrads g;
    g.dx = dx.view();
    if (c.adds) {
      g.dup_add = dup_add.view();
      if (c.gated) g.dgate_add = dgate_add.view();
    }
    g.weights = weights.Views();
    return g;
  }
};

struct RefGrads {
  std::vector<double> dx, dgate_add, dup_add;
  RefWeightGrads weights;
  RefGrads(const MlpCase& c, const WeightSet& w)
      : dx(c.T * c.d),
        dgate_add(c.adds && c.gated ? c.T * c.F : 0),
        dup_add(c.adds ? c.T * c.F : 0),
        weights(w) {}
};

void RunRefBackward(const MlpProblem& prob, const std::vector<double>& dout, RefGrads& g) {
  ref::MlpBackward(prob.Shape(), prob.c.T, prob.x_d.data(), prob.w.Ref(), prob.RefGateAdd(),
                   prob.RefUpAdd(), dout.data(), g.dx.data(), RefWeightGrads::Ptr(g.dgate_add),
                   RefWeightGrads::Ptr(g.dup_add), g.weights.Views());
}

// Runs the fast backward against the oracle's; returns the worst relative error and names it.
double BackwardError(const MlpCase& c, uint64_t seed, std::string* which,
                     std::vector<uint8_t>* bits = nullptr) {
  Rng rng(seed);
  MlpProblem prob(c, rng);
  PaddedTensor dout({c.T, c.d}, DType::kF32, c.pad);
  const std::vector<double> dout_d = dout.Fill(rng.NormalVec(c.T * c.d));
  FastGrads fast(prob);
  const Status s = MlpBackward(prob.Inputs(), dout.view(), fast.Views(c), prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(fast.dx.PaddingUntouched());
  RefGrads want(c, prob.w);
  RunRefBackward(prob, dout_d, want);
  double worst = WorstGradError(fast.weights, want.weights, which);
  const std::pair<PaddedTensor*, std::vector<double>*> acts[] = {
      {&fast.dx, &want.dx}, {&fast.dgate_add, &want.dgate_add}, {&fast.dup_add, &want.dup_add}};
  const char* names[] = {"dx", "dgate_add", "dup_add"};
  for (int i = 0; i < 3; ++i) {
    if (acts[i].second->empty()) continue;
    const double err = RelativeError(acts[i].first->ToDouble(), *acts[i].second);
    if (!(err <= worst)) {
      worst = err;
      *which = names[i];
    }
  }
  if (bits != nullptr) {
    *bits = fast.dx.Bytes();
    for (HostTensor* t : fast.weights.All())
      bits->insert(bits->end(), t->bytes().begin(), t->bytes().end());
  }
  return worst;
}

const MlpCase kBackwardCases[] = {
    {"granite-4.0-h-350m train", 8, 768, 2048, true, Act::kSilu},
    {"granite-4.0-h-350m train bf16 weights", 3, 768, 2048, true, Act::kSilu, DType::kBF16},
    {"falcon-h1 muP bias", 6, 256, 512, true, Act::kSilu, DType::kF32, true, false, 0.8125f,
     0.5625f, 2},
    {"nemotron-h relu2", 10, 128, 384, false, Act::kRelu2, DType::kF32, true},
    {"zamba2 gelu adapters", 5, 96, 192, true, Act::kGeluErf, DType::kF16, true, true, 1.0f, 1.0f,
     1},
    {"gelu tanh odd", 7, 37, 59, true, Act::kGeluTanh, DType::kF32, true, true, 1.25f, 0.5f},
    {"relu odd", 4, 21, 33, true, Act::kRelu, DType::kBF16, false, true},
    {"ungated silu adds", 6, 40, 70, false, Act::kSilu, DType::kF32, true, true},
    {"decode row", 1, 64, 256, true, Act::kSilu, DType::kF32, true},
    // two chunks: weight gradients accumulated across them
    {"train over two chunks", 300, 24, 4096, true, Act::kSilu, DType::kF32, true},
};

TEST(MlpBackward, MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  double worst = 0.0;
  for (const MlpCase& c : kBackwardCases) {
    SCOPED_TRACE(c.Describe());
    std::string which;
    const double err = BackwardError(c, seed, &which);
    EXPECT_LE(err, 2 * kTolerance) << which;
    worst = std::max(worst, err);
  }
  std::printf("  worst relative error, backward: %.3g\n", worst);
}

TEST(MlpBackward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    for (Act act : {Act::kSilu, Act::kGeluErf, Act::kGeluTanh, Act::kRelu, Act::kRelu2}) {
      for (bool gated : {true, false}) {
        const MlpCase c{"targets", 5, 29, 43, gated, act, DType::kBF16, true, true, 1.0f, 0.75f};
        SCOPED_TRACE(c.Describe());
        std::string which;
        EXPECT_LE(BackwardError(c, seed, &which), 2 * kTolerance) << which;
      }
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(MlpBackward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const MlpCase c{"prefill", 24, 256, 1024, true, Act::kSilu, DType::kF32, true};
  std::string which;
  std::vector<uint8_t> a, b;
  BackwardError(c, seed, &which, &a);
  BackwardError(c, seed, &which, &b);
  EXPECT_EQ(a, b);
}

// Gradients against central finite differences of the fp64 forward, for every input of every
// form: the oracle's (tight) and the fast path's (within f32 rounding).
TEST(MlpBackward, FiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int cases = 0;
  for (Act act : {Act::kSilu, Act::kGeluErf, Act::kGeluTanh, Act::kRelu, Act::kRelu2}) {
    for (bool gated : {true, false}) {
      const MlpCase c{"fd", 3, 6, 5, gated, act, DType::kF32, true, true, gated ? 1.25f : 1.0f,
                      0.75f};
      SCOPED_TRACE(c.Describe());
      Rng rng(seed + cases++);
      MlpProblem prob(c, rng);
      HostTensor dout({c.T, c.d}, DType::kF32);
      const std::vector<double> probe = dout.Fill(rng.NormalVec(c.T * c.d));
      // loss = sum(out * probe) over the fp64 forward of (possibly perturbed) values.
      std::vector<double> x = prob.x_d, gate = prob.w.gate_d, up = prob.w.up_d,
                          down = prob.w.down_d, gb = prob.w.gate_bias_d, ub = prob.w.up_bias_d,
                          db = prob.w.down_bias_d, ga = prob.gate_add_d, ua = prob.up_add_d;
      auto loss = [&] {
        ref::MlpWeights w{gated ? gate.data() : nullptr, up.data(), down.data(),
                          gated ? gb.data() : nullptr,   ub.data(), db.data()};
        std::vector<double> out(c.T * c.d);
        ref::MlpForward(prob.Shape(), c.T, x.data(), w, gated ? ga.data() : nullptr, ua.data(),
                        out.data());
        double sum = 0.0;
        for (size_t i = 0; i < out.size(); ++i) sum += out[i] * probe[i];
        return sum;
      };
      RefGrads want(c, prob.w);
      RunRefBackward(prob, probe, want);
      FastGrads fast(prob);
      ASSERT_TRUE(MlpBackward(prob.Inputs(), dout.view(), fast.Views(c), prob.Options()).ok());
      struct Check {
        const char* name;
        std::vector<double>* values;
        const std::vector<double>* oracle;
        std::vector<double> fast;
      };
      std::vector<Check> checks = {
          {"x", &x, &want.dx, fast.dx.ToDouble()},
          {"up", &up, &want.weights.dup, fast.weights.dup.ToDouble()},
          {"down", &down, &want.weights.ddown, fast.weights.ddown.ToDouble()},
          {"up_bias", &ub, &want.weights.dup_bias, fast.weights.dup_bias.ToDouble()},
          {"down_bias", &db, &want.weights.ddown_bias, fast.weights.ddown_bias.ToDouble()},
          {"up_add", &ua, &want.dup_add, fast.dup_add.ToDouble()}};
      if (gated) {
        checks.push_back({"gate", &gate, &want.weights.dgate, fast.weights.dgate.ToDouble()});
        checks.push_back(
            {"gate_bias", &gb, &want.weights.dgate_bias, fast.weights.dgate_bias.ToDouble()});
        checks.push_back({"gate_add", &ga, &want.dgate_add, fast.dgate_add.ToDouble()});
      }
      for (Check& ch : checks) {
        std::vector<double> fd(ch.values->size());
        for (size_t i = 0; i < fd.size(); ++i) fd[i] = CentralDifference(*ch.values, i, 1e-6, loss);
        EXPECT_LE(RelativeError(*ch.oracle, fd), 1e-6) << ch.name << " (oracle)";
        EXPECT_LE(RelativeError(ch.fast, fd), 1e-4) << ch.name << " (fast)";
      }
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

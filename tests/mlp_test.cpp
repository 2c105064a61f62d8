// What the op harness's case table (tests/harness/cases/mlp.cpp, every result against the
// oracle) cannot say about MlpForward / MlpBackward: the same bits across runs, a NaN in one row
// of x staying in that row of out, gate and up as the halves of one fused matrix (SplitGateUp),
// the adapters' gradients as column blocks of one buffer, and the activation names.
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

// The forward's output bytes (NaN-poisoned before the call).
std::vector<uint8_t> ForwardBits(const MlpCase& c, uint64_t seed) {
  Rng rng(seed);
  MlpProblem prob(c, rng);
  PaddedTensor out({c.T, c.d}, DType::kF32, c.pad);
  out.Poison();
  const Status s = MlpForward(prob.Inputs(), out.view(), prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  return out.Bytes();
}

TEST(MlpForward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const MlpCase& c : {MlpCase{"decode", 1, 512, 1536, true, Act::kSilu, DType::kBF16},
                           MlpCase{"prefill", 40, 256, 1024, true, Act::kGeluErf}}) {
    EXPECT_EQ(ForwardBits(c, seed), ForwardBits(c, seed)) << c.Describe();
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

// The backward's gradient bytes (dx, then the weights'), against dout drawn from `seed`.
std::vector<uint8_t> BackwardBits(const MlpCase& c, uint64_t seed) {
  Rng rng(seed);
  MlpProblem prob(c, rng);
  PaddedTensor dout({c.T, c.d}, DType::kF32, c.pad);
  dout.Fill(rng.NormalVec(c.T * c.d));
  FastGrads fast(prob);
  const Status s = MlpBackward(prob.Inputs(), dout.view(), fast.Views(c), prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<uint8_t> bits = fast.dx.Bytes();
  for (HostTensor* t : fast.weights.All())
    bits.insert(bits.end(), t->bytes().begin(), t->bytes().end());
  return bits;
}

TEST(MlpBackward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const MlpCase c{"prefill", 24, 256, 1024, true, Act::kSilu, DType::kF32, true};
  EXPECT_EQ(BackwardBits(c, seed), BackwardBits(c, seed));
}

// Column blocks of one (T, 2F) buffer (Zamba2's adapter gradient): disjoint halves are fine,
// blocks sharing a column are not.
TEST(MlpBackward, AdapterGradientsAsColumnBlocksOfOneBuffer) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const MlpCase c{"column blocks", 3, 5, 4, true, Act::kSilu, DType::kBF16, true, true};
  MlpProblem prob(c, rng);
  HostTensor dout({c.T, c.d}, DType::kF32);
  dout.Fill(rng.NormalVec(c.T * c.d));
  FastGrads fast(prob);
  HostTensor fused({c.T, 2 * c.F}, DType::kF32);
  auto columns = [&](int64_t first) {
    Tensor v = fused.view();
    v.data = static_cast<float*>(fused.data()) + first;
    v.shape[1] = c.F;
    return v;
  };
  MlpGrads grads = fast.Views(c);
  grads.dgate_add = columns(0);
  grads.dup_add = columns(c.F);
  EXPECT_TRUE(MlpBackward(prob.Inputs(), dout.view(), grads, prob.Options()).ok());
  grads.dup_add = columns(c.F - 1);
  const Status s = MlpBackward(prob.Inputs(), dout.view(), grads, prob.Options());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mlp: grads.dup_add: expected memory not overlapping "
                             "grads.dgate_add"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace ssmkit::testing

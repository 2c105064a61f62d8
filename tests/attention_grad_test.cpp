// Attention backward: the fp64 oracle's analytic gradients against central finite differences
// of its forward; the fast backward against the oracle over a case table (GQA, windows, left
// padding with empty rows, L < S, odd and unequal head dims, f32 and bf16) and against finite
// differences directly; every SIMD target; the same bits for any thread count; gradients left
// out change nothing of the others.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ssmkit/attention.hpp"

namespace ssmkit::testing {
namespace {

const AttnCase kCases[] = {
    // label, B, L, S, H, Hk, E, Ev, window, left_pad, fused, dtype
    {"granite-4.0-h-350m train", 1, 150, 150, 12, 4, 64, 64},
    {"granite-4.0-h-350m train bf16", 1, 90, 90, 12, 4, 64, 64, 0, false, false, DType::kBF16},
    {"MHA E=128, fused qkv", 2, 80, 80, 4, 4, 128, 128, 0, false, true},
    {"GQA 8", 1, 77, 77, 8, 1, 64, 64},
    {"odd head dims 40 / 24", 2, 61, 61, 6, 2, 40, 24},
    {"sliding window 17", 1, 130, 130, 4, 2, 32, 32, 17},
    {"left-padded batch", 3, 70, 70, 4, 2, 32, 32, 0, true},
    {"chunk after a prefix (L < S) + window", 2, 30, 160, 6, 3, 64, 64, 45},
};

// Small shapes for the finite differences: every coordinate of q, k and v is perturbed.
const AttnCase kSmallCases[] = {
    {"tiny GQA 2", 2, 5, 5, 4, 2, 6, 5},
    {"tiny L < S, window 3", 1, 4, 9, 2, 1, 5, 7, 3},
    {"tiny left pad", 2, 6, 6, 3, 1, 4, 4, 0, true},
};

struct Grads {
  std::vector<double> dq, dk, dv;
};

Grads OracleGrads(const AttnProblem& prob, const std::vector<double>& dout) {
  Grads g{std::vector<double>(prob.q_d.size()), std::vector<double>(prob.k_d.size()),
          std::vector<double>(prob.v_d.size())};
  ref::AttentionBackward(prob.RefShape(), prob.q_d.data(), prob.k_d.data(), prob.v_d.data(),
                         prob.RefKvStart(), dout.data(), g.dq.data(), g.dk.data(), g.dv.data());
  return g;
}

// The fast forward then the fast backward; `which` selects the gradients asked for (q, k, v).
struct FastRun {
  View dq, dk, dv;
  Status status;
};
FastRun FastGrads(const AttnProblem& prob, View& dout, const bool which[3] = nullptr) {
  const AttnCase& c = prob.c;
  View out = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
  View lse = View::Dense({1, c.B, c.H, c.L}, DType::kF32, 3);
  FastRun run;
  run.status = AttentionForward(prob.Inputs(), out.tensor(), lse.tensor(), prob.Options());
  if (!run.status.ok()) return run;
  run.dq = PaddedOutput(c.B, c.L, c.H, c.E, c.dtype);
  run.dk = PaddedOutput(c.B, c.S, c.Hk, c.E, c.dtype);
  run.dv = PaddedOutput(c.B, c.S, c.Hk, c.Ev, c.dtype);
  const bool all[3] = {true, true, true};
  if (!which) which = all;
  AttentionGrads grads{which[0] ? run.dq.tensor() : Tensor{}, which[1] ? run.dk.tensor() : Tensor{},
                       which[2] ? run.dv.tensor() : Tensor{}};
  run.status = AttentionBackward(prob.Inputs(), out.tensor(), lse.tensor(), dout.tensor(), grads,
                                 prob.Options());
  return run;
}

View RandomDout(const AttnCase& c, Rng& rng, std::vector<double>* values) {
  View dout = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
  *values = dout.Fill(rng.NormalVec(dout.numel()));
  return dout;
}

// sum(dout * out) of the oracle's forward at the problem's current values.
double OracleLoss(const AttnProblem& prob, const std::vector<double>& dout) {
  std::vector<double> out(dout.size());
  ref::AttentionForward(prob.RefShape(), prob.q_d.data(), prob.k_d.data(), prob.v_d.data(),
                        prob.RefKvStart(), out.data(), nullptr);
  double loss = 0.0;
  for (size_t i = 0; i < out.size(); ++i) loss += out[i] * dout[i];
  return loss;
}

// Central differences of OracleLoss with respect to every element of q, k and v.
Grads FiniteDifferences(AttnProblem& prob, const std::vector<double>& dout) {
  Grads g;
  const double step = 1e-5;
  for (auto [x, d] : {std::pair{&prob.q_d, &g.dq}, {&prob.k_d, &g.dk}, {&prob.v_d, &g.dv}}) {
    d->resize(x->size());
    for (size_t i = 0; i < x->size(); ++i) {
      (*d)[i] = CentralDifference(*x, i, step, [&] { return OracleLoss(prob, dout); });
    }
  }
  return g;
}

// The oracle's analytic gradients (to 1e-7: fp64) and the fast path's (to 1e-5: f32) against
// central differences of the oracle's forward.
TEST(AttentionGrad, OracleAndFastMatchFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : kSmallCases) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    AttnProblem prob(c, rng);
    std::vector<double> dout_d;
    View dout = RandomDout(c, rng, &dout_d);
    const FastRun fast = FastGrads(prob, dout);
    ASSERT_TRUE(fast.status.ok()) << fast.status.message();
    const Grads analytic = OracleGrads(prob, dout_d);
    const Grads numeric = FiniteDifferences(prob, dout_d);
    EXPECT_LT(RelativeError(analytic.dq, numeric.dq), 1e-7);
    EXPECT_LT(RelativeError(analytic.dk, numeric.dk), 1e-7);
    EXPECT_LT(RelativeError(analytic.dv, numeric.dv), 1e-7);
    EXPECT_LT(RelativeError(fast.dq.Values(), numeric.dq), 1e-5);
    EXPECT_LT(RelativeError(fast.dk.Values(), numeric.dk), 1e-5);
    EXPECT_LT(RelativeError(fast.dv.Values(), numeric.dv), 1e-5);
  }
}

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 5e-6 : 1e-2; }

void ExpectMatchesOracle(const AttnCase& c, uint64_t seed, bool print) {
  Rng rng(seed);
  const AttnProblem prob(c, rng);
  std::vector<double> dout_d;
  View dout = RandomDout(c, rng, &dout_d);
  const std::vector<uint8_t> dq_before = PaddedOutput(c.B, c.L, c.H, c.E, c.dtype).bytes();
  const FastRun fast = FastGrads(prob, dout);
  ASSERT_TRUE(fast.status.ok()) << fast.status.message();
  EXPECT_TRUE(fast.dq.UntouchedOutside(dq_before)) << "wrote outside dq";
  const Grads want = OracleGrads(prob, dout_d);
  const double eq = RelativeError(fast.dq.Values(), RoundedTo(want.dq, c.dtype));
  const double ek = RelativeError(fast.dk.Values(), RoundedTo(want.dk, c.dtype));
  const double ev = RelativeError(fast.dv.Values(), RoundedTo(want.dv, c.dtype));
  EXPECT_LT(eq, Tolerance(c.dtype));
  EXPECT_LT(ek, Tolerance(c.dtype));
  EXPECT_LT(ev, Tolerance(c.dtype));
  if (print) {
    std::printf("  %-58s dq %.3g dk %.3g dv %.3g\n", c.Name().c_str(), eq, ek, ev);
  }
}

TEST(AttentionGrad, FastMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : kCases) {
    SCOPED_TRACE(c.Name());
    ExpectMatchesOracle(c, seed, true);
  }
}

TEST(AttentionGrad, FastMatchesOracleOnEverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    for (const AttnCase& c : {kCases[4], kCases[6], kCases[7]}) {
      SCOPED_TRACE(c.Name());
      ExpectMatchesOracle(c, seed, false);
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(AttentionGrad, BitsDoNotDependOnThreadsOrOnOtherGrads) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : {kCases[0], kCases[6]}) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    const AttnProblem prob(c, rng);
    std::vector<double> dout_d;
    View dout = RandomDout(c, rng, &dout_d);
    std::vector<FastRun> runs;
    for (int threads : {1, 2, 3}) {
      ScopedThreads scoped(threads);
      runs.push_back(FastGrads(prob, dout));
      ASSERT_TRUE(runs.back().status.ok());
    }
    for (const FastRun& r : runs) {
      EXPECT_EQ(r.dq.bytes(), runs[0].dq.bytes());
      EXPECT_EQ(r.dk.bytes(), runs[0].dk.bytes());
      EXPECT_EQ(r.dv.bytes(), runs[0].dv.bytes());
    }
    for (int only = 0; only < 3; ++only) {
      const bool which[3] = {only == 0, only == 1, only == 2};
      const FastRun one = FastGrads(prob, dout, which);
      ASSERT_TRUE(one.status.ok());
      const View& got = only == 0 ? one.dq : only == 1 ? one.dk : one.dv;
      const View& all = only == 0 ? runs[0].dq : only == 1 ? runs[0].dk : runs[0].dv;
      EXPECT_EQ(got.bytes(), all.bytes()) << "gradient " << only << " alone";
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

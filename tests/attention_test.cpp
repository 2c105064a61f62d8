// Dense causal attention forward against the fp64 oracle over a table of shapes (each labelled
// with the model it comes from): GQA ratios 1, 3, 4, 8, head dims 64 / 128 / odd / Ev != E,
// sliding windows, left padding (kv_start) with rows that see no key, chunks continuing a
// prefix (L < S), lengths that are not a multiple of the tiles, f32 and bf16, views into a
// fused qkv buffer and outputs inside wider rows; every SIMD target this CPU runs;
// determinism across thread counts.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ssmkit/attention.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

const AttnCase kCases[] = {
    // label, B, L, S, H, Hk, E, Ev, window, left_pad, fused, dtype
    {"granite-4.0-h-350m prefill", 1, 200, 200, 12, 4, 64, 64},
    {"granite-4.0-h-350m prefill bf16", 1, 130, 130, 12, 4, 64, 64, 0, false, false, DType::kBF16},
    {"granite-4.0-h-350m fused qkv", 2, 75, 75, 12, 4, 64, 64, 0, false, true},
    {"MHA (GQA 1), E=128", 2, 150, 150, 4, 4, 128, 128},
    {"GQA 8 (nemotron-h-like)", 1, 97, 97, 16, 2, 64, 64},
    {"odd head dim 40", 2, 81, 81, 6, 2, 40, 40},
    {"odd head dim 3, bf16", 1, 33, 33, 2, 1, 3, 3, 0, false, false, DType::kBF16},
    {"Ev != E (48 / 80)", 1, 70, 70, 4, 2, 48, 80},
    {"sliding window 33", 1, 180, 180, 8, 2, 64, 64, 33},
    {"window 1 (itself only)", 1, 40, 40, 2, 1, 16, 16, 1},
    {"left-padded batch", 3, 90, 90, 6, 3, 32, 32, 0, true},
    {"left-padded batch + window, bf16", 3, 64, 64, 4, 2, 64, 64, 20, true, false, DType::kBF16},
    {"chunk continuing a prefix (L < S)", 2, 37, 250, 6, 2, 64, 64},
    {"chunk continuing a prefix, fused + window", 2, 19, 140, 4, 1, 32, 24, 50, false, true},
    {"decode-sized query (L = 1)", 3, 1, 300, 12, 4, 64, 64},
    {"granite attention_multiplier 0.015625", 1, 64, 64, 4, 1, 64, 64, 0, false, false, DType::kF32,
     0.015625f},
};

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 5e-6 : 8e-3; }

// lse: the same -inf rows, and the finite rows within `tolerance`.
void ExpectLse(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  std::vector<double> g, w;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) && want[i] < 0) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "lse row " << i << ": " << got[i];
    } else {
      g.push_back(got[i]);
      w.push_back(want[i]);
    }
  }
  EXPECT_LT(RelativeError(g, w), tolerance);
}

// Runs one case; returns the relative error of out.
double ForwardError(const AttnCase& c, uint64_t seed) {
  Rng rng(seed);
  const AttnProblem prob(c, rng);
  View out = PaddedOutput(c.B, c.L, c.H, c.Ev, c.dtype);
  View lse = View::Dense({1, c.B, c.H, c.L}, DType::kF32, 3);
  const std::vector<uint8_t> out_before = out.bytes();
  const Status status = AttentionForward(prob.Inputs(), out.tensor(), lse.tensor(), prob.Options());
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(out.UntouchedOutside(out_before)) << "wrote outside out";
  std::vector<double> want(static_cast<size_t>(c.B * c.L * c.H * c.Ev));
  std::vector<double> want_lse(static_cast<size_t>(c.B * c.H * c.L));
  ref::AttentionForward(prob.RefShape(), prob.q_d.data(), prob.k_d.data(), prob.v_d.data(),
                        prob.RefKvStart(), want.data(), want_lse.data());
  ExpectLse(lse.Values(), want_lse, 1e-5);
  return RelativeError(out.Values(), RoundedTo(want, c.dtype));
}

TEST(Attention, ForwardMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : kCases) {
    SCOPED_TRACE(c.Name());
    const double error = ForwardError(c, seed);
    EXPECT_LT(error, Tolerance(c.dtype));
    std::printf("  %-60s relative error %.3g\n", c.Name().c_str(), error);
  }
}

TEST(Attention, ForwardMatchesOracleOnEverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    for (const AttnCase& c : {kCases[0], kCases[5], kCases[10], kCases[13]}) {
      SCOPED_TRACE(c.Name());
      EXPECT_LT(ForwardError(c, seed), Tolerance(c.dtype));
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

// Same inputs, 1 and 2 threads: the same bits (each row is one thread's fixed arithmetic; the
// flash-decoding split depends on the shapes only).
TEST(Attention, ForwardBitsDoNotDependOnThreads) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : {kCases[0], kCases[10], kCases[14]}) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    const AttnProblem prob(c, rng);
    std::vector<std::vector<uint8_t>> bits;
    for (int threads : {1, 2, 3}) {
      ScopedThreads scoped(threads);
      View out = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
      View lse = View::Dense({1, c.B, c.H, c.L}, DType::kF32, 3);
      ASSERT_TRUE(AttentionForward(prob.Inputs(), out.tensor(), lse.tensor(), prob.Options()).ok());
      bits.push_back(out.bytes());
      bits.back().insert(bits.back().end(), lse.bytes().begin(), lse.bytes().end());
    }
    EXPECT_EQ(bits[0], bits[1]);
    EXPECT_EQ(bits[0], bits[2]);
  }
}

// lse is optional; out alone gives the same bits.
TEST(Attention, LseIsOptional) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const AttnProblem prob(kCases[4], rng);
  const AttnCase& c = prob.c;
  View with = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
  View without = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
  View lse = View::Dense({1, c.B, c.H, c.L}, DType::kF32, 3);
  ASSERT_TRUE(AttentionForward(prob.Inputs(), with.tensor(), lse.tensor(), prob.Options()).ok());
  ASSERT_TRUE(AttentionForward(prob.Inputs(), without.tensor(), Tensor{}, prob.Options()).ok());
  EXPECT_EQ(with.bytes(), without.bytes());
}

// Large score ranges (q and k of norm ~30: logits in the hundreds) keep the online softmax
// finite and accurate: no overflow in exp, no NaN.
TEST(Attention, LargeLogitsStayFinite) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  AttnCase c{"large logits", 1, 100, 100, 4, 2, 64, 64};
  AttnProblem prob(c, rng);
  prob.q_d = prob.q.Fill(rng.NormalVec(prob.q.numel(), 4.0));
  prob.k_d = prob.k.Fill(rng.NormalVec(prob.k.numel(), 4.0));
  View out = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
  ASSERT_TRUE(AttentionForward(prob.Inputs(), out.tensor(), Tensor{}, prob.Options()).ok());
  std::vector<double> want(static_cast<size_t>(out.numel()));
  ref::AttentionForward(prob.RefShape(), prob.q_d.data(), prob.k_d.data(), prob.v_d.data(), nullptr,
                        want.data(), nullptr);
  EXPECT_LT(RelativeError(out.Values(), want), 1e-4);
}

}  // namespace
}  // namespace ssmkit::testing

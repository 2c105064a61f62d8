// Dense attention's bits: what the op harness's case table (tests/harness/cases/attention.cpp,
// every result against the oracle) cannot say. The same inputs give the same bits at 1, 2 and 3
// threads, forward and backward (each row is one thread's fixed arithmetic; the
// flash-decoding split depends on the shapes only); out has the same bits with and without lse;
// a gradient requested alone has the bits of the call requesting all three.
#include <vector>

#include "attention_fixture.hpp"
#include "ssmkit/attention.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

const AttnCase kPrefill{"granite-4.0-h-350m prefill", 1, 200, 200, 12, 4, 64, 64};
const AttnCase kLeftPadded{"left-padded batch", 3, 90, 90, 6, 3, 32, 32, 0, true};
const AttnCase kDecode{"decode-sized query (L = 1)", 3, 1, 300, 12, 4, 64, 64};

// out and lse of the forward, into dense views.
struct ForwardRun {
  View out, lse;
};

ForwardRun RunForward(const AttnProblem& prob, bool with_lse = true) {
  const AttnCase& c = prob.c;
  ForwardRun run{View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype),
                 View::Dense({1, c.B, c.H, c.L}, DType::kF32, 3)};
  const Status s = AttentionForward(prob.Inputs(), run.out.tensor(),
                                    with_lse ? run.lse.tensor() : Tensor{}, prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  return run;
}

// The backward after the forward, against dout drawn from `seed`; `which` picks dq, dk, dv.
std::vector<View> RunBackward(const AttnProblem& prob, uint64_t seed,
                              std::vector<bool> which = {true, true, true}) {
  const AttnCase& c = prob.c;
  Rng rng(seed);
  View dout = View::Dense({c.B, c.L, c.H, c.Ev}, c.dtype);
  dout.Fill(rng.NormalVec(dout.numel()));
  const ForwardRun forward = RunForward(prob);
  std::vector<View> grads = {View::Dense({c.B, c.L, c.H, c.E}, c.dtype),
                             View::Dense({c.B, c.S, c.Hk, c.E}, c.dtype),
                             View::Dense({c.B, c.S, c.Hk, c.Ev}, c.dtype)};
  const auto pick = [&](int i) { return which[i] ? grads[i].tensor() : Tensor{}; };
  const Status s = AttentionBackward(prob.Inputs(), forward.out.tensor(), forward.lse.tensor(),
                                     dout.tensor(), {pick(0), pick(1), pick(2)}, prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  return grads;
}

TEST(Attention, ForwardBitsDoNotDependOnThreads) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : {kPrefill, kLeftPadded, kDecode}) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    const AttnProblem prob(c, rng);
    std::vector<std::vector<uint8_t>> bits;
    for (int threads : {1, 2, 3}) {
      ScopedThreads scoped(threads);
      const ForwardRun run = RunForward(prob);
      bits.push_back(run.out.bytes());
      bits.back().insert(bits.back().end(), run.lse.bytes().begin(), run.lse.bytes().end());
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
  const AttnProblem prob({"GQA 8 (nemotron-h-like)", 1, 97, 97, 16, 2, 64, 64}, rng);
  EXPECT_EQ(RunForward(prob).out.bytes(), RunForward(prob, false).out.bytes());
}

TEST(AttentionGrad, BitsDoNotDependOnThreadsOrOnOtherGrads) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const AttnCase& c : {AttnCase{"granite-4.0-h-350m train", 1, 150, 150, 12, 4, 64, 64},
                            AttnCase{"left-padded batch", 3, 70, 70, 4, 2, 32, 32, 0, true}}) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    const AttnProblem prob(c, rng);
    std::vector<std::vector<View>> runs;
    for (int threads : {1, 2, 3}) {
      ScopedThreads scoped(threads);
      runs.push_back(RunBackward(prob, seed));
    }
    for (const std::vector<View>& run : runs) {
      for (int i = 0; i < 3; ++i) EXPECT_EQ(run[i].bytes(), runs[0][i].bytes()) << "gradient " << i;
    }
    for (int only = 0; only < 3; ++only) {
      const std::vector<View> one = RunBackward(prob, seed, {only == 0, only == 1, only == 2});
      EXPECT_EQ(one[only].bytes(), runs[0][only].bytes()) << "gradient " << only << " alone";
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

// The SSD scan's bits: what the op harness's case table (tests/harness/cases/ssd.cpp, every
// result against the oracle, at 1, 2 and 3 threads too) cannot say. The same inputs and thread
// count give the same bits, forward and backward, for every algorithm. And the algorithm names.
#include <string>
#include <vector>

#include "ssd_fixture.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

// Every option on, seq_idx and a dt_limit too; L = 40.
SsdCase AllOn() {
  SsdCase c;
  c.seqlen = 40;
  c.has_seq_idx = true;
  c.dt_min = 0.002f;
  c.dt_max = 0.15f;
  return c;
}

// The bytes of all nine gradients (those of the inputs present) for random dout and
// dfinal_states drawn from `seed`.
std::vector<std::vector<uint8_t>> BackwardBytes(SsdProblem& prob, const SsdOptions& options,
                                                uint64_t seed) {
  Rng rng(seed);
  HostTensor dout(prob.SeqShape(), prob.c.dtype), dfinal(prob.StateShape(), DType::kF32);
  dout.Fill(rng.NormalVec(prob.SeqSize()));
  dfinal.Fill(rng.NormalVec(prob.StateSize()));
  HostTensor* inputs[] = {&prob.x, &prob.dt, &prob.A,       &prob.B, &prob.C,
                          &prob.D, &prob.z,  &prob.dt_bias, &prob.h0};
  const SsdCase& c = prob.c;
  const bool present[] = {true, true, true, true, true, c.has_D, c.has_z, c.has_dt_bias, c.has_h0};
  std::vector<HostTensor> grads(9);
  Tensor views[9];
  for (int k = 0; k < 9; ++k) {
    if (!present[k]) continue;
    const Tensor in = inputs[k]->view();
    grads[k] = HostTensor({in.shape.begin(), in.shape.begin() + in.rank}, in.dtype);
    grads[k].Poison();
    views[k] = grads[k].view();
  }
  const Status s = SsdBackward(
      prob.Inputs(), dout.view(), dfinal.view(),
      {views[0], views[1], views[2], views[3], views[4], views[5], views[6], views[7], views[8]},
      options);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<std::vector<uint8_t>> bytes;
  for (const HostTensor& g : grads) bytes.push_back(g.bytes());
  return bytes;
}

TEST(SsdForward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  SsdProblem prob(AllOn(), rng);
  for (SsdAlgorithm a : {SsdAlgorithm::kAuto, SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    for (int threads : {1, 2, 3}) {
      const ScopedThreads scoped(threads);
      std::vector<double> out1, fin1, out2, fin2;
      ASSERT_TRUE(RunForward(prob, Algo(a, 16), &out1, &fin1).ok());
      ASSERT_TRUE(RunForward(prob, Algo(a, 16), &out2, &fin2).ok());
      EXPECT_EQ(out1, out2) << SsdAlgorithmName(a) << " threads " << threads;
      EXPECT_EQ(fin1, fin2) << SsdAlgorithmName(a) << " threads " << threads;
    }
  }
}

TEST(SsdBackward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  SsdCase c = AllOn();
  c.batch = 1;
  c.nheads = 6;
  c.ngroups = 1;
  c.headdim = 3;
  c.dstate = 4;
  SsdProblem prob(c, rng);
  for (SsdAlgorithm a : {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    for (int threads : {1, 2, 3}) {
      const ScopedThreads scoped(threads);
      EXPECT_TRUE(BackwardBytes(prob, Algo(a, 16), seed) == BackwardBytes(prob, Algo(a, 16), seed))
          << SsdAlgorithmName(a) << " threads " << threads;
    }
  }
}

TEST(SsdAlgorithmNames, ParseRejectsUnknownNames) {
  for (const char* bad : {"fastest", "", "Chunked", "sequential "}) {
    SsdAlgorithm algorithm = SsdAlgorithm::kChunked;
    const Status s = ParseSsdAlgorithm(bad, &algorithm);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("name: expected auto, chunked or sequential"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(std::string("given \"") + bad + "\""), std::string::npos)
        << s.message();
    EXPECT_EQ(algorithm, SsdAlgorithm::kChunked) << "the output was written on error";
  }
}

TEST(SsdAlgorithmNames, ParseAcceptsEveryName) {
  for (int a = 0; a <= static_cast<int>(SsdAlgorithm::kSequential); ++a) {
    const SsdAlgorithm want = static_cast<SsdAlgorithm>(a);
    SsdAlgorithm got = a == 0 ? SsdAlgorithm::kSequential : SsdAlgorithm::kAuto;
    ASSERT_TRUE(ParseSsdAlgorithm(SsdAlgorithmName(want), &got).ok()) << SsdAlgorithmName(want);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace ssmkit::testing

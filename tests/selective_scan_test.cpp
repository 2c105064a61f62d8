// The selective scan's bits: what the op harness's case table (tests/harness/cases/
// selective_scan.cpp, every result against the oracle) cannot say. The same problem twice with
// the same thread count gives the same bytes, forward and backward; saving the chunk states
// changes no bit of out; a gradient requested alone has the bits of the full call; the backward
// given the forward's chunk states has the bits of one recomputing them. And the algorithm
// names.
#include <array>
#include <string>
#include <vector>

#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

constexpr ScanAlgorithm kAllAlgorithms[] = {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked,
                                            ScanAlgorithm::kBlelloch, ScanAlgorithm::kHillisSteele,
                                            ScanAlgorithm::kLogSpace};

// Mild decay, sane for log-space up to L ~ 130 (summed decay ~ -8; docs/numerics.md).
ScanCase Mild(ScanCase c) {
  c.dt_max = 0.1;
  c.a_slope = 0.0;
  return c;
}

// The forward's outputs, poisoned (NaN) before the call; chunk_states when `chunk_count` > 0.
struct ForwardRun {
  PaddedTensor out, final_state, chunk_states;
};

ForwardRun RunForward(ScanProblem& prob, const SelectiveScanOptions& options,
                      int64_t chunk_count = 0) {
  const ScanCase& c = prob.c;
  ForwardRun run{PaddedTensor(prob.SeqShape(), c.dtype, c.pad),
                 PaddedTensor(prob.StateShape(), DType::kF32, c.pad),
                 PaddedTensor({c.batch, c.dim, chunk_count, c.dstate}, DType::kF32, c.pad)};
  run.out.Poison();
  run.final_state.Poison();
  run.chunk_states.Poison();
  const Status status =
      SelectiveScanForward(prob.Inputs(), run.out.view(), run.final_state.view(),
                           chunk_count > 0 ? run.chunk_states.view() : Tensor{}, options);
  EXPECT_TRUE(status.ok()) << status.message();
  return run;
}

constexpr int kNumGrads = kNumScanGrads;
constexpr unsigned kAllGrads = (1u << kNumGrads) - 1;

// The bytes of each requested gradient, in ScanGradName order; empty where not requested.
using GradBytes = std::vector<std::vector<uint8_t>>;

// The backward against random dout and dfinal_state (drawn from `seed`), requesting the
// gradients in `want` of the inputs present.
GradBytes RunBackward(ScanProblem& prob, uint64_t seed, const SelectiveScanOptions& options = {},
                      unsigned want = kAllGrads, const Tensor& chunk_states = {}) {
  const ScanCase& c = prob.c;
  Rng rng(seed);
  PaddedTensor dout(prob.SeqShape(), c.dtype, c.pad), dfinal(prob.StateShape(), DType::kF32, c.pad);
  dout.Fill(rng.NormalVec(prob.SeqSize()));
  dfinal.Fill(rng.NormalVec(prob.StateSize()));
  std::array<PaddedTensor, kNumGrads> t = ScanGradTensors(prob);
  const std::array<bool, kNumGrads> present = ScanGradPresent(c);
  Tensor views[kNumGrads];
  for (int i = 0; i < kNumGrads; ++i) {
    if (present[i] && (want >> i & 1)) views[i] = t[i].view();
  }
  const SelectiveScanGrads grads = StructFromList(SelectiveScanTensors::grads, views);
  const Status status = SelectiveScanBackward(prob.Inputs(), dout.view(), dfinal.view(),
                                              chunk_states, grads, options);
  EXPECT_TRUE(status.ok()) << status.message();
  GradBytes bytes(kNumGrads);
  for (int i = 0; i < kNumGrads; ++i) {
    if (views[i].defined()) bytes[i] = t[i].Bytes();
  }
  return bytes;
}

// Every algorithm and path (L = 1, per-row and channel-tiled D), 1 and 2 threads.
TEST(SelectiveScanForward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int threads : {1, 2}) {
    const ScopedThreads scoped(threads);
    for (int64_t L : {1, 130}) {
      for (int64_t D : {5, 32}) {
        ScanCase c;
        c.batch = 2;
        c.dim = D;
        c.seqlen = L;
        c.dstate = 16;
        c = Mild(c);
        for (ScanAlgorithm a : kAllAlgorithms) {
          SCOPED_TRACE(std::string(ScanAlgorithmName(a)) + " " + c.Name() +
                       " threads=" + std::to_string(threads));
          Rng rng(seed);
          ScanProblem prob(c, rng);
          ForwardRun first = RunForward(prob, {a}), second = RunForward(prob, {a});
          EXPECT_TRUE(first.out.Bytes() == second.out.Bytes());
          EXPECT_TRUE(first.final_state.Bytes() == second.final_state.Bytes());
          for (double v : first.out.ToDouble()) ASSERT_TRUE(std::isfinite(v));
        }
      }
    }
  }
}

// Writing chunk_states leaves out's bits as they are without: every algorithm, constant and
// variable B/C (per-row and tiled paths), L = 1, chunks dividing L or not and longer than L.
// (The harness's chunk_states case checks the states themselves.)
TEST(SelectiveScanForward, ChunkStatesChangeNoBitOfOut) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (ScanAlgorithm algorithm : kAllAlgorithms) {
    for (BCForm form : {BCForm::kConstant, BCForm::kVariable}) {
      for (int64_t L : {1, 37, 150}) {
        for (int64_t chunk : {0, 7, 16, 200}) {
          if (algorithm == ScanAlgorithm::kLogSpace && L > 64) continue;
          ScanCase c;
          c.batch = 2;
          c.dim = 32;
          c.seqlen = L;
          c.dstate = 16;
          c.b_form = c.c_form = form;
          c.has_h0 = (k % 2) == 0;
          c.pad = 2;
          if (algorithm == ScanAlgorithm::kLogSpace) c = Mild(c);
          SCOPED_TRACE(std::string(ScanAlgorithmName(algorithm)) + " " + c.Name() +
                       " chunk=" + std::to_string(chunk));
          Rng rng(seed + k++);
          ScanProblem prob(c, rng);
          const SelectiveScanOptions options{algorithm, chunk};
          const ForwardRun with = RunForward(prob, options, SelectiveScanChunkCount(L, options));
          EXPECT_TRUE(with.out.Bytes() == RunForward(prob, options).out.Bytes());
        }
      }
    }
  }
}

// Every gradient in the same bits twice (dB / dC of the variable forms are reduced across
// thread blocks in a fixed order), 1 and 2 threads. (The harness's grad_threads cases check
// them against the oracle.)
TEST(SelectiveScanBackward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int threads : {1, 2}) {
    const ScopedThreads scoped(threads);
    for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
      for (int64_t D : {6, 64}) {
        ScanCase c;
        c.batch = 3;
        c.dim = D;
        c.groups = 2;
        c.seqlen = 150;
        c.dstate = 16;
        c.b_form = c.c_form = form;
        SCOPED_TRACE(c.Name() + " threads=" + std::to_string(threads));
        Rng rng(seed);
        ScanProblem prob(c, rng);
        const GradBytes first = RunBackward(prob, seed), second = RunBackward(prob, seed);
        for (int i = 0; i < kNumGrads; ++i) EXPECT_TRUE(first[i] == second[i]) << ScanGradName(i);
      }
    }
  }
}

// Requesting only some gradients gives the requested ones the bits of requesting all. (The
// harness's grads_alone case checks each one alone is written, and the others not.)
TEST(SelectiveScanBackward, AbsentGradientOutputs) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const unsigned subsets[] = {1u << 0,
                              1u << 1,
                              1u << 2,
                              1u << 3,
                              1u << 4,
                              1u << 5,
                              1u << 6,
                              1u << 7,
                              1u << 8,
                              0x0Cu /* dA, dB */,
                              0x1E0u /* dD, dz, ddelta_bias, dh0 */,
                              kAllGrads & ~0x18u,
                              0u};
  uint64_t k = 0;
  for (BCForm form : {BCForm::kConstant, BCForm::kVariable}) {
    for (int64_t D : {4, 32}) {
      ScanCase c;
      c.batch = 2;
      c.dim = D;
      c.seqlen = 30;
      c.dstate = 8;
      c.b_form = c.c_form = form;
      Rng rng(seed + k++);
      ScanProblem prob(c, rng);
      const GradBytes all = RunBackward(prob, seed);
      for (unsigned want : subsets) {
        SCOPED_TRACE(c.Name() + " requested mask " + std::to_string(want));
        const GradBytes some = RunBackward(prob, seed, {}, want);
        for (int i = 0; i < kNumGrads; ++i) {
          if (!some[i].empty()) EXPECT_TRUE(some[i] == all[i]) << ScanGradName(i);
        }
      }
    }
  }
}

// Given the chunk states its forward saved, the backward (which then skips its own forward pass
// on the channel-tiled path, and ignores them on the per-row one) gives the bits of one without
// them: every B/C form, checkpoint intervals dividing L or not, bf16. (The harness's
// grad_chunk_state_shapes case checks the recomputing one against the oracle.)
TEST(SelectiveScanBackward, FromTheForwardsChunkStates) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
    for (int64_t chunk : {0, 7, 32}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        ScanCase c;
        c.batch = 2;
        c.dim = 32;
        c.groups = 2;
        c.seqlen = 150;
        c.dstate = 16;
        c.b_form = c.c_form = form;
        c.dtype = dtype;
        c.pad = 3;
        SCOPED_TRACE(c.Name() + " chunk=" + std::to_string(chunk));
        Rng rng(seed);
        ScanProblem prob(c, rng);
        SelectiveScanOptions options;
        options.chunk_length = chunk;
        ForwardRun forward = RunForward(prob, options, SelectiveScanChunkCount(c.seqlen, options));
        const GradBytes given =
            RunBackward(prob, seed, options, kAllGrads, forward.chunk_states.view());
        const GradBytes recomputed = RunBackward(prob, seed, options);
        for (int i = 0; i < kNumGrads; ++i)
          EXPECT_TRUE(given[i] == recomputed[i]) << ScanGradName(i);
      }
    }
  }
}

TEST(ScanAlgorithmNames, ParseRejectsUnknownNames) {
  for (const char* bad : {"fastest", "", "Sequential", "log_space", "chunked "}) {
    ScanAlgorithm algorithm = ScanAlgorithm::kChunked;
    const Status s = ParseScanAlgorithm(bad, &algorithm);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(
                  "name: expected sequential, chunked, blelloch, hillis-steele or log-space"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(std::string("given \"") + bad + "\""), std::string::npos)
        << s.message();
    EXPECT_EQ(algorithm, ScanAlgorithm::kChunked) << "the output was written on error";
  }
}

TEST(ScanAlgorithmNames, ParseAcceptsEveryName) {
  for (int a = 0; a <= static_cast<int>(ScanAlgorithm::kLogSpace); ++a) {
    const ScanAlgorithm want = static_cast<ScanAlgorithm>(a);
    ScanAlgorithm got = a == 0 ? ScanAlgorithm::kLogSpace : ScanAlgorithm::kSequential;
    ASSERT_TRUE(ParseScanAlgorithm(ScanAlgorithmName(want), &got).ok()) << ScanAlgorithmName(want);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace ssmkit::testing

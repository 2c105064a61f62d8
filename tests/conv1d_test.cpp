// Causal conv1d determinism, which the op harness (tests/harness/cases/causal_conv1d.cpp) does
// not express: forward and backward give the same bits across runs and thread counts.
#include <cstdint>
#include <vector>

#include "ssmkit/conv1d.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// Forward and backward on 1 and 2 threads, twice each: the same bits every time (the backward
// reduces each channel on one thread in batch-then-time order, whatever the split).
TEST(Conv1dDeterminism, SameBitsAcrossRunsAndThreadCounts) {
  constexpr int64_t B = 3, D = 67, L = 301, K = 4;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  HostTensor x({B, D, L}, DType::kF32), weight({D, K}, DType::kF32), bias({D}, DType::kF32);
  HostTensor h0({B, D, K - 1}, DType::kF32), dout({B, D, L}, DType::kF32),
      dfinal({B, D, K - 1}, DType::kF32);
  for (HostTensor* t : {&x, &h0, &dout, &dfinal}) t->Fill(rng.NormalVec(t->numel()));
  weight.Fill(rng.UniformVec(D * K, -0.8, 0.8));
  bias.Fill(rng.UniformVec(D, -0.5, 0.5));
  const CausalConv1dInputs in{x.view(), weight.view(), bias.view(), h0.view(),
                              Conv1dActivation::kSilu};
  std::vector<uint8_t> first;
  for (int threads : {2, 2, 1, 1}) {
    const ScopedThreads scoped(threads);
    HostTensor out({B, D, L}, DType::kF32), dx({B, D, L}, DType::kF32);
    HostTensor fin({B, D, K - 1}, DType::kF32), dw({D, K}, DType::kF32);
    HostTensor db({D}, DType::kF32), dh0({B, D, K - 1}, DType::kF32);
    ASSERT_TRUE(CausalConv1dForward(in, out.view(), fin.view()).ok());
    ASSERT_TRUE(CausalConv1dBackward(in, dout.view(), dfinal.view(),
                                     {dx.view(), dw.view(), db.view(), dh0.view()})
                    .ok());
    std::vector<uint8_t> bits;
    for (const HostTensor* t : {&out, &fin, &dx, &dw, &db, &dh0})
      bits.insert(bits.end(), t->bytes().begin(), t->bytes().end());
    if (first.empty()) first = bits;
    EXPECT_TRUE(bits == first) << "threads " << threads;
  }
}

}  // namespace
}  // namespace ssmkit::testing

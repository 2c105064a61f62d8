// Causal conv1d determinism, which the op harness (tests/harness/cases/causal_conv1d.cpp) does
// not express: forward and backward give the same bits across runs and thread counts.
#include <cmath>
#include <cstdint>
#include <string>
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

// out = x: the forward reads each row through a copy then, where with out elsewhere it reads x
// where it lies (from the second vector of the row on) and recomputes a partial last vector in
// full. Both give the same bits: at lengths with and without a partial vector, rows shorter
// than two vectors, every width, with and without initial states.
TEST(Conv1dForward, InPlaceGivesTheBitsOfASeparateOutput) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (int64_t K : {2, 4, 8}) {
    for (int64_t L : {5, 19, 37, 60, 64, 301}) {
      for (bool initial : {false, true}) {
        SCOPED_TRACE("K " + std::to_string(K) + " L " + std::to_string(L) +
                     (initial ? " initial" : ""));
        constexpr int64_t B = 2, D = 5;
        HostTensor x({B, D, L}, DType::kF32), weight({D, K}, DType::kF32), bias({D}, DType::kF32);
        HostTensor h0({B, D, K - 1}, DType::kF32), out({B, D, L}, DType::kF32);
        x.Fill(rng.NormalVec(x.numel()));
        h0.Fill(rng.NormalVec(h0.numel()));
        weight.Fill(rng.UniformVec(D * K, -0.8, 0.8));
        bias.Fill(rng.UniformVec(D, -0.5, 0.5));
        out.Poison();
        const Tensor initial_states = initial ? h0.view() : Tensor{};
        HostTensor in_place = x;
        ASSERT_TRUE(CausalConv1dForward({x.view(), weight.view(), bias.view(), initial_states,
                                         Conv1dActivation::kSilu},
                                        out.view(), {})
                        .ok());
        ASSERT_TRUE(CausalConv1dForward({in_place.view(), weight.view(), bias.view(),
                                         initial_states, Conv1dActivation::kSilu},
                                        in_place.view(), {})
                        .ok());
        EXPECT_TRUE(in_place.bytes() == out.bytes());
        for (double v : out.ToDouble()) ASSERT_FALSE(std::isnan(v));
      }
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

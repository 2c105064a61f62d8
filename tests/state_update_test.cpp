// selective_state_update, what the op harness's table cannot say (its cases and bad inputs are
// in tests/harness/cases/selective_state_update.cpp): the state rows no batch row names are
// bit-identical afterwards and a skipped row's out is untouched (the harness compares within a
// tolerance), the same bits across runs and thread counts, and the index check after an error.
#include "ssmkit/state_update.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// A Mamba-1 (B, D, N) or Mamba-2 (B, H, P, N) step with every optional input, G = 1, f32.
struct Step {
  Step(bool mamba2, int64_t B, int64_t Bs, int64_t H, int64_t P, int64_t N, Rng& rng)
      : x(mamba2 ? std::vector<int64_t>{B, H, P} : std::vector<int64_t>{B, H}, DType::kF32),
        z(mamba2 ? std::vector<int64_t>{B, H, P} : std::vector<int64_t>{B, H}, DType::kF32),
        out(mamba2 ? std::vector<int64_t>{B, H, P} : std::vector<int64_t>{B, H}, DType::kF32),
        dt({B, H}, DType::kF32),
        A(mamba2 ? std::vector<int64_t>{H} : std::vector<int64_t>{H, N}, DType::kF32),
        Bm({B, 1, N}, DType::kF32),
        Cm({B, 1, N}, DType::kF32),
        D({H}, DType::kF32),
        dt_bias({H}, DType::kF32),
        state(mamba2 ? std::vector<int64_t>{Bs, H, P, N} : std::vector<int64_t>{Bs, H, N},
              DType::kF32),
        indices({B}, DType::kI32) {
    for (HostTensor* t : {&x, &z, &Bm, &Cm, &state}) t->Fill(rng.NormalVec(t->numel()));
    dt.Fill(rng.UniformVec(dt.numel(), -4.0, 1.0));
    A.Fill(rng.UniformVec(A.numel(), -3.0, -0.2));
    D.Fill(rng.UniformVec(H, -1.0, 1.0));
    dt_bias.Fill(rng.UniformVec(H, -0.3, 0.3));
    out.Poison();
  }
  StateUpdateInputs Inputs(bool indexed) {
    return {x.view(),  dt.view(),      A.view(),
            Bm.view(), Cm.view(),      D.view(),
            z.view(),  dt_bias.view(), indexed ? indices.view() : Tensor{},
            true};
  }
  Status Run(bool indexed) {
    return SelectiveStateUpdate(Inputs(indexed), state.view(), out.view());
  }

  HostTensor x, z, out, dt, A, Bm, Cm, D, dt_bias, state, indices;
};

std::vector<uint8_t> StateRow(const HostTensor& state, int64_t rows, int64_t row) {
  const size_t bytes = state.bytes().size() / rows;
  return {state.bytes().begin() + row * bytes, state.bytes().begin() + (row + 1) * bytes};
}

// Batch rows 0..6 into a pool of 10 state rows, rows 1 and 4 skipped (-1): the pool's rows no
// batch row names keep their bits, and the skipped rows' out stays poisoned.
TEST(StateUpdate, UnnamedStateRowsAndSkippedOutRowsAreUntouched) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const std::vector<double> idx = {9, -1, 0, 4, -1, 7, 2};
  for (bool mamba2 : {false, true}) {
    SCOPED_TRACE(mamba2 ? "mamba2" : "mamba1");
    Rng rng(seed);
    Step s(mamba2, 7, 10, mamba2 ? 4 : 20, mamba2 ? 8 : 1, mamba2 ? 32 : 16, rng);
    s.indices.Fill(idx);
    const HostTensor before = s.state;
    const Status st = s.Run(true);
    ASSERT_TRUE(st.ok()) << st.message();
    for (int64_t row : {1, 3, 5, 6, 8})
      EXPECT_TRUE(StateRow(s.state, 10, row) == StateRow(before, 10, row)) << "state row " << row;
    const std::vector<double> out = s.out.ToDouble();
    const int64_t width = s.out.numel() / 7;
    for (int64_t b = 0; b < 7; ++b) {
      for (int64_t i = b * width; i < (b + 1) * width; ++i) {
        if (idx[b] < 0) {
          ASSERT_TRUE(std::isnan(out[i])) << "the skipped row " << b << "'s out was written";
        } else {
          ASSERT_TRUE(std::isfinite(out[i])) << "row " << b << " was not written";
        }
      }
    }
  }
}

// The same step on 1 and 2 threads, twice each: the same bits (no value is reduced across
// the split, so the thread count cannot matter).
TEST(StateUpdateDeterminism, SameBitsAcrossRunsAndThreadCounts) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (bool mamba2 : {false, true}) {
    std::vector<uint8_t> first;
    for (int threads : {2, 2, 1, 1}) {
      ScopedThreads scoped(threads);
      Rng rng(seed);
      Step s(mamba2, 2, 2, mamba2 ? 24 : 3000, mamba2 ? 64 : 1, mamba2 ? 64 : 16, rng);
      ASSERT_TRUE(s.Run(false).ok());
      std::vector<uint8_t> bits = s.out.bytes();
      bits.insert(bits.end(), s.state.bytes().begin(), s.state.bytes().end());
      if (first.empty()) first = bits;
      EXPECT_TRUE(bits == first) << (mamba2 ? "mamba2" : "mamba1") << ", threads " << threads;
    }
  }
}

// A rejected call leaves nothing behind: after a repeated index, the same indices in another
// order are accepted (the per-thread duplicate marks were reset).
TEST(StateUpdateErrors, IndexCheckResetsAfterAnError) {
  Rng rng(FreshSeed());
  Step s(true, 2, 5, 4, 3, 5, rng);
  s.indices.Fill({4.0, 4.0});
  const Status rejected = s.Run(true);
  EXPECT_EQ(rejected.code(), StatusCode::kInvalidArgument) << rejected.message();
  EXPECT_NE(rejected.message().find("given 4 at rows 0 and 1"), std::string::npos)
      << rejected.message();
  s.indices.Fill({4.0, -1.0});
  const Status accepted = s.Run(true);
  EXPECT_TRUE(accepted.ok()) << accepted.message();
}

}  // namespace
}  // namespace ssmkit::testing

// Rope properties the op harness (tests/harness/cases/rope.cpp) does not express: q alone and k
// alone give the bits of the joint call; the backward undoes the forward.
#include "ssmkit/rope.hpp"

#include <vector>

#include "attention_fixture.hpp"

namespace ssmkit::testing {
namespace {

// bamba's shape: partial_rotary_factor 0.5.
constexpr int64_t kB = 2, kL = 13, kH = 8, kHk = 2, kE = 64;

struct RopeProblem {
  View q = View::Dense({kB, kL, kH, kE}, DType::kF32);
  View k = View::Dense({kB, kL, kHk, kE}, DType::kF32);
  View positions = View::Dense({1, 1, kB, kL}, DType::kI32, 2);
  std::vector<double> q_d;
  RopeOptions options{10000.0, 32, RopeLayout::kHalf, 1.0f};

  explicit RopeProblem(Rng& rng) {
    q_d = q.Fill(rng.NormalVec(q.numel()));
    k.Fill(rng.NormalVec(k.numel()));
    std::vector<double> pos(kB * kL);
    for (size_t i = 0; i < pos.size(); ++i)
      pos[i] = static_cast<double>(i % kL) + 30000.0 * (i % 3 == 2);
    positions.Fill(pos);
  }
  RopeInputs Inputs(const View& qv, const View& kv) const {
    return {qv.tensor(), kv.tensor(), positions.tensor(), Tensor{}};
  }
};

// q alone and k alone give the bits of the joint call.
TEST(Rope, QAndKSeparately) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  RopeProblem prob(rng);
  View q_both = View::Dense({kB, kL, kH, kE}, DType::kF32),
       k_both = View::Dense({kB, kL, kHk, kE}, DType::kF32);
  View q_alone = View::Dense({kB, kL, kH, kE}, DType::kF32),
       k_alone = View::Dense({kB, kL, kHk, kE}, DType::kF32);
  ASSERT_TRUE(
      RopeForward(prob.Inputs(prob.q, prob.k), q_both.tensor(), k_both.tensor(), prob.options)
          .ok());
  ASSERT_TRUE(
      RopeForward(prob.Inputs(prob.q, View()), q_alone.tensor(), Tensor{}, prob.options).ok());
  ASSERT_TRUE(
      RopeForward(prob.Inputs(View(), prob.k), Tensor{}, k_alone.tensor(), prob.options).ok());
  EXPECT_EQ(q_both.bytes(), q_alone.bytes());
  EXPECT_EQ(k_both.bytes(), k_alone.bytes());
}

// The rotation is orthogonal: the backward of the forward gives the input back (in place, with
// attention_scaling 1).
TEST(Rope, BackwardUndoesTheForward) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  RopeProblem prob(rng);
  View y = View::Dense({kB, kL, kH, kE}, DType::kF32);
  ASSERT_TRUE(RopeForward(prob.Inputs(prob.q, View()), y.tensor(), Tensor{}, prob.options).ok());
  ASSERT_TRUE(RopeBackward(prob.Inputs(y, View()), y.tensor(), Tensor{}, prob.options).ok());
  EXPECT_LT(RelativeError(y.Values(), prob.q_d), 1e-6);
}

}  // namespace
}  // namespace ssmkit::testing

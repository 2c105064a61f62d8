// Rotary position embeddings against the fp64 oracle: both layouts, full and partial rotary
// dims, odd head dims, thetas from 1e4 to 1e11, caller frequencies (rope_scaling) and
// attention_scaling, positions with left padding and far positions, f32 and bf16, in place and
// out of place, q and k together or alone; the backward against the oracle and against finite
// differences, and as the inverse of the forward; every SIMD target; bad arguments.
#include "ssmkit/rope.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ref/rope_ref.hpp"

namespace ssmkit::testing {
namespace {

struct RopeCase {
  const char* label;
  int64_t B, L, H, Hk, E, R;
  RopeLayout layout = RopeLayout::kHalf;
  double theta = 10000.0;
  DType dtype = DType::kF32;
  bool in_place = false;
  bool scaled_freq = false;  // the caller's inv_freq: the default ones / 4 (linear scaling)
  float attention_scaling = 1.0f;

  std::string Name() const {
    return std::string(label) + ": B=" + std::to_string(B) + " L=" + std::to_string(L) +
           " H=" + std::to_string(H) + " Hk=" + std::to_string(Hk) + " E=" + std::to_string(E) +
           " R=" + std::to_string(R) +
           (layout == RopeLayout::kHalf ? " rotate_half" : " interleaved") +
           " theta=" + std::to_string(theta) + (in_place ? " in place" : "") + " " +
           DTypeName(dtype);
  }
};

const RopeCase kCases[] = {
    {"llama-style full rotary", 2, 17, 12, 4, 64, 64},
    {"bamba: partial_rotary_factor 0.5", 2, 13, 8, 2, 64, 32},
    {"zamba2-style E=128, in place", 1, 9, 4, 4, 128, 128, RopeLayout::kHalf, 10000.0, DType::kF32,
     true},
    {"theta 1e11 (long context)", 1, 11, 4, 1, 64, 64, RopeLayout::kHalf, 1e11},
    {"GPT-J interleaved, partial", 2, 7, 4, 2, 64, 48, RopeLayout::kInterleaved},
    {"odd head dim 40, rotary 20", 1, 10, 6, 2, 40, 20},
    {"bf16, in place", 2, 15, 12, 4, 64, 64, RopeLayout::kHalf, 10000.0, DType::kBF16, true},
    {"bf16 partial, interleaved", 3, 6, 4, 2, 64, 32, RopeLayout::kInterleaved, 10000.0,
     DType::kBF16},
    {"linear rope_scaling (inv_freq / 4), attention_scaling 1.2", 1, 8, 4, 2, 64, 64,
     RopeLayout::kHalf, 500000.0, DType::kF32, false, true, 1.2f},
};

// Positions of a left-padded batch: sequence b starts at 3b pad tokens with position id 1
// (transformers' masked_fill value), then 0, 1, ...; the last token sits far out (> 30000),
// where the f32 angle decides agreement.
std::vector<double> Positions(const RopeCase& c) {
  std::vector<double> p(static_cast<size_t>(c.B * c.L));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t l = 0; l < c.L; ++l)
      p[b * c.L + l] = l < 3 * b ? 1.0 : static_cast<double>(l - 3 * b);
    p[b * c.L + c.L - 1] = 30011.0 + 7.0 * static_cast<double>(b);
  }
  return p;
}

struct RopeProblem {
  RopeCase c;
  View q, k, positions, inv_freq;
  std::vector<double> q_d, k_d;
  std::vector<int32_t> pos;
  std::vector<float> freq;

  RopeProblem(const RopeCase& rc, Rng& rng) : c(rc) {
    q = View::Dense({c.B, c.L, c.H, c.E}, c.dtype);
    k = View::Dense({c.B, c.L, c.Hk, c.E}, c.dtype);
    q_d = q.Fill(rng.NormalVec(q.numel()));
    k_d = k.Fill(rng.NormalVec(k.numel()));
    positions = View::Dense({1, 1, c.B, c.L}, DType::kI32, 2);
    const std::vector<double> p = positions.Fill(Positions(c));
    pos.assign(p.begin(), p.end());
    if (c.scaled_freq) {
      freq = ref::RopeInvFreq(c.theta, c.R);
      for (float& f : freq) f /= 4.0f;
      inv_freq = View::Dense({1, 1, 1, c.R / 2}, DType::kF32, 1);
      inv_freq.Fill(std::vector<double>(freq.begin(), freq.end()));
    }
  }
  RopeOptions Options() const {
    return {c.theta, c.R == c.E ? 0 : c.R, c.layout, c.attention_scaling};
  }
  RopeInputs Inputs(const View& qv, const View& kv) const {
    return {qv.tensor(), kv.tensor(), positions.tensor(),
            c.scaled_freq ? inv_freq.tensor() : Tensor{}};
  }
  // The oracle on `x` (heads Hx).
  std::vector<double> Oracle(const std::vector<double>& x, int64_t heads, bool backward) const {
    ref::RopeShape s{c.B,     c.L,
                     heads,   c.E,
                     c.R,     c.layout == RopeLayout::kInterleaved,
                     c.theta, c.attention_scaling};
    std::vector<double> out(x.size());
    ref::Rope(s, x.data(), pos.data(), c.scaled_freq ? freq.data() : nullptr, backward, out.data());
    return out;
  }
};

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 2e-7 : 8e-3; }

// Forward (or backward) of both q and k in one call; errors of q and k.
std::pair<double, double> RunCase(const RopeCase& c, uint64_t seed, bool backward) {
  Rng rng(seed);
  RopeProblem prob(c, rng);
  View q_out = c.in_place ? prob.q : PaddedOutput(c.B, c.L, c.H, c.E, c.dtype);
  View k_out = c.in_place ? prob.k : PaddedOutput(c.B, c.L, c.Hk, c.E, c.dtype);
  const RopeInputs in = prob.Inputs(prob.q, prob.k);
  const Status status = backward ? RopeBackward(in, q_out.tensor(), k_out.tensor(), prob.Options())
                                 : RopeForward(in, q_out.tensor(), k_out.tensor(), prob.Options());
  EXPECT_TRUE(status.ok()) << status.message();
  const double eq =
      RelativeError(q_out.Values(), RoundedTo(prob.Oracle(prob.q_d, c.H, backward), c.dtype));
  const double ek =
      RelativeError(k_out.Values(), RoundedTo(prob.Oracle(prob.k_d, c.Hk, backward), c.dtype));
  return {eq, ek};
}

TEST(Rope, ForwardAndBackwardMatchOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(c.Name());
    for (bool backward : {false, true}) {
      const auto [eq, ek] = RunCase(c, seed, backward);
      EXPECT_LT(eq, Tolerance(c.dtype));
      EXPECT_LT(ek, Tolerance(c.dtype));
      std::printf("  %-72s %s q %.3g k %.3g\n", c.Name().c_str(), backward ? "bwd" : "fwd", eq, ek);
    }
  }
}

TEST(Rope, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    for (const RopeCase& c : {kCases[1], kCases[4], kCases[5]}) {
      SCOPED_TRACE(c.Name());
      const auto [eq, ek] = RunCase(c, seed, false);
      EXPECT_LT(eq, Tolerance(c.dtype));
      EXPECT_LT(ek, Tolerance(c.dtype));
    }
  });
  EXPECT_GE(targets, 2);
}

// q alone and k alone give the bits of the joint call.
TEST(Rope, QAndKSeparately) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const RopeCase& c = kCases[1];
  RopeProblem prob(c, rng);
  View q_both = View::Dense({c.B, c.L, c.H, c.E}, c.dtype),
       k_both = View::Dense({c.B, c.L, c.Hk, c.E}, c.dtype);
  View q_alone = View::Dense({c.B, c.L, c.H, c.E}, c.dtype),
       k_alone = View::Dense({c.B, c.L, c.Hk, c.E}, c.dtype);
  ASSERT_TRUE(
      RopeForward(prob.Inputs(prob.q, prob.k), q_both.tensor(), k_both.tensor(), prob.Options())
          .ok());
  ASSERT_TRUE(
      RopeForward(prob.Inputs(prob.q, View()), q_alone.tensor(), Tensor{}, prob.Options()).ok());
  ASSERT_TRUE(
      RopeForward(prob.Inputs(View(), prob.k), Tensor{}, k_alone.tensor(), prob.Options()).ok());
  EXPECT_EQ(q_both.bytes(), q_alone.bytes());
  EXPECT_EQ(k_both.bytes(), k_alone.bytes());
}

// The backward is the transpose of the forward: it matches central differences of
// sum(dout * rope(x)) (the oracle, fp64), and undoes the forward (attention_scaling 1).
TEST(Rope, BackwardIsTheGradientAndTheInverse) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const RopeCase c{"small", 2, 4, 2, 1, 10, 8, RopeLayout::kHalf};
  Rng rng(seed);
  RopeProblem prob(c, rng);
  const std::vector<double> dout = rng.NormalVec(prob.q.numel());
  std::vector<double> x = prob.q_d;
  auto loss = [&] {
    const std::vector<double> y = prob.Oracle(x, c.H, false);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += y[i] * dout[i];
    return sum;
  };
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) numeric[i] = CentralDifference(x, i, 1e-5, loss);
  View dq = View::Dense({c.B, c.L, c.H, c.E}, c.dtype);
  View g = View::Dense({c.B, c.L, c.H, c.E}, c.dtype);
  g.Fill(dout);
  ASSERT_TRUE(RopeBackward(prob.Inputs(g, View()), dq.tensor(), Tensor{}, prob.Options()).ok());
  EXPECT_LT(RelativeError(dq.Values(), numeric), 1e-6);
  EXPECT_LT(RelativeError(prob.Oracle(dout, c.H, true), numeric), 1e-9);

  View y = View::Dense({c.B, c.L, c.H, c.E}, c.dtype);
  ASSERT_TRUE(RopeForward(prob.Inputs(prob.q, View()), y.tensor(), Tensor{}, prob.Options()).ok());
  ASSERT_TRUE(RopeBackward(prob.Inputs(y, View()), y.tensor(), Tensor{}, prob.Options()).ok());
  EXPECT_LT(RelativeError(y.Values(), prob.q_d), 1e-6);
}

// ------------------------------------------------------------------ bad arguments

class RopeErrors : public ::testing::Test {
 protected:
  RopeErrors() : rng_(FreshSeed()), prob_(kCases[1], rng_) {
    q_out_ = View::Dense({2, 13, 8, 64}, DType::kF32);
    k_out_ = View::Dense({2, 13, 2, 64}, DType::kF32);
    q_before_ = q_out_.bytes();
    k_before_ = k_out_.bytes();
  }
  // Expects kInvalidArgument naming `name` and both outputs untouched.
  void Expect(const Status& status, const std::string& name) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
    EXPECT_EQ(q_out_.bytes(), q_before_);
    EXPECT_EQ(k_out_.bytes(), k_before_);
  }
  Status Run(RopeInputs in, Tensor q_out, Tensor k_out, RopeOptions o) {
    return RopeForward(in, q_out, k_out, o);
  }
  RopeInputs In() const { return prob_.Inputs(prob_.q, prob_.k); }
  RopeOptions Options() const { return prob_.Options(); }

  Rng rng_;
  RopeProblem prob_;
  View q_out_, k_out_;
  std::vector<uint8_t> q_before_, k_before_;
};

TEST_F(RopeErrors, RotaryDimOddOrTooLarge) {
  for (int64_t r : {-2, 3, 66, 1}) {
    RopeOptions o = Options();
    o.rotary_dim = r;
    Expect(Run(In(), q_out_.tensor(), k_out_.tensor(), o), "rope: options.rotary_dim: expected");
  }
}

TEST_F(RopeErrors, ThetaAndScaling) {
  for (double theta : {0.0, -1.0, std::nan(""), 1e300}) {
    RopeOptions o = Options();
    o.theta = theta;
    Expect(Run(In(), q_out_.tensor(), k_out_.tensor(), o), "options.theta");
  }
  RopeOptions o = Options();
  o.attention_scaling = INFINITY;
  Expect(Run(In(), q_out_.tensor(), k_out_.tensor(), o), "options.attention_scaling");
  o = Options();
  o.layout = static_cast<RopeLayout>(7);
  Expect(Run(In(), q_out_.tensor(), k_out_.tensor(), o), "options.layout");
}

TEST_F(RopeErrors, Shapes) {
  RopeInputs in = In();
  Tensor bad_k = in.k;
  bad_k.shape[1] = 12;  // L differs from q's
  Expect(Run({in.q, bad_k, in.positions, {}}, q_out_.tensor(), k_out_.tensor(), Options()),
         "rope: k: expected shape (B, L, Hk, E) = (2, 13, 2, 64), given (2, 12, 2, 64)");
  Tensor bad_pos = in.positions;
  bad_pos.dtype = DType::kI64;
  Expect(Run({in.q, in.k, bad_pos, {}}, q_out_.tensor(), k_out_.tensor(), Options()),
         "rope: positions: expected dtype i32, given i64");
  View freq = View::Dense({1, 1, 1, 15}, DType::kF32, 1);
  freq.Fill(std::vector<double>(15, 1.0));
  Expect(
      Run({in.q, in.k, in.positions, freq.tensor()}, q_out_.tensor(), k_out_.tensor(), Options()),
      "rope: inv_freq: expected shape (R/2) = (16,), given (15,)");
  Tensor bad_out = q_out_.tensor();
  bad_out.shape[2] = 7;
  Expect(Run(in, bad_out, k_out_.tensor(), Options()), "rope: q_out: expected shape");
  Expect(Run({Tensor{}, Tensor{}, in.positions, {}}, Tensor{}, Tensor{}, Options()),
         "rope: q, k: expected at least one of q and k");
  Expect(Run({in.q, Tensor{}, in.positions, {}}, q_out_.tensor(), k_out_.tensor(), Options()),
         "rope: k_out: expected no tensor, since k is absent");
  Expect(Run(in, Tensor{}, k_out_.tensor(), Options()), "rope: q_out: expected a tensor");
}

TEST_F(RopeErrors, Overlaps) {
  RopeInputs in = In();
  Tensor shifted = in.q;  // q_out one element into q: a partial overlap
  shifted.data = static_cast<float*>(shifted.data) + 1;
  shifted.shape[0] = 1;
  in.q.shape[0] = 1;
  in.k.shape[0] = 1;
  in.positions.shape[0] = 1;
  Tensor k_out = k_out_.tensor();
  k_out.shape[0] = 1;
  Expect(Run(in, shifted, k_out, Options()), "rope: q_out: expected memory not overlapping q");
  Tensor self = q_out_.tensor();
  self.strides[2] = 0;  // every head at one address
  Expect(Run(In(), self, k_out_.tensor(), Options()), "rope: q_out: expected strides that give");
}

TEST_F(RopeErrors, CudaIsUnsupported) {
  RopeInputs in = In();
  Tensor q_out = q_out_.tensor(), k_out = k_out_.tensor();
  for (Tensor* t : {&in.q, &in.k, &in.positions, &q_out, &k_out}) t->device = Device::kCuda;
  const Status status = Run(in, q_out, k_out, Options());
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.message();
  EXPECT_EQ(q_out_.bytes(), q_before_);
}

}  // namespace
}  // namespace ssmkit::testing

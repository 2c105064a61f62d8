// SSD backward: the oracle's analytic gradients against fp64 central finite differences of
// the oracle forward, and both fast f32 backwards against both, on fresh random inputs.
// The loss is a random projection, loss = sum(out * w) + sum(final_states * wf), so
// dout = w and dfinal_states = wf are random and nonzero.
#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "ssd_fixture.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

const SsdAlgorithm kAlgorithms[] = {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked};

// All nine gradients in double, one vector per input (empty where the input is absent).
struct GradSet {
  std::vector<double> dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dh0;
};

const char* const kGradNames[] = {
    "dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states"};

std::vector<std::vector<double>*> Members(GradSet& g) {
  return {&g.dx, &g.ddt, &g.dA, &g.dB, &g.dC, &g.dD, &g.dz, &g.ddt_bias, &g.dh0};
}

struct Projection {
  std::vector<double> w, wf;  // (B, L, H, P), (B, H, P, N)
  bool with_final = true;
};

Projection MakeProjection(const SsdProblem& prob, Rng& rng, bool with_final = true) {
  Projection p;
  p.w = rng.NormalVec(prob.SeqSize());
  p.wf = with_final ? rng.NormalVec(prob.StateSize()) : std::vector<double>(prob.StateSize(), 0.0);
  p.with_final = with_final;
  return p;
}

double Loss(const SsdProblem& prob, const Projection& proj) {
  std::vector<double> out, fin;
  prob.Reference(&out, &fin);
  double loss = 0;
  for (size_t i = 0; i < out.size(); ++i) loss += out[i] * proj.w[i];
  for (size_t i = 0; i < fin.size(); ++i) loss += fin[i] * proj.wf[i];
  return loss;
}

GradSet OracleBackward(const SsdProblem& prob, const Projection& proj) {
  GradSet g;
  g.dx.resize(prob.x_d.size());
  g.ddt.resize(prob.dt_d.size());
  g.dA.resize(prob.A_d.size());
  g.dB.resize(prob.B_d.size());
  g.dC.resize(prob.C_d.size());
  g.dD.resize(prob.D_d.size());
  g.dz.resize(prob.z_d.size());
  g.ddt_bias.resize(prob.dt_bias_d.size());
  g.dh0.resize(prob.h0_d.size());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  const ref::SsdGrads grads{ptr(g.dx), ptr(g.ddt), ptr(g.dA),       ptr(g.dB), ptr(g.dC),
                            ptr(g.dD), ptr(g.dz),  ptr(g.ddt_bias), ptr(g.dh0)};
  ref::SsdBackward(prob.Shape(), prob.RefInputs(), proj.w.data(), proj.wf.data(), grads);
  return g;
}

// Central differences of the oracle loss with respect to every input value.
GradSet FiniteDifferences(SsdProblem& prob, const Projection& proj) {
  GradSet g;
  std::vector<double>* inputs[] = {&prob.x_d, &prob.dt_d, &prob.A_d,       &prob.B_d, &prob.C_d,
                                   &prob.D_d, &prob.z_d,  &prob.dt_bias_d, &prob.h0_d};
  auto members = Members(g);
  for (int k = 0; k < 9; ++k) {
    std::vector<double>& v = *inputs[k];
    members[k]->resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      (*members[k])[i] = CentralDifference(v, i, 1e-5, [&] { return Loss(prob, proj); });
    }
  }
  return g;
}

// Which gradients the fast backward is asked for (all by default).
struct Wanted {
  bool grad[9] = {true, true, true, true, true, true, true, true, true};
};

// Runs a fast backward into poisoned outputs; absent inputs get absent gradient outputs, and
// so do unwanted ones (their vectors come back empty).
GradSet FastBackward(SsdProblem& prob, const Projection& proj, const SsdOptions& options,
                     const Wanted& wanted = {}, Status* status = nullptr) {
  const SsdCase& c = prob.c;
  HostTensor dout(prob.SeqShape(), c.dtype), dfinal(prob.StateShape(), DType::kF32);
  dout.Fill(proj.w);
  dfinal.Fill(proj.wf);
  HostTensor* inputs[] = {&prob.x, &prob.dt, &prob.A,       &prob.B, &prob.C,
                          &prob.D, &prob.z,  &prob.dt_bias, &prob.h0};
  const bool present[] = {true, true, true, true, true, c.has_D, c.has_z, c.has_dt_bias, c.has_h0};
  std::vector<HostTensor> outs(9);
  Tensor views[9];
  for (int k = 0; k < 9; ++k) {
    if (!present[k] || !wanted.grad[k]) continue;
    const Tensor in = inputs[k]->view();
    outs[k] = HostTensor({in.shape.begin(), in.shape.begin() + in.rank}, in.dtype);
    outs[k].Poison();
    views[k] = outs[k].view();
  }
  const SsdGrads grads{views[0], views[1], views[2], views[3], views[4],
                       views[5], views[6], views[7], views[8]};
  const Status s = SsdBackward(prob.Inputs(), dout.view(),
                               proj.with_final ? dfinal.view() : Tensor{}, grads, options);
  if (status) *status = s;
  EXPECT_TRUE(s.ok()) << s.message();
  GradSet g;
  auto members = Members(g);
  for (int k = 0; k < 9; ++k) {
    if (views[k].defined()) *members[k] = outs[k].ToDouble();
  }
  return g;
}

// Every non-empty gradient of `got` within `tol` of `want`. dA, dD and ddt_bias are per-head
// sums over B * L terms of both signs: f32 rounding of the terms does not cancel the way the
// terms do, so at a seed where they cancel the sum's relative error grows (ddt_bias measured
// 3.3e-4 at L = 1024, its terms' absolute sum 450x the result). Those get the larger of
// `sum_tol` and kNoiseFactor times their own rounding noise (RoundingNoise), when given.
constexpr double kNoiseFactor = 8.0;
using Noise = std::array<double, 9>;

void ExpectClose(GradSet got, GradSet want, double tol, const std::string& what, double sum_tol = 0,
                 const Noise* noise = nullptr) {
  auto g = Members(got), w = Members(want);
  for (int k = 0; k < 9; ++k) {
    if (g[k]->empty()) continue;
    const bool per_head_sum = k == 2 || k == 5 || k == 7;
    const double sum_bound = std::max(sum_tol, noise ? kNoiseFactor * (*noise)[k] : 0.0);
    EXPECT_LE(RelativeError(*g[k], *w[k]), per_head_sum ? std::max(tol, sum_bound) : tol)
        << what << ": " << kGradNames[k];
  }
}

// The rounding noise of each fast gradient: the backward is linear in (dout, dfinal), so with
// both scaled by s the gradients over s equal the unscaled ones in exact arithmetic, and what
// differs is f32 rounding. s = 3 and 0.3 are not powers of two: every product rounds anew.
// The noise must itself stay at rounding level, so a scale bug cannot widen the bounds.
Noise RoundingNoise(SsdProblem& prob, const Projection& proj, const SsdOptions& options,
                    GradSet at_one) {
  Noise noise{};
  for (double s : {3.0, 0.3}) {
    Projection scaled = proj;
    for (double& v : scaled.w) v *= s;
    for (double& v : scaled.wf) v *= s;
    GradSet g = FastBackward(prob, scaled, options);
    auto gs = Members(g), g1 = Members(at_one);
    for (int k = 0; k < 9; ++k) {
      if (gs[k]->empty()) continue;
      for (double& v : *gs[k]) v /= s;
      noise[k] = std::max(noise[k], RelativeError(*gs[k], *g1[k]));
      EXPECT_LT(noise[k], 1e-2) << kGradNames[k] << ": gradients not linear in dout at scale " << s;
    }
  }
  return noise;
}

// The fast f32 backward against the oracle, per-head sums within their rounding noise.
void ExpectFastMatchesOracle(SsdProblem& prob, const Projection& proj, const SsdOptions& options,
                             double tol, const std::string& what, double sum_tol = 0) {
  const GradSet got = FastBackward(prob, proj, options);
  const Noise noise = RoundingNoise(prob, proj, options, got);
  ExpectClose(got, OracleBackward(prob, proj), tol, what, sum_tol, &noise);
}

SsdCase SmallCase() {
  SsdCase c;
  c.batch = 2;
  c.seqlen = 12;
  c.nheads = 4;
  c.headdim = 3;
  c.ngroups = 2;
  c.dstate = 4;
  c.has_seq_idx = true;
  c.dt_min = 0.002f;
  c.dt_max = 0.15f;
  return c;
}

// The oracle's analytic backward is the derivative of the oracle's forward.
TEST(SsdGrad, OracleMatchesFiniteDifferences) {
  for (int variant = 0; variant < 4; ++variant) {
    SsdCase c = SmallCase();
    if (variant == 1) {  // no options, D per channel, one group
      c.has_z = c.has_dt_bias = c.has_h0 = c.has_seq_idx = false;
      c.softplus = false;
      c.d_per_channel = true;
      c.ngroups = 1;
      c.dt_min = 0.0f;
      c.dt_max = std::numeric_limits<float>::infinity();
    }
    if (variant == 2) c.big_dt_fraction = 0.1;  // softplus identity branch
    if (variant == 3) c.seq_break = 0.5;        // many short sequences
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    SsdProblem prob(c, rng);
    const Projection proj = MakeProjection(prob, rng);
    ExpectClose(OracleBackward(prob, proj), FiniteDifferences(prob, proj), 1e-6, "oracle vs FD");
  }
}

// The fast backwards against finite differences on the same small shapes (looser: f32).
TEST(SsdGrad, FastMatchesFiniteDifferences) {
  for (SsdAlgorithm a : kAlgorithms) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdProblem prob(SmallCase(), rng);
    const Projection proj = MakeProjection(prob, rng);
    ExpectClose(FastBackward(prob, proj, Algo(a, 5)), FiniteDifferences(prob, proj), 1e-4,
                std::string(SsdAlgorithmName(a)) + " vs FD");
  }
}

// The fast backwards against the oracle's on mid shapes, every option on, chunks that do
// and do not divide L.
TEST(SsdGrad, FastMatchesOracle) {
  for (int variant = 0; variant < 3; ++variant) {
    SsdCase c;
    c.batch = 2;
    c.seqlen = 100;
    c.nheads = 4;
    c.headdim = 16;
    c.ngroups = 2;
    c.dstate = 32;
    c.has_seq_idx = variant != 1;
    c.seq_break = 0.03;
    c.d_per_channel = variant == 2;
    c.dt_min = variant == 0 ? 0.002f : 0.0f;
    c.dt_max = variant == 0 ? 0.15f : std::numeric_limits<float>::infinity();
    for (SsdAlgorithm a : kAlgorithms) {
      for (int64_t q : {25, 32}) {
        if (a == SsdAlgorithm::kSequential && q == 32) continue;
        const uint64_t seed = FreshSeed();
        SCOPED_TRACE(SeedTrace(seed));
        SCOPED_TRACE(c.Name());
        Rng rng(seed);
        SsdProblem prob(c, rng);
        const Projection proj = MakeProjection(prob, rng);
        ExpectFastMatchesOracle(prob, proj, Algo(a, q), 1e-5,
                                std::string(SsdAlgorithmName(a)) + " chunk " + std::to_string(q));
      }
    }
  }
}

// Mamba-2 sized heads over a long sequence (many rebases, many chunks). dA and ddt_bias
// measured up to 5e-5 here (chunked, Q = 256), everything else below 1e-5.
TEST(SsdGrad, LongSequence) {
  SsdCase c;
  c.batch = 1;
  c.seqlen = 1024;
  c.nheads = 2;
  c.headdim = 64;
  c.ngroups = 1;
  c.dstate = 64;
  for (SsdAlgorithm a : kAlgorithms) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdProblem prob(c, rng);
    const Projection proj = MakeProjection(prob, rng);
    ExpectFastMatchesOracle(prob, proj, Algo(a, 256), 1e-5,
                            std::string(SsdAlgorithmName(a)) + " long", 2e-4);
  }
}

TEST(SsdGrad, OddSizesAndSingleStep) {
  for (auto [L, P, N] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 8, 16}, {9, 1, 1}, {13, 17, 33}}) {
    SsdCase c = SmallCase();
    c.seqlen = L;
    c.headdim = P;
    c.dstate = N;
    for (SsdAlgorithm a : kAlgorithms) {
      const uint64_t seed = FreshSeed();
      SCOPED_TRACE(SeedTrace(seed));
      SCOPED_TRACE(c.Name());
      Rng rng(seed);
      SsdProblem prob(c, rng);
      const Projection proj = MakeProjection(prob, rng);
      ExpectFastMatchesOracle(prob, proj, Algo(a, 4), 1e-5, SsdAlgorithmName(a));
    }
  }
}

// The fast backwards with dispatch forced to each compiled SIMD target.
TEST(SsdGrad, EverySimdTarget) {
  const int targets = ForEachSimdTarget([&] {
    for (auto [L, P, N] :
         {std::tuple<int64_t, int64_t, int64_t>{3, 13, 5}, {40, 8, 16}, {40, 24, 33}}) {
      SsdCase c = SmallCase();
      c.seqlen = L;
      c.headdim = P;
      c.dstate = N;
      for (SsdAlgorithm a : kAlgorithms) {
        const uint64_t seed = FreshSeed();
        SCOPED_TRACE(SeedTrace(seed));
        SCOPED_TRACE(c.Name());
        Rng rng(seed);
        SsdProblem prob(c, rng);
        const Projection proj = MakeProjection(prob, rng);
        ExpectFastMatchesOracle(prob, proj, Algo(a, 16), 1e-5, SsdAlgorithmName(a), 1e-4);
      }
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(SsdGrad, Bf16) {
  SsdCase c = SmallCase();
  c.seqlen = 40;
  c.headdim = 8;
  c.dstate = 16;
  c.dtype = DType::kBF16;
  for (SsdAlgorithm a : kAlgorithms) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdProblem prob(c, rng);
    Projection proj = MakeProjection(prob, rng);
    // dout is stored in bf16: give the oracle the rounded values.
    HostTensor w(prob.SeqShape(), DType::kBF16);
    proj.w = w.Fill(proj.w);
    ExpectClose(FastBackward(prob, proj, Algo(a, 8)), OracleBackward(prob, proj), 1e-2,
                std::string(SsdAlgorithmName(a)) + " bf16");
  }
}

// Without dfinal_states, and with only some gradients asked for: those are right.
TEST(SsdGrad, PartialOutputs) {
  for (SsdAlgorithm a : kAlgorithms) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdCase c = SmallCase();
    c.seqlen = 30;
    SsdProblem prob(c, rng);
    const Projection proj = MakeProjection(prob, rng, /*with_final=*/false);
    const GradSet want = OracleBackward(prob, proj);
    for (int only = 0; only < 9; ++only) {
      Wanted wanted;
      for (int k = 0; k < 9; ++k) wanted.grad[k] = k == only;
      GradSet got = FastBackward(prob, proj, Algo(a, 7), wanted);
      ASSERT_FALSE(Members(got)[only]->empty());
      ExpectClose(got, want, 1e-5, std::string(SsdAlgorithmName(a)) + " only " + kGradNames[only]);
    }
  }
}

// The same inputs and thread count give the same bits; the chunked and sequential
// backwards agree with the oracle at 1, 2 and 3 threads.
TEST(SsdGrad, Deterministic) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  SsdCase c = SmallCase();
  c.seqlen = 40;
  c.nheads = 6;
  c.ngroups = 1;
  c.batch = 1;
  SsdProblem prob(c, rng);
  const Projection proj = MakeProjection(prob, rng);
  const GradSet want = OracleBackward(prob, proj);
  for (SsdAlgorithm a : kAlgorithms) {
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      GradSet g1 = FastBackward(prob, proj, Algo(a, 16));
      GradSet g2 = FastBackward(prob, proj, Algo(a, 16));
      auto m1 = Members(g1), m2 = Members(g2);
      for (int k = 0; k < 9; ++k)
        EXPECT_EQ(*m1[k], *m2[k]) << SsdAlgorithmName(a) << " " << kGradNames[k];
      ExpectClose(g1, want, 1e-5,
                  std::string(SsdAlgorithmName(a)) + " threads " + std::to_string(threads));
    }
  }
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing

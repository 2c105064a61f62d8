// Selective-scan backward: the oracle's analytic gradients against fp64 central finite
// differences, the fast f32 backward against both, on fresh random inputs.
// The loss is a random projection, loss = sum(out * w) + sum(final_state * wf), so dout = w and
// dfinal_state = wf are random and nonzero.
#include <functional>
#include <string>

#include "selective_scan_fixture.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

// All nine gradients in double, one vector per input (empty where the input is absent).
struct GradSet {
  std::vector<double> du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dh0;
};

struct Projection {
  std::vector<double> w, wf;  // (B, D, L), (B, D, N)
};

double Loss(ScanProblem& prob, const Projection& proj) {
  std::vector<double> out(prob.SeqSize()), state(prob.StateSize());
  ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), out.data(), state.data());
  double loss = 0;
  for (size_t i = 0; i < out.size(); ++i) loss += out[i] * proj.w[i];
  for (size_t i = 0; i < state.size(); ++i) loss += state[i] * proj.wf[i];
  return loss;
}

GradSet OracleBackward(ScanProblem& prob, const Projection& proj) {
  GradSet g;
  g.du.resize(prob.u_d.size());
  g.ddelta.resize(prob.delta_d.size());
  g.dA.resize(prob.A_d.size());
  g.dB.resize(prob.B_d.size());
  g.dC.resize(prob.C_d.size());
  g.dD.resize(prob.D_d.size());
  g.dz.resize(prob.z_d.size());
  g.ddelta_bias.resize(prob.delta_bias_d.size());
  g.dh0.resize(prob.h0_d.size());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  ref::ScanGrads grads{ptr(g.du), ptr(g.ddelta), ptr(g.dA), ptr(g.dB), ptr(g.dC),
                       ptr(g.dD), ptr(g.dz),     ptr(g.ddelta_bias), ptr(g.dh0)};
  ref::SelectiveScanBackward(prob.Shape(), prob.RefInputs(), proj.w.data(), proj.wf.data(), grads);
  return g;
}

// Runs the fast backward; absent inputs get absent gradient outputs.
GradSet FastBackward(ScanProblem& prob, const Projection& proj, const SelectiveScanOptions& options = {}) {
  const ScanCase& c = prob.c;
  HostTensor dout({c.batch, c.dim, c.seqlen}, c.dtype), dfinal({c.batch, c.dim, c.dstate}, DType::kF32);
  dout.Fill(proj.w);
  dfinal.Fill(proj.wf);
  HostTensor du({c.batch, c.dim, c.seqlen}, c.dtype), ddelta({c.batch, c.dim, c.seqlen}, c.dtype);
  HostTensor dA({c.dim, c.dstate}, DType::kF32);
  HostTensor dB(BCShape(c, c.b_form), c.dtype), dC(BCShape(c, c.c_form), c.dtype);
  HostTensor dD({c.dim}, DType::kF32), dz({c.batch, c.dim, c.seqlen}, c.dtype);
  HostTensor ddelta_bias({c.dim}, DType::kF32), dh0({c.batch, c.dim, c.dstate}, DType::kF32);
  for (HostTensor* t : {&du, &ddelta, &dA, &dB, &dC, &dD, &dz, &ddelta_bias, &dh0}) t->Poison();
  SelectiveScanGrads grads;
  grads.du = du.view();
  grads.ddelta = ddelta.view();
  grads.dA = dA.view();
  grads.dB = dB.view();
  grads.dC = dC.view();
  if (c.has_D) grads.dD = dD.view();
  if (c.has_z) grads.dz = dz.view();
  if (c.has_delta_bias) grads.ddelta_bias = ddelta_bias.view();
  if (c.has_h0) grads.dinitial_state = dh0.view();
  const Status status = SelectiveScanBackward(prob.Inputs(), dout.view(), dfinal.view(), grads, options);
  EXPECT_TRUE(status.ok()) << status.message();
  GradSet g;
  g.du = du.ToDouble();
  g.ddelta = ddelta.ToDouble();
  g.dA = dA.ToDouble();
  g.dB = dB.ToDouble();
  g.dC = dC.ToDouble();
  if (c.has_D) g.dD = dD.ToDouble();
  if (c.has_z) g.dz = dz.ToDouble();
  if (c.has_delta_bias) g.ddelta_bias = ddelta_bias.ToDouble();
  if (c.has_h0) g.dh0 = dh0.ToDouble();
  return g;
}

// Finite-difference gradients of the oracle forward, every coordinate of every input.
GradSet FiniteDifferences(ScanProblem& prob, const Projection& proj) {
  GradSet g;
  const double step = 1e-6;
  auto fd = [&](std::vector<double>& x, std::vector<double>& out) {
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = CentralDifference(x, i, step, [&] { return Loss(prob, proj); });
  };
  fd(prob.u_d, g.du);
  fd(prob.delta_d, g.ddelta);
  fd(prob.A_d, g.dA);
  fd(prob.B_d, g.dB);
  fd(prob.C_d, g.dC);
  fd(prob.D_d, g.dD);
  fd(prob.z_d, g.dz);
  fd(prob.delta_bias_d, g.ddelta_bias);
  fd(prob.h0_d, g.dh0);
  return g;
}

void ExpectGradsClose(const GradSet& got, const GradSet& want, double tol, const std::string& what) {
  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>> rows[] = {
      {"du", {&got.du, &want.du}},       {"ddelta", {&got.ddelta, &want.ddelta}},
      {"dA", {&got.dA, &want.dA}},       {"dB", {&got.dB, &want.dB}},
      {"dC", {&got.dC, &want.dC}},       {"dD", {&got.dD, &want.dD}},
      {"dz", {&got.dz, &want.dz}},       {"ddelta_bias", {&got.ddelta_bias, &want.ddelta_bias}},
      {"dh0", {&got.dh0, &want.dh0}}};
  for (const auto& [name, pair] : rows) {
    ASSERT_EQ(pair.first->size(), pair.second->size()) << name << " " << what;
    if (pair.second->empty()) continue;
    EXPECT_LE(RelativeError(*pair.first, *pair.second), tol) << name << " " << what;
  }
}

Projection RandomProjection(const ScanProblem& prob, Rng& rng) {
  return {rng.NormalVec(prob.SeqSize()), rng.NormalVec(prob.StateSize())};
}

std::vector<ScanCase> SmallCases() {
  std::vector<ScanCase> cases;
  ScanCase base;
  base.batch = 2;
  base.dim = 2;
  base.seqlen = 7;
  base.dstate = 3;
  cases.push_back(base);
  ScanCase one = base;
  one.seqlen = 1;
  one.dstate = 1;
  cases.push_back(one);
  ScanCase grouped = base;
  grouped.dim = 4;
  grouped.groups = 2;
  grouped.b_form = grouped.c_form = BCForm::kGrouped;
  cases.push_back(grouped);
  ScanCase constant = base;
  constant.b_form = BCForm::kConstant;
  constant.c_form = BCForm::kConstant;
  constant.seqlen = 9;
  cases.push_back(constant);
  ScanCase bare = base;  // no optional input at all, no softplus
  bare.has_D = bare.has_z = bare.has_delta_bias = bare.has_h0 = bare.softplus = false;
  cases.push_back(bare);
  ScanCase identity = base;  // some deltas on softplus's identity branch
  identity.big_delta_fraction = 0.2;
  cases.push_back(identity);
  return cases;
}

std::string Describe(const ScanCase& c) {
  return "B=" + std::to_string(c.batch) + " D=" + std::to_string(c.dim) + " L=" + std::to_string(c.seqlen) +
         " N=" + std::to_string(c.dstate) + " forms=" + std::to_string(int(c.b_form)) + "/" +
         std::to_string(int(c.c_form)) + " softplus=" + std::to_string(c.softplus);
}

TEST(SelectiveScanBackward, OracleMatchesFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (const ScanCase& c : SmallCases()) {
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    const Projection proj = RandomProjection(prob, rng);
    ExpectGradsClose(OracleBackward(prob, proj), FiniteDifferences(prob, proj), 1e-7, Describe(c));
  }
}

TEST(SelectiveScanBackward, FastMatchesFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  uint64_t k = 0;
  for (const ScanCase& c : SmallCases()) {
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    const Projection proj = RandomProjection(prob, rng);
    SelectiveScanOptions options;
    options.chunk_length = 3;  // several checkpoints even on these short rows
    ExpectGradsClose(FastBackward(prob, proj, options), FiniteDifferences(prob, proj), 1e-5, Describe(c));
  }
}

TEST(SelectiveScanBackward, FastMatchesOracleOnMidShapes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::vector<ScanCase> cases;
  for (int64_t N : {4, 16, 64}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 12;
    c.seqlen = 301;
    c.dstate = N;
    cases.push_back(c);
  }
  ScanCase grouped;
  grouped.batch = 2;
  grouped.dim = 12;
  grouped.groups = 3;
  grouped.seqlen = 200;
  grouped.dstate = 16;
  grouped.b_form = BCForm::kGrouped;
  grouped.c_form = BCForm::kConstant;
  cases.push_back(grouped);
  ScanCase tiled;  // D / G a multiple of the vector width, variable B/C: channel tiles
  tiled.batch = 2;
  tiled.dim = 32;
  tiled.groups = 2;
  tiled.seqlen = 150;
  tiled.dstate = 16;
  tiled.b_form = BCForm::kGrouped;
  tiled.c_form = BCForm::kVariable;
  cases.push_back(tiled);
  ScanCase tiled_odd_state = tiled;
  tiled_odd_state.dstate = 5;
  tiled_odd_state.seqlen = 77;
  cases.push_back(tiled_odd_state);
  ScanCase big_state;
  big_state.dim = 3;
  big_state.seqlen = 70;
  big_state.dstate = 256;
  cases.push_back(big_state);
  uint64_t k = 0;
  for (const ScanCase& c : cases) {
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    const Projection proj = RandomProjection(prob, rng);
    ExpectGradsClose(FastBackward(prob, proj), OracleBackward(prob, proj), 1e-4, Describe(c));
  }
}

TEST(SelectiveScanBackward, Bf16InputsWithinOnePercent) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScanCase c;
  c.batch = 2;
  c.dim = 8;
  c.seqlen = 90;
  c.dstate = 16;
  c.dtype = DType::kBF16;
  Rng rng(seed);
  ScanProblem prob(c, rng);
  Projection proj = RandomProjection(prob, rng);
  HostTensor rounded({c.batch, c.dim, c.seqlen}, DType::kBF16);
  proj.w = rounded.Fill(proj.w);  // dout is bf16 too: the oracle sees the same values
  ExpectGradsClose(FastBackward(prob, proj), OracleBackward(prob, proj), 1e-2, Describe(c));
}

TEST(SelectiveScanBackward, CheckpointIntervalDoesNotChangeTheResult) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScanCase c;
  c.batch = 2;
  c.dim = 4;
  c.seqlen = 100;
  c.dstate = 16;
  Rng rng(seed);
  ScanProblem prob(c, rng);
  const Projection proj = RandomProjection(prob, rng);
  const GradSet want = OracleBackward(prob, proj);
  for (int64_t chunk : {1, 7, 33, 100, 250}) {
    SelectiveScanOptions options;
    options.chunk_length = chunk;
    ExpectGradsClose(FastBackward(prob, proj, options), want, 1e-4, "chunk " + std::to_string(chunk));
  }
}

TEST(SelectiveScanBackward, AbsentGradientOutputsLeaveTheOthersUnchanged) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScanCase c;
  c.batch = 2;
  c.dim = 4;
  c.seqlen = 30;
  c.dstate = 8;
  Rng rng(seed);
  ScanProblem prob(c, rng);
  const Projection proj = RandomProjection(prob, rng);
  const GradSet want = OracleBackward(prob, proj);
  HostTensor dout({c.batch, c.dim, c.seqlen}, DType::kF32), dA({c.dim, c.dstate}, DType::kF32);
  HostTensor dB({c.batch, c.dstate, c.seqlen}, DType::kF32);
  dout.Fill(proj.w);
  dA.Poison();
  dB.Poison();
  HostTensor dfinal({c.batch, c.dim, c.dstate}, DType::kF32);
  dfinal.Fill(proj.wf);
  SelectiveScanGrads grads;  // only dA and dB wanted
  grads.dA = dA.view();
  grads.dB = dB.view();
  ASSERT_TRUE(SelectiveScanBackward(prob.Inputs(), dout.view(), dfinal.view(), grads).ok());
  EXPECT_LE(RelativeError(dA.ToDouble(), want.dA), 1e-4);
  EXPECT_LE(RelativeError(dB.ToDouble(), want.dB), 1e-4);
}

TEST(SelectiveScanBackward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScanCase c;
  c.batch = 3;
  c.dim = 16;
  c.seqlen = 150;
  c.dstate = 16;
  for (int threads : {1, 2}) {
    SetNumThreads(threads);
    Rng rng(seed);
    ScanProblem prob(c, rng);
    const Projection proj = RandomProjection(prob, rng);
    const GradSet first = FastBackward(prob, proj), second = FastBackward(prob, proj);
    EXPECT_EQ(first.du, second.du) << threads;
    EXPECT_EQ(first.ddelta, second.ddelta) << threads;
    EXPECT_EQ(first.dA, second.dA) << threads;
    EXPECT_EQ(first.dB, second.dB) << threads;
    EXPECT_EQ(first.dC, second.dC) << threads;
    EXPECT_EQ(first.dD, second.dD) << threads;
    EXPECT_EQ(first.ddelta_bias, second.ddelta_bias) << threads;
    EXPECT_EQ(first.dh0, second.dh0) << threads;
  }
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing

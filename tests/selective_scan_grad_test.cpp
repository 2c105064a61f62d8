// Selective-scan backward, all nine gradients (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias,
// dinitial_state), on fresh random inputs with poisoned outputs:
//   - the oracle's analytic backward against fp64 central finite differences of the oracle
//     forward (validates the oracle), and the fast f32 backward against the same differences;
//   - the fast backward against the oracle's analytic backward on mid shapes, every B/C form,
//     optional input, checkpoint interval, stride layout and compiled SIMD target;
//   - absent gradient outputs, and bit-exact determinism.
// The loss is a random projection, loss = sum(out * w) + sum(final_state * wf), so dout = w and
// dfinal_state = wf are random and nonzero (dfinal_state is part of the API, unlike mamba_ssm).
// Errors are ||g - ref|| / ||ref|| per gradient; the bounds (kOracleFdBound ...) and the errors
// measured over many seeds are given where each is defined.
#include <array>
#include <string>
#include <vector>

#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

// Oracle vs finite differences: measured <= 2e-9 (step 1e-6: truncation ~1e-12, rounding
// ~1e-10 per coordinate); the bound leaves 50x.
constexpr double kOracleFdBound = 2e-8;
// Fast f32 backward vs finite differences on the small shapes: measured <= 2e-6.
constexpr double kFastFdBound = 1e-4;
// Fast f32 backward vs the oracle's analytic backward, L up to 700: measured <= 1.5e-5 (dA,
// a sum over B L terms, is the largest). An indexing or formula bug gives >= 1e-2.
constexpr double kFastOracleBound = 1e-4;
// bf16 inputs, dout and the bf16 gradients rounded on output: measured <= 3e-3.
constexpr double kBf16Bound = 1e-2;

constexpr int kNumGrads = 9;
constexpr const char* kGradNames[kNumGrads] = {
    "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dinitial_state"};
constexpr unsigned kAllGrads = (1u << kNumGrads) - 1;

// The nine gradients in double, in kGradNames order; empty where the input is absent.
using GradSet = std::array<std::vector<double>, kNumGrads>;

// dout and dfinal_state of the projection loss, as tensors and as the values they hold.
struct Projection {
  PaddedTensor dout, dfinal;
  std::vector<double> w, wf;  // (B, D, L) as stored (rounded to bf16 for bf16 problems), (B, D, N)

  Projection(const ScanProblem& prob, Rng& rng)
      : dout(prob.SeqShape(), prob.c.dtype, prob.c.pad),
        dfinal(prob.StateShape(), DType::kF32, prob.c.pad) {
    w = dout.Fill(rng.NormalVec(prob.SeqSize()));
    wf = dfinal.Fill(rng.NormalVec(prob.StateSize()));
  }
};

// The inputs' double values in kGradNames order (the coordinates the gradients are taken in).
std::array<std::vector<double>*, kNumGrads> InputValues(ScanProblem& prob) {
  return {&prob.u_d, &prob.delta_d, &prob.A_d,          &prob.B_d, &prob.C_d,
          &prob.D_d, &prob.z_d,     &prob.delta_bias_d, &prob.h0_d};
}

double Loss(ScanProblem& prob, const Projection& proj) {
  std::vector<double> out(prob.SeqSize()), state(prob.StateSize());
  ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), out.data(), state.data());
  double loss = 0;
  for (size_t i = 0; i < out.size(); ++i) loss += out[i] * proj.w[i];
  for (size_t i = 0; i < state.size(); ++i) loss += state[i] * proj.wf[i];
  return loss;
}

GradSet OracleBackward(ScanProblem& prob, const Projection& proj, bool with_dfinal = true) {
  GradSet g;
  const auto inputs = InputValues(prob);
  for (int i = 0; i < kNumGrads; ++i) g[i].resize(inputs[i]->size());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  const ref::ScanGrads grads{ptr(g[0]), ptr(g[1]), ptr(g[2]), ptr(g[3]), ptr(g[4]),
                             ptr(g[5]), ptr(g[6]), ptr(g[7]), ptr(g[8])};
  ref::SelectiveScanBackward(prob.Shape(), prob.RefInputs(), proj.w.data(),
                             with_dfinal ? proj.wf.data() : nullptr, grads);
  return g;
}

// Finite differences of the oracle's loss, every coordinate of every input: central
// differences at steps h and 2h combined by Richardson extrapolation, (4 D(h) - D(2h)) / 3,
// whose error is O(h^4) truncation plus ~eps |loss| / h rounding. h = 1e-4 keeps both near
// 1e-10 even where the loss is large (deltas of 20+) and a gradient is small (dh0 behind a
// strong decay); a plain 1e-6 central difference leaves ~1e-8 of rounding there.
GradSet FiniteDifferences(ScanProblem& prob, const Projection& proj) {
  constexpr double kStep = 1e-4;
  GradSet g;
  const auto inputs = InputValues(prob);
  auto loss = [&] { return Loss(prob, proj); };
  for (int i = 0; i < kNumGrads; ++i) {
    std::vector<double>& x = *inputs[i];
    g[i].resize(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      g[i][j] = (4.0 * CentralDifference(x, j, kStep, loss) -
                 CentralDifference(x, j, 2.0 * kStep, loss)) /
                3.0;
    }
  }
  return g;
}

// The fast backward's gradient tensors (poisoned before the call).
struct FastGrads {
  std::array<PaddedTensor, kNumGrads> t;
  unsigned present = 0;  // bit i: gradient i was requested

  GradSet Values() const {
    GradSet g;
    for (int i = 0; i < kNumGrads; ++i) {
      if (present >> i & 1) g[i] = t[i].ToDouble();
    }
    return g;
  }
};

// Runs the fast backward requesting the gradients in `want` (those of absent inputs are never
// requested); with_dfinal = false passes no dfinal_state.
FastGrads RunFastBackward(ScanProblem& prob, Projection& proj,
                          const SelectiveScanOptions& options = {}, unsigned want = kAllGrads,
                          bool with_dfinal = true, const Tensor& chunk_states = {}) {
  const ScanCase& c = prob.c;
  const std::vector<int64_t> seq = prob.SeqShape(), state = prob.StateShape();
  FastGrads fg;
  fg.t = {PaddedTensor(seq, c.dtype, c.pad),
          PaddedTensor(seq, c.dtype, c.pad),
          PaddedTensor({c.dim, c.dstate}, DType::kF32, c.pad),
          PaddedTensor(BCShape(c, c.b_form), c.dtype, c.pad),
          PaddedTensor(BCShape(c, c.c_form), c.dtype, c.pad),
          PaddedTensor({c.dim}, DType::kF32),
          PaddedTensor(seq, c.dtype, c.pad),
          PaddedTensor({c.dim}, DType::kF32),
          PaddedTensor(state, DType::kF32, c.pad)};
  const bool input_present[kNumGrads] = {
      true, true, true, true, true, c.has_D, c.has_z, c.has_delta_bias, c.has_h0};
  Tensor views[kNumGrads];
  for (int i = 0; i < kNumGrads; ++i) {
    fg.t[i].Poison();
    if (input_present[i] && (want >> i & 1)) {
      fg.present |= 1u << i;
      views[i] = fg.t[i].view();
    }
  }
  const SelectiveScanGrads grads{views[0], views[1], views[2], views[3], views[4],
                                 views[5], views[6], views[7], views[8]};
  const Status status = SelectiveScanBackward(prob.Inputs(), proj.dout.view(),
                                              with_dfinal ? proj.dfinal.view() : Tensor{},
                                              chunk_states, grads, options);
  EXPECT_TRUE(status.ok()) << status.message();
  for (int i = 0; i < kNumGrads; ++i) {
    EXPECT_TRUE(fg.t[i].PaddingUntouched()) << kGradNames[i] << " written outside its view";
    if (!(fg.present >> i & 1)) {
      bool untouched = true;
      for (double v : fg.t[i].ToDouble()) untouched = untouched && std::isnan(v);
      EXPECT_TRUE(untouched) << "the unrequested " << kGradNames[i] << " was written";
    }
  }
  return fg;
}

void ExpectGradsClose(const GradSet& got, const GradSet& want, double bound, WorstErrors& worst,
                      const std::string& what) {
  for (int i = 0; i < kNumGrads; ++i) {
    if (want[i].empty() || got[i].empty()) continue;
    const double error = RelativeError(got[i], want[i]);
    worst.Track(what + " " + kGradNames[i], error);
    EXPECT_LE(error, bound) << kGradNames[i] << " " << what;
  }
}

// Small shapes for the finite differences: every B/C form, L = 1, odd L, no optional input,
// the softplus identity branch, and (D = 16) the channel-tiled layout on AVX-512 / AVX2.
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
  grouped.seqlen = 5;
  cases.push_back(grouped);
  ScanCase constant = base;
  constant.b_form = constant.c_form = BCForm::kConstant;
  constant.seqlen = 9;
  cases.push_back(constant);
  ScanCase mixed = base;
  mixed.b_form = BCForm::kConstant;
  mixed.c_form = BCForm::kVariable;
  mixed.dstate = 4;
  cases.push_back(mixed);
  ScanCase mixed2 = grouped;
  mixed2.c_form = BCForm::kConstant;
  cases.push_back(mixed2);
  ScanCase bare = base;
  bare.has_D = bare.has_z = bare.has_delta_bias = bare.has_h0 = bare.softplus = false;
  cases.push_back(bare);
  ScanCase identity = base;
  identity.big_delta_fraction = 0.25;
  cases.push_back(identity);
  ScanCase tiled;
  tiled.batch = 1;
  tiled.dim = 16;
  tiled.seqlen = 6;
  tiled.dstate = 2;
  cases.push_back(tiled);
  return cases;
}

TEST(SelectiveScanBackward, OracleMatchesFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (const ScanCase& c : SmallCases()) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    Projection proj(prob, rng);
    ExpectGradsClose(OracleBackward(prob, proj), FiniteDifferences(prob, proj), kOracleFdBound,
                     worst, "oracle-fd");
  }
}

TEST(SelectiveScanBackward, FastMatchesFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (const ScanCase& c : SmallCases()) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    Projection proj(prob, rng);
    SelectiveScanOptions options;
    options.chunk_length = 3;  // several checkpoints even on these short rows
    ExpectGradsClose(RunFastBackward(prob, proj, options).Values(), FiniteDifferences(prob, proj),
                     kFastFdBound, worst, "fast-fd");
  }
}

// Mid shapes (B = 2, D = 24, L = 200..700): checkpoints at the default interval, long adjoint
// chains, every state-size class, every B/C form and both layouts.
TEST(SelectiveScanBackward, FastMatchesOracleOnMidShapes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  std::vector<ScanCase> cases;
  for (int64_t L : {200, 457, 700}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 24;
    c.seqlen = L;
    c.dstate = 16;
    cases.push_back(c);
  }
  for (int64_t N : {1, 4, 64}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 6;
    c.seqlen = 300;
    c.dstate = N;
    cases.push_back(c);
  }
  ScanCase big_state;
  big_state.dim = 3;
  big_state.seqlen = 70;
  big_state.dstate = 256;
  cases.push_back(big_state);
  ScanCase grouped_constant;  // B grouped (G = 3), C constant
  grouped_constant.batch = 2;
  grouped_constant.dim = 12;
  grouped_constant.groups = 3;
  grouped_constant.seqlen = 200;
  grouped_constant.dstate = 16;
  grouped_constant.b_form = BCForm::kGrouped;
  grouped_constant.c_form = BCForm::kConstant;
  cases.push_back(grouped_constant);
  ScanCase constant = grouped_constant;
  constant.b_form = BCForm::kConstant;
  cases.push_back(constant);
  ScanCase tiled;  // D / G a multiple of the vector width with variable B/C: channel tiles
  tiled.batch = 2;
  tiled.dim = 64;
  tiled.groups = 2;
  tiled.seqlen = 150;
  tiled.dstate = 16;
  tiled.b_form = BCForm::kGrouped;
  tiled.c_form = BCForm::kVariable;
  cases.push_back(tiled);
  ScanCase tiled_odd_state = tiled;
  tiled_odd_state.dim = 32;
  tiled_odd_state.dstate = 5;
  tiled_odd_state.seqlen = 77;
  cases.push_back(tiled_odd_state);
  uint64_t k = 0;
  for (const ScanCase& c : cases) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    Projection proj(prob, rng);
    ExpectGradsClose(RunFastBackward(prob, proj).Values(), OracleBackward(prob, proj),
                     kFastOracleBound, worst, "fast-oracle");
  }
}

TEST(SelectiveScanBackward, Bf16Inputs) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
    for (int64_t D : {8, 32}) {
      ScanCase c;
      c.batch = 2;
      c.dim = D;
      c.groups = 2;
      c.seqlen = 90;
      c.dstate = 16;
      c.b_form = c.c_form = form;
      c.dtype = DType::kBF16;
      SCOPED_TRACE(c.Name());
      Rng rng(seed + k++);
      ScanProblem prob(c, rng);
      Projection proj(prob, rng);
      ExpectGradsClose(RunFastBackward(prob, proj).Values(), OracleBackward(prob, proj), kBf16Bound,
                       worst, "bf16");
    }
  }
}

// The checkpoint interval (options.chunk_length) changes only the recomputation schedule:
// intervals of 1, ones that do not divide L, and ones longer than L.
TEST(SelectiveScanBackward, CheckpointIntervals) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (int64_t D : {4, 16}) {
    ScanCase c;
    c.batch = 2;
    c.dim = D;
    c.seqlen = 100;
    c.dstate = 16;
    Rng rng(seed + k++);
    ScanProblem prob(c, rng);
    Projection proj(prob, rng);
    const GradSet want = OracleBackward(prob, proj);
    for (int64_t chunk : {1, 7, 33, 64, 99, 100, 101, 250}) {
      SCOPED_TRACE(c.Name() + " chunk=" + std::to_string(chunk));
      SelectiveScanOptions options;
      options.chunk_length = chunk;
      ExpectGradsClose(RunFastBackward(prob, proj, options).Values(), want, kFastOracleBound, worst,
                       "chunk");
    }
  }
}

// Every combination of D, z, delta_bias, initial_state, delta_softplus and dfinal_state, on
// the per-row and the tiled layout.
TEST(SelectiveScanBackward, EveryOptionalInputOnAndOff) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  for (int mask = 0; mask < 64; ++mask) {
    ScanCase c;
    c.batch = 2;
    c.dim = mask % 2 ? 16 : 3;
    c.seqlen = 30;
    c.dstate = 8;
    c.has_D = mask & 1;
    c.has_z = mask & 2;
    c.has_delta_bias = mask & 4;
    c.has_h0 = mask & 8;
    c.softplus = mask & 16;
    const bool with_dfinal = mask & 32;
    SCOPED_TRACE(c.Name() + (with_dfinal ? " dfinal" : " no-dfinal"));
    Rng rng(seed + mask);
    ScanProblem prob(c, rng);
    Projection proj(prob, rng);
    ExpectGradsClose(RunFastBackward(prob, proj, {}, kAllGrads, with_dfinal).Values(),
                     OracleBackward(prob, proj, with_dfinal), kFastOracleBound, worst, "options");
  }
}

// Every tensor (inputs, dout, dfinal_state and the nine gradients) inside a larger buffer:
// input padding holds NaN, gradient padding must stay untouched (RunFastBackward checks).
TEST(SelectiveScanBackward, PaddedOuterStrides) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
      for (int64_t D : {4, 32}) {
        ScanCase c;
        c.batch = 2;
        c.dim = D;
        c.groups = 2;
        c.seqlen = 23;
        c.dstate = 5;
        c.b_form = c.c_form = form;
        c.dtype = dtype;
        c.pad = 3;
        SCOPED_TRACE(c.Name());
        Rng rng(seed + k++);
        ScanProblem prob(c, rng);
        Projection proj(prob, rng);
        SelectiveScanOptions options;
        options.chunk_length = 8;
        ExpectGradsClose(RunFastBackward(prob, proj, options).Values(), OracleBackward(prob, proj),
                         dtype == DType::kF32 ? kFastOracleBound : kBf16Bound, worst,
                         DTypeName(dtype));
      }
    }
  }
}

// Requesting only some gradients gives the requested ones the same bits as requesting all.
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
      Projection proj(prob, rng);
      const FastGrads all = RunFastBackward(prob, proj);
      for (unsigned want : subsets) {
        SCOPED_TRACE(c.Name() + " requested mask " + std::to_string(want));
        const FastGrads some = RunFastBackward(prob, proj, {}, want);
        for (int i = 0; i < kNumGrads; ++i) {
          if (some.present >> i & 1)
            EXPECT_TRUE(some.t[i].Bytes() == all.t[i].Bytes()) << kGradNames[i];
        }
      }
    }
  }
}

// The same problem twice with the same thread count gives the same bytes in every gradient
// (dB/dC of the variable forms are reduced across thread blocks in a fixed order).
TEST(SelectiveScanBackward, DeterministicBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
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
        Projection proj(prob, rng);
        const FastGrads first = RunFastBackward(prob, proj), second = RunFastBackward(prob, proj);
        for (int i = 0; i < kNumGrads; ++i) {
          EXPECT_TRUE(first.t[i].Bytes() == second.t[i].Bytes()) << kGradNames[i];
        }
        // And right: the multi-block reductions are checked against the oracle too.
        ExpectGradsClose(first.Values(), OracleBackward(prob, proj), kFastOracleBound, worst,
                         "threads");
      }
    }
  }
}

// Given the chunk states its forward saved, the backward (which then skips its own forward
// pass on the channel-tiled path, and ignores them on the per-row one) gives the same bytes in
// every gradient as without them: every B/C form, checkpoint intervals dividing L or not, and
// the bf16 inputs. And the same gradients means right ones: the first run is checked against
// the oracle.
TEST(SelectiveScanBackward, FromTheForwardsChunkStates) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
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
        Projection proj(prob, rng);
        SelectiveScanOptions options;
        options.chunk_length = chunk;
        const int64_t K = SelectiveScanChunkCount(c.seqlen, options);
        PaddedTensor out(prob.SeqShape(), c.dtype, c.pad),
            states({c.batch, c.dim, K, c.dstate}, DType::kF32, c.pad);
        states.Poison();
        const Status status =
            SelectiveScanForward(prob.Inputs(), out.view(), Tensor{}, states.view(), options);
        ASSERT_TRUE(status.ok()) << status.message();
        const FastGrads given =
            RunFastBackward(prob, proj, options, kAllGrads, true, states.view());
        const FastGrads recomputed = RunFastBackward(prob, proj, options);
        for (int i = 0; i < kNumGrads; ++i) {
          EXPECT_TRUE(given.t[i].Bytes() == recomputed.t[i].Bytes()) << kGradNames[i];
        }
        if (dtype == DType::kF32) {
          ExpectGradsClose(given.Values(), OracleBackward(prob, proj), kFastOracleBound, worst,
                           "chunk states");
        }
      }
    }
  }
}

// The backward with dispatch forced to each compiled SIMD target (see ForEachSimdTarget).
TEST(SelectiveScanBackward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  const int targets = ForEachSimdTarget([&] {
    for (int64_t N : {1, 5, 16}) {
      for (int64_t D : {3, 32}) {
        ScanCase c;
        c.batch = 2;
        c.dim = D;
        c.seqlen = 50;
        c.dstate = N;
        c.dtype = N == 5 && D == 32 ? DType::kBF16 : DType::kF32;
        SCOPED_TRACE(c.Name());
        Rng rng(seed + k++);
        ScanProblem prob(c, rng);
        Projection proj(prob, rng);
        SelectiveScanOptions options;
        options.chunk_length = 16;
        ExpectGradsClose(RunFastBackward(prob, proj, options).Values(), OracleBackward(prob, proj),
                         c.dtype == DType::kF32 ? kFastOracleBound : kBf16Bound, worst,
                         DTypeName(c.dtype));
      }
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

}  // namespace
}  // namespace ssmkit::testing

// Selective-scan forward against the fp64 oracle: every algorithm, dtype, B/C form, optional
// input, chunk length, stride layout and compiled SIMD target, on fresh random inputs with
// poisoned outputs; and bit-exact determinism. Errors are ||out - ref|| / ||ref||; bounds:
// f32 1e-5 (out and final_state), bf16 inputs 1e-2 on out (measured <= ~3e-3, mostly the
// rounding of out itself to bf16) and 1e-5 on the f32 final_state.
//
// Paths inside the kernel the cases below are chosen to reach (src/cpu/scan_forward.cpp):
// L = 1 (single step), channel tiles (sequential, variable B/C, D / G a multiple of the
// vector width W), per-row state held in 1, 2 or 4 vectors or in memory (other N), and the
// pair-based algorithms.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kF32Bound = 1e-5;
constexpr double kBf16Bound = 1e-2;

constexpr ScanAlgorithm kAllAlgorithms[] = {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked,
                                            ScanAlgorithm::kBlelloch, ScanAlgorithm::kHillisSteele,
                                            ScanAlgorithm::kLogSpace};
constexpr ScanAlgorithm kStableAlgorithms[] = {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked,
                                               ScanAlgorithm::kBlelloch,
                                               ScanAlgorithm::kHillisSteele};

// Log-space computes h_l = P_l (h0 + sum_k x_k / P_k), P_l = exp(sum_{k<=l} dt_k A): 1/P
// overflows f32 once the summed decay passes ~88 (docs/numerics.md), so it is only tested
// where it is sane: short sequences (L <= 64 here) with mild decay, dt <= 0.1 and |A| <= e.
// The other algorithms are tested on the realistic (strong) decays with the same bounds.
ScanCase SaneForLogSpace(ScanCase c) {
  c.dt_max = 0.1;
  c.a_slope = 0.0;
  return c;
}

// The fast forward's outputs for one problem, poisoned (NaN) before the call.
struct ForwardRun {
  PaddedTensor out, final_state;
};

ForwardRun RunFast(ScanProblem& prob, ScanAlgorithm algorithm, int64_t chunk = 0,
                   bool with_state = true) {
  const ScanCase& c = prob.c;
  ForwardRun run{PaddedTensor(prob.SeqShape(), c.dtype, c.pad),
                 PaddedTensor(prob.StateShape(), DType::kF32, c.pad)};
  run.out.Poison();
  run.final_state.Poison();
  SelectiveScanOptions options;
  options.algorithm = algorithm;
  options.chunk_length = chunk;
  const Status status = SelectiveScanForward(
      prob.Inputs(), run.out.view(), with_state ? run.final_state.view() : Tensor{}, options);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(run.out.PaddingUntouched()) << "out written outside its view";
  EXPECT_TRUE(run.final_state.PaddingUntouched()) << "final_state written outside its view";
  return run;
}

// Runs one algorithm on one case and checks out (and final_state) against the oracle.
void CheckForward(const ScanCase& c, ScanAlgorithm algorithm, uint64_t seed, WorstErrors& worst,
                  int64_t chunk = 0, bool with_state = true) {
  SCOPED_TRACE(std::string(ScanAlgorithmName(algorithm)) + " " + c.Name() +
               " chunk=" + std::to_string(chunk));
  Rng rng(seed);
  ScanProblem prob(c, rng);
  ForwardRun run = RunFast(prob, algorithm, chunk, with_state);
  std::vector<double> ref_out(prob.SeqSize()), ref_state(prob.StateSize());
  ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), ref_out.data(), ref_state.data());
  const bool f32 = c.dtype == DType::kF32;
  const std::string key = std::string(ScanAlgorithmName(algorithm)) + (f32 ? " f32" : " bf16");
  EXPECT_LE(worst.Track(key + " out", RelativeError(run.out.ToDouble(), ref_out)),
            f32 ? kF32Bound : kBf16Bound);
  if (with_state) {
    // The state is f32 whatever the input dtype, computed from the same (rounded) inputs.
    EXPECT_LE(
        worst.Track(key + " final_state", RelativeError(run.final_state.ToDouble(), ref_state)),
        kF32Bound);
  } else {
    for (double v : run.final_state.ToDouble())
      ASSERT_TRUE(std::isnan(v)) << "the absent final_state was written";
  }
}

// Short sequences (odd lengths, L = 1), small states and every B/C form.
std::vector<ScanCase> ShortCases() {
  std::vector<ScanCase> cases;
  for (int64_t L : {1, 2, 7, 37, 61}) {
    for (int64_t N : {1, 4, 16}) {
      ScanCase c;
      c.batch = 2;
      c.dim = 5;
      c.seqlen = L;
      c.dstate = N;
      cases.push_back(c);
    }
  }
  const std::pair<BCForm, BCForm> forms[] = {{BCForm::kGrouped, BCForm::kGrouped},
                                             {BCForm::kConstant, BCForm::kConstant},
                                             {BCForm::kConstant, BCForm::kVariable},
                                             {BCForm::kVariable, BCForm::kConstant},
                                             {BCForm::kGrouped, BCForm::kConstant}};
  for (const auto& [b_form, c_form] : forms) {
    ScanCase c;
    c.batch = 2;
    c.dim = 6;
    c.groups = 3;
    c.seqlen = 29;
    c.dstate = 4;
    c.b_form = b_form;
    c.c_form = c_form;
    cases.push_back(c);
  }
  return cases;
}

TEST(SelectiveScanForward, EveryAlgorithmOnShortSequences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (const ScanCase& c : ShortCases()) {
    for (ScanAlgorithm a : kStableAlgorithms) CheckForward(c, a, seed + k++, worst, /*chunk=*/8);
    CheckForward(SaneForLogSpace(c), ScanAlgorithm::kLogSpace, seed + k++, worst);
  }
}

// Long rows and every state-size class: Np / W = 1, 2, 4 vectors (registers) or more (memory),
// and a padded N (5) whose last vector is partly zero.
TEST(SelectiveScanForward, LongSequencesAndEveryStateSize) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (int64_t N : {1, 5, 16, 32, 64, 256}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 2;
    c.seqlen = N == 256 ? 301 : 500;
    c.dstate = N;
    for (ScanAlgorithm a : kStableAlgorithms) CheckForward(c, a, seed + k++, worst);
  }
}

// D / G a multiple of the vector width (16, 8 or 4 floats) with variable B/C takes the
// channel-tiled path (sequential only); B = 2 puts tiles of both batches in one call.
TEST(SelectiveScanForward, ChannelTiledPath) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (int64_t N : {1, 5, 16, 64}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      ScanCase c;
      c.batch = 2;
      c.dim = 64;
      c.groups = 2;
      c.b_form = BCForm::kGrouped;
      c.c_form = BCForm::kVariable;
      c.seqlen = 53;
      c.dstate = N;
      c.dtype = dtype;
      CheckForward(c, ScanAlgorithm::kSequential, seed + k++, worst);
    }
  }
  ScanCase wide;  // one group, several tiles per batch, 256 states
  wide.dim = 48;
  wide.seqlen = 40;
  wide.dstate = 256;
  CheckForward(wide, ScanAlgorithm::kSequential, seed + k++, worst);
}

// Every combination of D, z, delta_bias, initial_state and delta_softplus, with and without
// the final_state output, on the per-row sequential, the tiled and the L = 1 paths; the
// pair-based algorithms get all inputs on, all off, and each one off in turn.
TEST(SelectiveScanForward, EveryOptionalInputOnAndOff) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  auto make = [](int mask) {
    ScanCase c;
    c.batch = 2;
    c.dim = 5;
    c.seqlen = 45;
    c.dstate = 16;
    c.has_D = mask & 1;
    c.has_z = mask & 2;
    c.has_delta_bias = mask & 4;
    c.has_h0 = mask & 8;
    c.softplus = mask & 16;
    return c;
  };
  for (int mask = 0; mask < 64; ++mask) {
    const ScanCase c = make(mask);
    const bool with_state = mask & 32;
    CheckForward(c, ScanAlgorithm::kSequential, seed + k++, worst, 0, with_state);
    ScanCase tiled = c;
    tiled.dim = 32;
    CheckForward(tiled, ScanAlgorithm::kSequential, seed + k++, worst, 0, with_state);
    ScanCase step = c;
    step.seqlen = 1;
    CheckForward(step, ScanAlgorithm::kSequential, seed + k++, worst, 0, with_state);
  }
  for (int mask : {0, 31, 31 & ~1, 31 & ~2, 31 & ~4, 31 & ~8, 31 & ~16}) {
    for (bool with_state : {false, true}) {
      const ScanCase c = make(mask);
      for (ScanAlgorithm a :
           {ScanAlgorithm::kChunked, ScanAlgorithm::kBlelloch, ScanAlgorithm::kHillisSteele}) {
        CheckForward(c, a, seed + k++, worst, 0, with_state);
      }
      CheckForward(SaneForLogSpace(c), ScanAlgorithm::kLogSpace, seed + k++, worst, 0, with_state);
    }
  }
}

// A tenth of the deltas above 20 before softplus: dt = delta + bias there (the identity
// branch), with decays exp(dt A) ~ 0 that reset the state.
TEST(SelectiveScanForward, SoftplusIdentityAboveTwenty) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  ScanCase c;
  c.batch = 2;
  c.seqlen = 40;
  c.dim = 6;
  c.dstate = 8;
  c.big_delta_fraction = 0.1;
  for (ScanAlgorithm a : kStableAlgorithms) CheckForward(c, a, seed + k++, worst);
  ScanCase tiled = c;
  tiled.dim = 32;
  CheckForward(tiled, ScanAlgorithm::kSequential, seed + k++, worst);
  ScanCase step = c;
  step.seqlen = 1;
  step.big_delta_fraction = 0.5;
  CheckForward(step, ScanAlgorithm::kSequential, seed + k++, worst);
}

TEST(SelectiveScanForward, ChunkLengthsIncludingNonDividingAndLongerThanL) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (int64_t L : {37, 100}) {
    for (int64_t chunk : {1, 2, 3, 7, 16, 36, 37, 38, 63, 64, 99, 100, 101, 1000}) {
      ScanCase c;
      c.batch = 2;
      c.dim = 3;
      c.seqlen = L;
      c.dstate = chunk % 2 ? 4 : 16;
      CheckForward(c, ScanAlgorithm::kChunked, seed + k++, worst, chunk);
    }
  }
}

TEST(SelectiveScanForward, Bf16Inputs) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
    ScanCase c;
    c.batch = 2;
    c.dim = 4;
    c.groups = 2;
    c.seqlen = 77;
    c.dstate = 16;
    c.b_form = c.c_form = form;
    c.dtype = DType::kBF16;
    for (ScanAlgorithm a : kStableAlgorithms) CheckForward(c, a, seed + k++, worst);
    ScanCase short_case = SaneForLogSpace(c);
    short_case.seqlen = 40;
    CheckForward(short_case, ScanAlgorithm::kLogSpace, seed + k++, worst);
  }
  ScanCase step;
  step.dim = 24;
  step.seqlen = 1;
  step.dstate = 16;
  step.dtype = DType::kBF16;
  CheckForward(step, ScanAlgorithm::kSequential, seed + k++, worst);
}

// Every tensor (inputs and outputs) inside a larger buffer: outer strides bigger than the
// packed ones (u's batch stride (D + 3)(L + 3) > D L), NaN in the input padding, and output
// padding that must stay untouched.
TEST(SelectiveScanForward, PaddedOuterStrides) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (BCForm form : {BCForm::kConstant, BCForm::kVariable, BCForm::kGrouped}) {
      ScanCase c;
      c.batch = 2;
      c.dim = 4;
      c.groups = 2;
      c.seqlen = 21;
      c.dstate = 5;
      c.b_form = form;
      c.c_form = form == BCForm::kConstant ? BCForm::kGrouped : form;
      c.dtype = dtype;
      c.pad = 3;
      for (ScanAlgorithm a : kStableAlgorithms) CheckForward(c, a, seed + k++, worst, 4);
      CheckForward(SaneForLogSpace(c), ScanAlgorithm::kLogSpace, seed + k++, worst);
      ScanCase step = c;
      step.seqlen = 1;
      CheckForward(step, ScanAlgorithm::kSequential, seed + k++, worst);
    }
    ScanCase tiled;
    tiled.batch = 2;
    tiled.dim = 32;
    tiled.seqlen = 19;
    tiled.dstate = 16;
    tiled.dtype = dtype;
    tiled.pad = 2;
    CheckForward(tiled, ScanAlgorithm::kSequential, seed + k++, worst);
  }
}

// The same problem twice with the same thread count gives the same bytes, for every algorithm
// and path, with 1 and 2 threads.
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
        c.dt_max = 0.1;  // sane for log-space at L = 130 too (summed decay ~ -8)
        c.a_slope = 0.0;
        for (ScanAlgorithm a : kAllAlgorithms) {
          SCOPED_TRACE(std::string(ScanAlgorithmName(a)) + " " + c.Name() +
                       " threads=" + std::to_string(threads));
          Rng rng(seed);
          ScanProblem prob(c, rng);
          ForwardRun first = RunFast(prob, a), second = RunFast(prob, a);
          EXPECT_TRUE(first.out.Bytes() == second.out.Bytes());
          EXPECT_TRUE(first.final_state.Bytes() == second.final_state.Bytes());
          for (double v : first.out.ToDouble()) ASSERT_TRUE(std::isfinite(v));
        }
      }
    }
  }
}

// The oracle's state after the first `steps` steps of the problem (h0, or zeros, for none).
std::vector<double> OracleStateAfter(const ScanProblem& prob, int64_t steps) {
  const ScanCase& c = prob.c;
  if (steps == 0) return c.has_h0 ? prob.h0_d : std::vector<double>(prob.StateSize(), 0.0);
  auto prefix = [&](const std::vector<double>& v) {  // every (..., L) row cut to `steps`
    const int64_t rows = static_cast<int64_t>(v.size()) / c.seqlen;
    std::vector<double> cut(rows * steps);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(v.begin() + r * c.seqlen, steps, cut.begin() + r * steps);
    return cut;
  };
  ref::ScanShape shape = prob.Shape();
  shape.seqlen = steps;
  ref::ScanInputs in = prob.RefInputs();
  const std::vector<double> u = prefix(prob.u_d), delta = prefix(prob.delta_d);
  const std::vector<double> z = c.has_z ? prefix(prob.z_d) : std::vector<double>();
  const std::vector<double> B = c.b_form != BCForm::kConstant ? prefix(prob.B_d) : prob.B_d;
  const std::vector<double> C = c.c_form != BCForm::kConstant ? prefix(prob.C_d) : prob.C_d;
  in.u = u.data();
  in.delta = delta.data();
  in.z = c.has_z ? z.data() : nullptr;
  in.B = B.data();
  in.C = C.data();
  std::vector<double> out(c.batch * c.dim * steps), state(prob.StateSize());
  ref::SelectiveScanForward(shape, in, out.data(), state.data());
  return state;
}

// chunk_states (B, D, K, N) entry k is the state entering step k Q, checked against the
// oracle run over the first k Q steps; saving them changes no bit of out; nothing is written
// around them. Every algorithm, constant and variable B/C (per-row and channel-tiled paths),
// L = 1, chunk lengths dividing L or not and longer than L, with and without h0.
TEST(SelectiveScanForward, ChunkStatesAreTheStatesEnteringEachChunk) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  for (ScanAlgorithm algorithm : kAllAlgorithms) {
    for (BCForm form : {BCForm::kConstant, BCForm::kVariable}) {
      for (int64_t L : {1, 37, 150}) {
        for (int64_t chunk : {0, 7, 16, 200}) {
          ScanCase c;
          c.batch = 2;
          c.dim = 32;
          c.seqlen = L;
          c.dstate = 16;
          c.b_form = c.c_form = form;
          c.has_h0 = (k % 2) == 0;
          c.pad = 2;
          if (algorithm == ScanAlgorithm::kLogSpace) {
            if (L > 64) continue;
            c = SaneForLogSpace(c);
          }
          SCOPED_TRACE(std::string(ScanAlgorithmName(algorithm)) + " " + c.Name() +
                       " chunk=" + std::to_string(chunk));
          Rng rng(seed + k++);
          ScanProblem prob(c, rng);
          SelectiveScanOptions options;
          options.algorithm = algorithm;
          options.chunk_length = chunk;
          const int64_t Q = chunk > 0 ? chunk : kDefaultScanChunkLength,
                        K = SelectiveScanChunkCount(L, options);
          ASSERT_EQ(K, (L + Q - 1) / Q);
          PaddedTensor out(prob.SeqShape(), c.dtype, c.pad),
              states({c.batch, c.dim, K, c.dstate}, DType::kF32, c.pad);
          out.Poison();
          states.Poison();
          const Status status =
              SelectiveScanForward(prob.Inputs(), out.view(), Tensor{}, states.view(), options);
          ASSERT_TRUE(status.ok()) << status.message();
          EXPECT_TRUE(states.PaddingUntouched()) << "chunk_states written outside its view";
          EXPECT_TRUE(out.Bytes() == RunFast(prob, algorithm, chunk, false).out.Bytes())
              << "out changed";
          std::vector<double> want(c.batch * c.dim * K * c.dstate);
          for (int64_t entry = 0; entry < K; ++entry) {
            const std::vector<double> state = OracleStateAfter(prob, entry * Q);  // (B, D, N)
            for (int64_t row = 0; row < c.batch * c.dim; ++row) {
              std::copy_n(state.begin() + row * c.dstate, c.dstate,
                          want.begin() + (row * K + entry) * c.dstate);
            }
          }
          EXPECT_LE(worst.Track(std::string(ScanAlgorithmName(algorithm)) + " chunk_states",
                                RelativeError(states.ToDouble(), want)),
                    kF32Bound);
        }
      }
    }
  }
}

// The same checks with dispatch forced to each compiled SIMD target: AVX2 (W = 8) and the
// portable fallback (W = 4) change the padding of N, the tile width and which N fit in
// registers.
TEST(SelectiveScanForward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstErrors worst;
  uint64_t k = 0;
  const int targets = ForEachSimdTarget([&] {
    for (int64_t N : {1, 5, 16, 48}) {
      ScanCase c;
      c.batch = 2;
      c.dim = 3;
      c.seqlen = 50;
      c.dstate = N;
      for (ScanAlgorithm a : kStableAlgorithms) CheckForward(c, a, seed + k++, worst, 16);
      CheckForward(SaneForLogSpace(c), ScanAlgorithm::kLogSpace, seed + k++, worst);
      ScanCase tiled = c;
      tiled.dim = 32;
      tiled.dtype = N == 5 ? DType::kBF16 : DType::kF32;
      CheckForward(tiled, ScanAlgorithm::kSequential, seed + k++, worst);
      ScanCase step = c;
      step.dim = 13;
      step.seqlen = 1;
      CheckForward(step, ScanAlgorithm::kSequential, seed + k++, worst);
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

}  // namespace
}  // namespace ssmkit::testing

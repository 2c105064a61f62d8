// `ssmkit bench floor`: what this machine's arithmetic allows, measured, for the bars that sit
// next to it (docs/benchmarks.md). Three things, none of them an ssmkit kernel:
//   - the rate of vector multiply-adds per core (independent FMA chains, one thread, then all),
//   - the floors that rate puts under the SSD scan at m2-130m: the sequential recurrence does
//     2 multiply-adds per state element and step forward and 5 backward (docs/ops/ssd.md),
//   - the Mamba-2 decode step's arithmetic alone at m2-130m (h = a h + (dt x) B, C . h left as
//     one vector per row: 3 multiplies per state element), with one fork/join per step and
//     nothing else (no dt, softplus, gating, lane sums, input checks).
// Dimension legend: H heads, P head dim, N state size, W vector lanes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/parallel.hpp"
#include "core/simd_targets.hpp"
#include "cpu/quant_linear.hpp"
#include "fma_rate.hpp"
#include "peer_ggml.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/threads.hpp"

// Defined once although Highway includes this file once per target.
#ifndef SSMKIT_TOOLS_BENCH_FLOOR_CONSTANTS_
#define SSMKIT_TOOLS_BENCH_FLOOR_CONSTANTS_
namespace ssmkit::bench {
// Independent multiply-add chains: enough to cover the FMA latency (4 cycles) on two pipes.
constexpr int kChains = 12;
}  // namespace ssmkit::bench
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ssmkit/bench_floor.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

int64_t FloatLanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

// rounds * kChains vector multiply-adds; returns their sum so that none is optimised away.
float FmaChains(int64_t rounds) {
  const DF df;
  const VF m = hn::Set(df, 0.999999f), c = hn::Set(df, 1e-7f);
  VF acc[kChains];
  for (int k = 0; k < kChains; ++k) acc[k] = hn::Set(df, static_cast<float>(k));
  for (int64_t r = 0; r < rounds; ++r) {
    for (int k = 0; k < kChains; ++k) acc[k] = hn::MulAdd(acc[k], m, c);
  }
  for (int k = 1; k < kChains; ++k) acc[0] = hn::Add(acc[0], acc[k]);
  return hn::GetLane(hn::SumOfLanes(df, acc[0]));
}

// Rows [r0, r1) (an even count) of a (rows, kVecs * W) state: h = decay h + x[r] B, and
// acc[r] = C * h as one vector per row (its lanes not summed). Two rows at a time with B and C
// in registers: the fastest arrangement of this loop found on the Zen 4 VM (docs/benchmarks.md).
// B and C fit in the registers with 512-bit vectors (2 x 8); with 256-bit ones (2 x 16) they
// spill, and the time is no longer a floor.
template <int kVecs>
void StepRows(float* state /* (rows, N) */, const float* x /* (rows) */, const float* B /* (N) */,
              const float* C /* (N) */, float decay, int64_t r0, int64_t r1,
              float* acc /* (rows, W) */) {
  const DF df;
  const int64_t W = FloatLanes(), N = kVecs * W;
  VF Bv[kVecs], Cv[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    Bv[v] = hn::LoadU(df, B + v * W);
    Cv[v] = hn::LoadU(df, C + v * W);
  }
  const VF a = hn::Set(df, decay);
  for (int64_t r = r0; r < r1; r += 2) {
    float* h0 = state + r * N;
    float* h1 = h0 + N;
    const VF x0 = hn::Set(df, x[r]), x1 = hn::Set(df, x[r + 1]);
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    for (int v = 0; v < kVecs; ++v) {
      const VF n0 = hn::MulAdd(a, hn::LoadU(df, h0 + v * W), hn::Mul(x0, Bv[v]));
      const VF n1 = hn::MulAdd(a, hn::LoadU(df, h1 + v * W), hn::Mul(x1, Bv[v]));
      hn::StoreU(n0, df, h0 + v * W);
      hn::StoreU(n1, df, h1 + v * W);
      acc0 = hn::MulAdd(Cv[v], n0, acc0);
      acc1 = hn::MulAdd(Cv[v], n1, acc1);
    }
    hn::StoreU(acc0, df, acc + r * W);
    hn::StoreU(acc1, df, acc + (r + 1) * W);
  }
}

// StepRows over rows [r0, r1) of a state of N = 128 floats per row, or false (nothing done)
// when 128 floats are not 4, 8 or 16 vectors.
bool StepArithmetic128(float* state /* (rows, 128) */, const float* x /* (rows) */,
                       const float* B /* (128) */, const float* C /* (128) */, float decay,
                       int64_t r0, int64_t r1, float* acc /* (rows, W) */) {
  const int64_t vecs = 128 / FloatLanes();
  if (vecs == 8) return StepRows<8>(state, x, B, C, decay, r0, r1, acc), true;
  if (vecs == 16) return StepRows<16>(state, x, B, C, decay, r0, r1, acc), true;
  if (vecs == 4) return StepRows<4>(state, x, B, C, decay, r0, r1, acc), true;
  return false;
}

}  // namespace ssmkit::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::bench {
namespace {

HWY_EXPORT(FmaChains);
HWY_EXPORT(FloatLanes);
HWY_EXPORT(StepArithmetic128);

// m2-130m (docs/targets.md): L = 2048, H = 24, P = 64, N = 128.
constexpr int64_t kL = 2048, kH = 24, kP = 64, kN = 128;
constexpr int kStepReps = 100;  // steps per timed run, as in `bench step`
constexpr int64_t kFmaRounds = 1 << 20;

}  // namespace

double DispatchedFloatLanes() { return static_cast<double>(HWY_DYNAMIC_DISPATCH(FloatLanes)()); }
std::string DispatchedTargetName() {
  const std::string name = SimdTargetName(DispatchedSimdTarget());
  std::string notes;
  if (name == "AVX3" && cpu::QuantDotVnni()) notes = "quantized products: VNNI";
  if (Bf16Products()) notes += notes.empty() ? "bf16 products" : "; bf16 products";
  return notes.empty() ? name : name + " (" + notes + ")";
}

FmaProbe::FmaProbe(int threads, double fmas_per_thread)
    : sums_(static_cast<size_t>(threads), 0.0f),
      rounds_(fmas_per_thread > 0
                  ? std::max<int64_t>(1, static_cast<int64_t>(fmas_per_thread / kChains))
                  : kFmaRounds) {}

void FmaProbe::Run() {
  ParallelFor(static_cast<int64_t>(sums_.size()), [&](int64_t, int64_t, int block) {
    sums_[block] += HWY_DYNAMIC_DISPATCH(FmaChains)(rounds_);
  });
}

double FmaProbe::FmasPerThread() const { return static_cast<double>(rounds_) * kChains; }

bool FmaProbe::Sane() const { return sums_[0] > 0.0f; }

double FmaRate(const Options& options, int threads, double lanes, std::vector<Result>* results) {
  FmaProbe probe(threads);
  const double ms = MedianMs(options, [&] { probe.Run(); });
  if (!probe.Sane()) std::fprintf(stderr, "bench floor: unexpected FMA chain sums\n");
  const double fmas = probe.FmasPerThread() * threads;  // vector FMAs
  Result r{"fma",
           "-",
           std::to_string(threads) + (threads == 1 ? " thread" : " threads"),
           "-",
           ms,
           0.0,
           fmas * lanes,
           "multiply-add"};
  results->push_back(r);
  return fmas / threads / (ms * 1e-3);
}

namespace {

// The m2-130m decode step's arithmetic alone (H * P rows of N, split over the threads by row
// pairs) against the multiply-add rate `all` per thread; on a target too narrow for its loop
// (scalar, 1 lane) only a note: the rate and the SSD floors still hold there.
void StepArithmetic(const Options& options, double lanes, double all, int threads,
                    std::vector<Result>* results, std::vector<std::string>* notes) {
  const int64_t rows = kH * kP, W = static_cast<int64_t>(lanes);
  std::vector<float> state(rows * kN), x(rows), B(kN), C(kN), acc(rows * W);
  for (int64_t i = 0; i < rows * kN; ++i) state[i] = 1e-3f * static_cast<float>(i % 97);
  for (int64_t i = 0; i < rows; ++i) x[i] = 1e-4f * static_cast<float>(i % 7);
  for (int64_t n = 0; n < kN; ++n) {
    B[n] = 0.01f * static_cast<float>(n % 13);
    C[n] = 0.02f * static_cast<float>(n % 11);
  }
  if (!HWY_DYNAMIC_DISPATCH(StepArithmetic128)(state.data(), x.data(), B.data(), C.data(), 0.999f,
                                               0, 0, acc.data())) {
    notes->push_back("m2-130m step arithmetic: not measured on a " + std::to_string(W) +
                     "-lane target (the loop needs 128 floats to be 4, 8 or 16 vectors)");
    return;
  }
  const double step_ms = MedianMs(options,
                                  [&] {
                                    for (int i = 0; i < kStepReps; ++i) {
                                      ParallelFor(rows / 2, [&](int64_t begin, int64_t end, int) {
                                        HWY_DYNAMIC_DISPATCH(StepArithmetic128)
                                        (state.data(), x.data(), B.data(), C.data(), 0.999f,
                                         2 * begin, 2 * end, acc.data());
                                      });
                                    }
                                  }) /
                         kStepReps;
  Result step{"state_update",
              "decode",
              "m2-130m arith",
              "fwd",
              step_ms,
              8.0 * rows * kN,
              static_cast<double>(rows * kN),
              "state"};
  step.peer_ms = kGgmlM2StepMs;
  step.peer = kGgmlStepPeer;
  results->push_back(step);
  const double step_fma_us = 3.0 * static_cast<double>(rows * kN) / lanes / (all * threads) * 1e6;
  char line[400];
  std::snprintf(line, sizeof(line),
                "m2-130m step on %d threads: 3 multiplies per state element are >= %.2f us at the "
                "rate above; the loop doing only them, with one fork/join: %.2f us; the 2x-ggml "
                "bar: %.2f us",
                threads, step_fma_us, step_ms * 1e3, kGgmlM2StepMs / 2 * 1e3);
  notes->push_back(line);
}

int RunFloorBench(const Options& options) {
  const int threads = NumThreads();
  std::vector<Result> results;
  std::vector<std::string> notes;
  const double lanes = static_cast<double>(HWY_DYNAMIC_DISPATCH(FloatLanes)());
  char line[400];
  const double one = FmaRate(options, 1, lanes, &results);
  const double all = threads > 1 ? FmaRate(options, threads, lanes, &results) : one;
  std::snprintf(line, sizeof(line),
                "%d-lane multiply-adds per core: %.2f G/s alone, %.2f G/s with %d threads",
                static_cast<int>(lanes), one * 1e-9, all * 1e-9, threads);
  notes.push_back(line);
  const double states = static_cast<double>(kL * kH * kP * kN);
  const double fwd_ms = 2.0 * states / lanes / (all * threads) * 1e3;
  std::snprintf(
      line, sizeof(line),
      "SSD m2-130m at that rate on %d threads: forward (2 multiply-adds per state element "
      "and step) >= %.2f ms; fwd+bwd (2 + 5) >= %.2f ms = 3.5x the forward",
      threads, fwd_ms, fwd_ms * 3.5);
  notes.push_back(line);

  StepArithmetic(options, lanes, all, threads, &results, &notes);
  Print(options, results);
  PrintNotes(options, notes);
  return 0;
}

const SuiteRegistration kRegistration{
    {"floor",
     "this machine's arithmetic floors under the SSD and decode-step bars: multiply-adds per "
     "core, the SSD m2-130m floors they give, the m2-130m step's arithmetic alone",
     RunFloorBench}};

}  // namespace
}  // namespace ssmkit::bench
#endif  // HWY_ONCE

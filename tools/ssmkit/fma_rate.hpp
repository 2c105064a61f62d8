// The vector multiply-add rate `ssmkit bench floor` measures (independent FMA chains, nothing
// else), for the benches that state a kernel's speed as a share of it in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_harness.hpp"

namespace ssmkit::bench {

// Independent multiply-add chains on `threads` threads (ParallelFor), one timed unit per Run:
// for a bench to interleave with its own cases (MedianMsInterleaved), so that the rate and the
// kernel's time see the same machine state.
class FmaProbe {
 public:
  // fmas_per_thread: vector multiply-adds per thread in one Run (0: bench floor's ~12.6 M). A
  // bench sets it to its case's work, so that probe and case run about as long: on a shared
  // machine a short probe and a long kernel do not see the same share of the cores.
  explicit FmaProbe(int threads, double fmas_per_thread = 0);
  void Run();
  double FmasPerThread() const;  // vector multiply-adds per thread in one Run
  bool Sane() const;             // the chains' sums came out as expected (not optimised away)

 private:
  std::vector<float> sums_;  // one per thread block: kept, so the chains are not dead code
  int64_t rounds_;
};

// Per-core vector multiply-adds per second with `threads` threads busy, timed as MedianMs;
// appends its row (ns per multiply-add of `lanes` lanes) to `results`.
double FmaRate(const Options& options, int threads, double lanes, std::vector<Result>* results);

// The f32 lanes of a vector, and the name, of the SIMD target run-time dispatch picks here.
double DispatchedFloatLanes();
// The name says "(quantized products: VNNI)" after AVX3 where those use VNNI.
std::string DispatchedTargetName();

}  // namespace ssmkit::bench

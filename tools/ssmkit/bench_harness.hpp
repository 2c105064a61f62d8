// The benchmark harness every `ssmkit bench <suite>` uses: median wall time over repeated
// runs, a table (or --json array) with time, bandwidth and ns per element.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ssmkit::bench {

struct Options {
  bool json = false;
  int runs = 20;       // timed runs per case (the median is reported)
  int warmup = 3;      // untimed runs first (and at least 300 ms of them: MedianMs)
  std::string shape;   // only cases whose shape name equals this ("" = all)
  std::string algo;    // only this algorithm ("" = all)
  std::string ggml;    // a ggml test-backend-ops binary to measure the peer with (peer_ggml.hpp)
  std::string target;  // a SIMD target to force ("avx2", "scalar", ...; "" = the best)
  // Weight dtypes of the whole-model benches, comma-separated ("f32,bf16", "q8_0,q4_k").
  std::string weights;
  std::string device = "cpu";  // `bench generate`: "cpu" or "cuda" (bench_generate_cuda.cpp)
  std::string model;  // `bench generate`: a checkpoint directory or GGUF file ("" = the presets)
};

// Forces run-time dispatch to the SIMD target `name` (case-insensitive Highway name) for the
// rest of the process; "" leaves the best. An unknown name, or one this build or CPU cannot
// run, is reported on stderr with the choices, and false returned.
bool ForceTarget(const std::string& name);

struct Result {
  std::string op;         // "selective_scan"
  std::string shape;      // a docs/targets.md workload name, e.g. "m1-130m"
  std::string algo;       // algorithm or variant
  std::string pass;       // "fwd" or "fwd+bwd"
  double ms = 0.0;        // median wall time
  double bytes = 0.0;     // bytes the op must read + write at minimum
  double elements = 0.0;  // work items for the ns-per-element column (e.g. B*D*L*N states)
  std::string element_name = "elem";
  double peer_ms = 0.0;  // a peer's time for the same case, 0 = none
  std::string peer;      // the peer's name, and where its figure comes from
};

// The median of `values` (the mean of the two middle ones for an even count); non-empty.
double Median(std::vector<double> values);

// Median milliseconds of `fn` over options.runs runs after options.warmup untimed runs.
double MedianMs(const Options& options, const std::function<void()>& fn);

// The medians of several functions timed in turn (run 1 of each, then run 2 of each, ...),
// so that a ratio of them (fwd+bwd over fwd) sees the same machine state: on a shared VM
// whose speed moves 10-30% within minutes, medians taken one after the other did not.
std::vector<double> MedianMsInterleaved(const Options& options,
                                        const std::vector<std::function<void()>>& fns);

// A memory-bound floor: each call reads `bytes` of a `buffer_bytes` buffer (sized past the
// last-level cache), the next window each call, split over the library's threads.
class ColdRead {
 public:
  explicit ColdRead(double buffer_bytes);
  void operator()(double bytes);

 private:
  int64_t words_, next_ = 0;
  std::vector<uint64_t> buffer_, sums_;
};

// The CPU's model name from /proc/cpuinfo ("unknown" where there is none).
std::string CpuName();

// Prints the results: a fixed-width table, or one JSON array when options.json.
void Print(const Options& options, const std::vector<Result>& results);

// A bench suite, `ssmkit bench <name>`. Returns the process exit code.
struct Suite {
  std::string name;
  std::string help;
  std::function<int(const Options&)> run;
};

// Suites register themselves from their own file with a static SuiteRegistration.
std::vector<Suite>& Suites();
struct SuiteRegistration {
  explicit SuiteRegistration(Suite suite) { Suites().push_back(std::move(suite)); }
};

}  // namespace ssmkit::bench

// `ssmkit bench attention`: causal attention at granite-4.0-h-350m's attention shape (12 query
// heads, 4 kv heads, head dim 64; docs/targets.md), prefill forward (the issue-18 bar: >= 60% of
// the machine's FMA rate at L = 4096), forward + backward, and paged decode.
//
// The peer column of the compute-bound cases is the FMA floor measured in the same run (`bench
// floor`'s independent multiply-add chains on every thread): the time the useful multiply-adds
// would take at that rate, so the printed ratio is the share of the FMA rate reached. Useful
// multiply-adds: E + Ev per visible (query, key) pair forward (q.k and p v), 3E + 2Ev more for
// the backward (s, dp, dv, dk, dq; the two-pass backward recomputes s and dp, so it cannot
// reach 1.0). Decode is bandwidth bound: its GB/s column is the K/V cache read once.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "fma_rate.hpp"
#include "peer_ggml.hpp"  // PrintNotes
#include "ssmkit/attention.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::bench {
namespace {

enum class Pass { kForward, kForwardBackward, kDecode };

struct AttnBenchCase {
  const char* shape;
  const char* variant;
  Pass pass;
  int64_t B, L, S, H, Hk, E;
  DType dtype;
};

// granite-4.0-h-350m's attention layers: H = 12, Hk = 4, E = Ev = 64.
constexpr AttnBenchCase kCases[] = {
    {"granite-350m", "prefill f32", Pass::kForward, 1, 4096, 4096, 12, 4, 64, DType::kF32},
    {"granite-350m", "prefill bf16", Pass::kForward, 1, 4096, 4096, 12, 4, 64, DType::kBF16},
    {"granite-350m", "prefill f32", Pass::kForward, 1, 512, 512, 12, 4, 64, DType::kF32},
    {"granite-350m", "train f32", Pass::kForwardBackward, 1, 2048, 2048, 12, 4, 64, DType::kF32},
    {"granite-350m", "decode f32", Pass::kDecode, 1, 1, 8192, 12, 4, 64, DType::kF32},
    {"granite-350m", "decode bf16", Pass::kDecode, 1, 1, 8192, 12, 4, 64, DType::kBF16},
    {"granite-350m", "decode f32 B8", Pass::kDecode, 8, 1, 2048, 12, 4, 64, DType::kF32},
};

struct Buffer {
  std::vector<uint8_t> bytes;
  Tensor view;
  Buffer() = default;
  Buffer(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.resize(static_cast<size_t>(n * DTypeSize(dtype)));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == DType::kI32) {
        static_cast<int32_t*>(static_cast<void*>(bytes.data()))[i] = 0;
      } else {
        StoreFromF32(bytes.data(), dtype, i, normal(rng));
      }
    }
    view = Tensor::Contiguous(bytes.data(), dtype, shape);
  }
  int32_t* ints() { return static_cast<int32_t*>(static_cast<void*>(bytes.data())); }
};

// Process CPU time of timed calls, per slot (0: the probe, 1: the case).
class CpuTimes {
 public:
  template <class Fn>
  void Time(int slot, Fn&& fn) {
    const double start = Now();
    fn();
    min_[slot] = std::min(min_[slot], Now() - start);
  }
  double Min(int slot) const { return min_[slot]; }

 private:
  static double Now() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
  }
  double min_[2] = {1e300, 1e300};
};

// Useful multiply-adds of one call (see the top of the file).
double UsefulFmas(const AttnBenchCase& c) {
  const double pairs =
      static_cast<double>(c.B * c.H) *
      (c.L == c.S ? static_cast<double>(c.L) * (c.L + 1) / 2 : static_cast<double>(c.L) * c.S);
  const double E = static_cast<double>(c.E);
  return pairs * (c.pass == Pass::kForwardBackward ? 7 * E : 2 * E);
}

// The problem of one case and the call that runs it once (forward, + backward; or a paged
// decode step over B sequences of S tokens, blocks of 16 in order).
class Problem {
 public:
  explicit Problem(const AttnBenchCase& c) : c_(c) {
    std::mt19937 rng(1234);
    const DType io = c.pass == Pass::kDecode ? DType::kF32 : c.dtype;
    q_ = Make({c.B, c.L, c.H, c.E}, io, rng);
    out_ = Make({c.B, c.L, c.H, c.E}, io, rng);
    if (c.pass == Pass::kDecode) {
      const int64_t block = 16, per_seq = (c.S + block - 1) / block;
      k_ = Make({c.B * per_seq, block, c.Hk, c.E}, c.dtype, rng);
      v_ = Make({c.B * per_seq, block, c.Hk, c.E}, c.dtype, rng);
      table_ = Make({c.B, per_seq}, DType::kI32, rng);
      lens_ = Make({c.B}, DType::kI32, rng);
      for (int64_t i = 0; i < c.B * per_seq; ++i) table_.ints()[i] = static_cast<int32_t>(i);
      for (int64_t b = 0; b < c.B; ++b) lens_.ints()[b] = static_cast<int32_t>(c.S);
      return;
    }
    k_ = Make({c.B, c.S, c.Hk, c.E}, c.dtype, rng);
    v_ = Make({c.B, c.S, c.Hk, c.E}, c.dtype, rng);
    lse_ = Make({c.B, c.H, c.L}, DType::kF32, rng);
    if (c.pass != Pass::kForwardBackward) return;
    dout_ = Make({c.B, c.L, c.H, c.E}, c.dtype, rng);
    dq_ = Make({c.B, c.L, c.H, c.E}, c.dtype, rng);
    dk_ = Make({c.B, c.S, c.Hk, c.E}, c.dtype, rng);
    dv_ = Make({c.B, c.S, c.Hk, c.E}, c.dtype, rng);
  }

  Status Run() const {
    if (c_.pass == Pass::kDecode) {
      return AttentionPagedForward(q_.view, {k_.view, v_.view, table_.view, lens_.view}, out_.view);
    }
    const AttentionInputs in{q_.view, k_.view, v_.view, Tensor{}};
    SSMKIT_RETURN_IF_ERROR(AttentionForward(in, out_.view, lse_.view));
    if (c_.pass != Pass::kForwardBackward) return Status::Ok();
    return AttentionBackward(in, out_.view, lse_.view, dout_.view, {dq_.view, dk_.view, dv_.view});
  }

 private:
  static Buffer Make(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng) {
    return Buffer(shape, dtype, rng);
  }
  AttnBenchCase c_;
  Buffer q_, out_, k_, v_, lse_, dout_, dq_, dk_, dv_, table_, lens_;
};

int RunAttentionBench(const Options& options) {
  if (!options.ggml.empty()) {
    std::fprintf(stderr,
                 "bench attention: --ggml: no ggml case here (the peer is the FMA floor)\n");
    return 2;
  }
  const int threads = NumThreads();
  const double lanes = DispatchedFloatLanes();
  std::vector<Result> results;
  double rate = 0.0;  // per core, vector multiply-adds per second: the last case's
  bool sane = true;
  std::vector<std::string> cpu_notes;
  for (const AttnBenchCase& c : kCases) {
    if (!options.shape.empty() && options.shape != c.shape) continue;
    if (!options.algo.empty() && options.algo != c.variant) continue;
    const Problem problem(c);
    // As much multiply-add work as the case's useful part: ratio = probe time / case time.
    FmaProbe probe(threads, UsefulFmas(c) / lanes / threads);
    Status status = Status::Ok();
    CpuTimes cpu;
    const std::vector<double> ms_pair =
        MedianMsInterleaved(options, {[&] { cpu.Time(0, [&] { probe.Run(); }); },
                                      [&] { cpu.Time(1, [&] { status = problem.Run(); }); }});
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    rate = probe.FmasPerThread() / (ms_pair[0] * 1e-3);
    sane = sane && probe.Sane();
    const double ms = ms_pair[1];
    // The probe's row: its multiply-adds (lanes each) on all threads, timed beside the case.
    results.push_back({"fma", c.shape, "probe, same runs", "-", ms_pair[0], 0.0,
                       probe.FmasPerThread() * threads * lanes, "multiply-add"});
    const char* pass = c.pass == Pass::kForwardBackward ? "fwd+bwd" : "fwd";
    const std::string algo = std::string(c.variant) + " L=" + std::to_string(c.L);
    const double kv_bytes = static_cast<double>(c.B * c.S * c.Hk * 2 * c.E * DTypeSize(c.dtype));
    Result r{"attention", c.shape, algo, pass, ms, kv_bytes, 0.0, "pair"};
    r.elements = UsefulFmas(c) / (2.0 * static_cast<double>(c.E));  // (query, key) pairs x H
    if (c.pass != Pass::kDecode) {
      r.peer_ms = UsefulFmas(c) / lanes / (rate * threads) * 1e3;
      r.peer = "FMA floor";
      char note[200];
      std::snprintf(note, sizeof note,
                    "%s %s: process CPU time, fastest run: probe %.1f ms, case %.1f ms: %.2f of "
                    "the FMA rate",
                    c.variant, algo.c_str() + std::string(c.variant).size() + 1, cpu.Min(0),
                    cpu.Min(1), cpu.Min(0) / cpu.Min(1));
      cpu_notes.push_back(note);
    }
    results.push_back(r);
  }
  Print(options, results);
  char line[400];
  std::snprintf(line, sizeof line,
                "SIMD target %s (%d lanes), %d threads, %.2f G vector multiply-adds/s per core "
                "(the last case's probe: as many multiply-adds as the case's useful ones, timed "
                "interleaved with it); peer = the probe's time, so (x) = the share of the FMA "
                "rate in wall time",
                DispatchedTargetName().c_str(), static_cast<int>(lanes), threads, rate * 1e-9);
  std::vector<std::string> notes{line};
  // On a shared machine a long kernel loses its caches to other processes between time slices
  // and a register-only probe does not: with --threads 1 the CPU-time ratio is the cleaner one
  // (with more threads it counts the pool's spin-waiting too).
  notes.insert(notes.end(), cpu_notes.begin(), cpu_notes.end());
  if (!sane) notes.push_back("unexpected FMA chain sums: the floor is not to be trusted");
  PrintNotes(options, notes);
  return 0;
}

const SuiteRegistration kRegistration{
    {"attention",
     "causal attention at granite-4.0-h-350m's shape: prefill (share of the FMA rate measured "
     "in the same run), fwd+bwd, paged decode",
     RunAttentionBench}};

}  // namespace
}  // namespace ssmkit::bench

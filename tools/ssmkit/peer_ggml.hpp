// The ggml peer of `ssmkit bench`: with `--ggml PATH`, a suite runs llama.cpp's ggml
// `test-backend-ops perf` binary once, in the same `ssmkit bench` process run and before its own
// timing, with the same thread count, and puts ggml's per-case times in the peer column;
// without it the column keeps the docs/targets.md figures, labelled as such. docs/benchmarks.md
// ("The ggml peer") says how to build the binary and which cases it must have.
//
// Dimension legend: B batch, D channels, L length, N state size, H heads, P head dim,
// G groups, K conv width.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bench_harness.hpp"

namespace ssmkit::bench {

// ggml's one-token SSM_SCAN as docs/targets.md measured it: the peer of `bench step` without
// --ggml, and of `bench floor`'s step loop (the m2-130m figure: H = 24, P = 64, N = 128).
inline constexpr const char* kGgmlStepPeer =
    "ggml ssm_scan 1 token (docs/targets.md, not this run)";
inline constexpr double kGgmlM2StepMs = 0.0141;

// The name test-backend-ops prints for (and selects with -o) a case of the ggml snapshot
// d99724f: "OP(params)". ggml orders dimensions innermost first.
// SSM_SCAN: Mamba-1 is head_dim = 1, n_head = D; Mamba-2 is P, H with A one scalar per head.
std::string GgmlSsmScanCase(int64_t dstate, int64_t headdim, int64_t nheads, int64_t ngroups,
                            int64_t seqlen, int64_t batch);
// SSM_CONV over (L + K - 1, D, B) inputs (the K - 1 previous columns first). There is no
// peer case for the conv with bias and silu: test-backend-ops' SSM_CONV_BIAS_SILU builds the
// conv, an ADD and a SILU, but its perf mode repeats only a graph's last node, so it times
// the silu alone.
std::string GgmlSsmConvCase(int64_t dim, int64_t seqlen, int64_t batch, int64_t width);

// Parses test-backend-ops perf console output: case name -> milliseconds per run, from the
// lines "  NAME:   <runs> runs - <time> us/run - ...". Other lines (headers, "not supported",
// colour codes after the time) are skipped.
std::map<std::string, double> ParseGgmlPerfOutput(std::string_view output);

// `text` quoted for a POSIX shell command line.
std::string ShellQuote(std::string_view text);

// Runs `binary perf -b CPU -o <cases>` with GGML_N_THREADS=threads (read by the patched
// test-backend-ops of docs/benchmarks.md; an unpatched one uses every core) and parses its
// output into *ms. Returns false with *error set when it cannot run or exits non-zero.
bool RunGgmlPerf(const std::string& binary, const std::vector<std::string>& cases, int threads,
                 std::map<std::string, double>* ms, std::string* error);

// The peer column of one suite's run.
class GgmlPeer {
 public:
  // With options.ggml set, runs the binary once for `cases` (duplicates and "" ignored) at
  // the library's thread count. When that fails it prints "bench <suite>: --ggml: <why>" to
  // stderr and returns false; without --ggml it does nothing and returns true.
  bool Measure(const Options& options, const std::string& suite,
               const std::vector<std::string>& cases);

  // Sets r->peer_ms and r->peer: with --ggml, ggml's time for `ggml_case` from this run
  // (none when the case is "" or missing from the binary's output, which Notes reports);
  // without, `targets_ms` (0 = none) labelled `targets_label`.
  void Apply(const std::string& ggml_case, double targets_ms, const char* targets_label, Result* r);

  // With --ggml, one line each: the binary and thread count the column rests on, and every
  // requested case the binary did not report. Nothing without (the labels say docs/targets.md).
  std::vector<std::string> Notes() const;

 private:
  std::string binary_;  // "" = not measured in this run
  int threads_ = 0;
  std::map<std::string, double> ms_;
  std::vector<std::string> missing_;
};

// Prints `notes` after the table: to stdout, or to stderr under --json (stdout stays one
// JSON array).
void PrintNotes(const Options& options, const std::vector<std::string>& notes);

}  // namespace ssmkit::bench

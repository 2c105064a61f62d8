// `ssmkit bench scan`: the Mamba-1 selective scan at the docs/targets.md workload shapes, every
// algorithm, forward and forward+backward, on inputs distributed as in a Mamba-1 layer
// (scan_inputs.hpp). The forward's peer is ggml's SSM_SCAN: the docs/targets.md figure, or
// measured in this run with --ggml (peer_ggml.hpp).
// Dimension legend: B batch, D channels, L length, N state size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "peer_ggml.hpp"
#include "scan_inputs.hpp"
#include "ssmkit/selective_scan.hpp"

namespace ssmkit::bench {
namespace {

struct ScanCase {
  const char* name;
  scan_inputs::Shape shape;
  bool reads_state;    // a decode step continues from the previous state (initial_state)
  double ggml_fwd_ms;  // llama.cpp ggml CPU forward, 2 threads, from docs/targets.md; 0 = none
  double dt_min = 1e-3, dt_max = 1e-1;  // the time steps' range (log-uniform)
};

constexpr ScanCase kCases[] = {
    {"policy", {1, 512, 60, 16}, false, 1.49},
    // Steps of 1 to 10 with A = -1..-16: states that decay past f32's normal range (the
    // kernels flush denormals, core/float_mode.hpp).
    {"policy-long-dt", {1, 512, 60, 16}, false, 0.0, 1.0, 10.0},
    {"policy-train", {256, 512, 60, 16}, false, 0.0},
    {"m1-130m", {1, 1536, 2048, 16}, false, 123.8},
    {"decode", {1, 1536, 1, 16}, true, 0.0757},
};

constexpr const char* kPeer = "ggml (docs/targets.md, not this run)";

// The packed variant: each row holds this many sequences of equal length (seq_idx), run by
// the sequential algorithm; its name in the table and for --algo.
constexpr int64_t kPackedSequences = 8;
constexpr const char* kPackedAlgo = "sequential+seq_idx";
constexpr double kSlowRunMs = 1000.0;  // past this per run, time kSlowRuns runs instead
constexpr int kSlowRuns = 5;

// Outputs, the incoming gradient and the gradient outputs of one case, all f32.
struct CaseBuffers {
  std::vector<float> out, final_state, chunk_states, dout, du, ddelta, dz, dA, dB, dC, dD,
      ddelta_bias, dh0;
  Tensor out_t, final_t, chunk_states_t, dout_t;
  SelectiveScanGrads grads;

  explicit CaseBuffers(const scan_inputs::LayerData& data) {
    const scan_inputs::Shape& s = data.shape;
    const int64_t seq = s.batch * s.dim * s.seqlen, bc = s.batch * s.dstate * s.seqlen;
    const DType f32 = DType::kF32;
    out.resize(seq);
    final_state.resize(s.batch * s.dim * s.dstate);
    const int64_t chunks = SelectiveScanChunkCount(s.seqlen);
    chunk_states.resize(s.batch * s.dim * chunks * s.dstate);
    dout.resize(seq);
    std::mt19937_64 rng(99);
    std::normal_distribution<float> normal;
    for (float& x : dout) x = normal(rng);
    for (auto* g : {&du, &ddelta, &dz}) g->resize(seq);
    dA.resize(s.dim * s.dstate);
    dB.resize(bc);
    dC.resize(bc);
    dD.resize(s.dim);
    ddelta_bias.resize(s.dim);
    out_t = Tensor::Contiguous(out.data(), f32, {s.batch, s.dim, s.seqlen});
    final_t = Tensor::Contiguous(final_state.data(), f32, {s.batch, s.dim, s.dstate});
    chunk_states_t =
        Tensor::Contiguous(chunk_states.data(), f32, {s.batch, s.dim, chunks, s.dstate});
    dout_t = Tensor::Contiguous(dout.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.du = Tensor::Contiguous(du.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.ddelta = Tensor::Contiguous(ddelta.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.dz = Tensor::Contiguous(dz.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.dA = Tensor::Contiguous(dA.data(), f32, {s.dim, s.dstate});
    grads.dB = Tensor::Contiguous(dB.data(), f32, {s.batch, s.dstate, s.seqlen});
    grads.dC = Tensor::Contiguous(dC.data(), f32, {s.batch, s.dstate, s.seqlen});
    grads.dD = Tensor::Contiguous(dD.data(), f32, {s.dim});
    grads.ddelta_bias = Tensor::Contiguous(ddelta_bias.data(), f32, {s.dim});
    if (!data.initial_state.empty()) {
      dh0.resize(s.batch * s.dim * s.dstate);
      grads.dinitial_state = Tensor::Contiguous(dh0.data(), f32, {s.batch, s.dim, s.dstate});
    }
  }
};

// The least the op must move, in bytes (f32). Forward: read u, delta, z, B, C, A, D,
// delta_bias (and h0), write out and final_state. The backward adds: read dout, write du,
// ddelta, dz, dB, dC, dA, dD, ddelta_bias (and dh0); its re-reads of the inputs are not counted.
double MinimumBytes(const scan_inputs::Shape& s, bool reads_state, bool backward) {
  const double seq = static_cast<double>(s.batch) * s.dim * s.seqlen;
  const double bc = static_cast<double>(s.batch) * s.dstate * s.seqlen;
  const double dn = static_cast<double>(s.dim) * s.dstate, bdn = s.batch * dn;
  const double h0 = reads_state ? bdn : 0.0;
  double floats = 4 * seq + 2 * bc + dn + 2 * s.dim + bdn + h0;
  if (backward) floats += 4 * seq + 2 * bc + dn + 2 * s.dim + h0;
  return 4.0 * floats;
}

// Median ms of fn. One probe run comes first (it counts as a warm-up); where it takes longer
// than kSlowRunMs, only kSlowRuns runs are timed and a note says so.
double TimeCase(const Options& options, const std::string& label, const std::function<void()>& fn,
                std::vector<std::string>* notes) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  const double probe_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  Options timed = options;
  timed.warmup = std::max(0, options.warmup - 1);
  if (probe_ms > kSlowRunMs && options.runs > kSlowRuns) {
    timed.runs = kSlowRuns;
    timed.warmup = 0;
    char note[256];
    std::snprintf(note, sizeof note,
                  "%s: one run took %.0f ms > %.0f ms, so %d timed runs instead of %d",
                  label.c_str(), probe_ms, kSlowRunMs, kSlowRuns, options.runs);
    notes->push_back(note);
  }
  return MedianMs(timed, fn);
}

Result MakeResult(const char* shape, const std::string& algo, const char* pass, double ms,
                  double bytes, double states) {
  Result r;
  r.op = "selective_scan";
  r.shape = shape;
  r.algo = algo;
  r.pass = pass;
  r.ms = ms;
  r.bytes = bytes;
  r.elements = states;
  r.element_name = "state";
  return r;
}

int64_t CountNonFinite(const std::vector<float>& v) {
  int64_t count = 0;
  for (float x : v) count += !std::isfinite(x);
  return count;
}

// Checks --shape and --algo against the known names, so that a typo is an error, not an
// empty table.
bool ValidFilters(const Options& options) {
  if (!options.algo.empty() && options.algo != kPackedAlgo) {
    ScanAlgorithm unused;
    const Status status = ParseScanAlgorithm(options.algo, &unused);
    if (!status.ok()) {
      std::fprintf(stderr, "bench scan: --algo: %s\n", status.message().c_str());
      return false;
    }
  }
  if (options.shape.empty()) return true;
  std::string names;
  for (const ScanCase& c : kCases) {
    if (options.shape == c.name) return true;
    names += names.empty() ? c.name : std::string(", ") + c.name;
  }
  std::fprintf(stderr, "bench scan: --shape: expected one of %s, given %s\n", names.c_str(),
               options.shape.c_str());
  return false;
}

// seq_idx (B, L) cutting each row into kPackedSequences sequences of equal length.
std::vector<int32_t> PackedSeqIdx(const scan_inputs::Shape& s) {
  std::vector<int32_t> ids(s.batch * s.seqlen);
  const int64_t len = std::max<int64_t>(1, s.seqlen / kPackedSequences);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t l = 0; l < s.seqlen; ++l)
      ids[b * s.seqlen + l] = static_cast<int32_t>(std::min(l / len, kPackedSequences - 1));
  return ids;
}

// ggml's SSM_SCAN with head_dim 1 is the Mamba-1 scan (it always reads a state, like decode).
std::string GgmlCase(const ScanCase& c) {
  const scan_inputs::Shape& s = c.shape;
  return GgmlSsmScanCase(s.dstate, 1, s.dim, 1, s.seqlen, s.batch);
}

int RunScanBench(const Options& options) {
  if (!ValidFilters(options)) return 2;
  std::vector<Result> results;
  std::vector<std::string> notes;
  GgmlPeer peer;
  std::vector<std::string> peer_cases;
  for (const ScanCase& c : kCases) {
    if (options.shape.empty() || options.shape == c.name) peer_cases.push_back(GgmlCase(c));
  }
  if (!peer.Measure(options, "scan", peer_cases)) return 2;
  for (const ScanCase& c : kCases) {
    if (!options.shape.empty() && options.shape != c.name) continue;
    scan_inputs::Options input_options;
    input_options.with_initial_state = c.reads_state;
    input_options.dt_min = c.dt_min;
    input_options.dt_max = c.dt_max;
    const scan_inputs::LayerData data = scan_inputs::MakeLayerData(c.shape, input_options, 1234);
    const SelectiveScanInputs unpacked_inputs = data.Inputs();
    CaseBuffers buffers(data);
    const scan_inputs::Shape& s = c.shape;
    const double states = static_cast<double>(s.batch) * s.dim * s.seqlen * s.dstate;
    const std::vector<int32_t> seq_idx = PackedSeqIdx(s);
    SelectiveScanInputs packed_inputs = unpacked_inputs;
    packed_inputs.seq_idx = Tensor::Contiguous(seq_idx.data(), DType::kI32, {s.batch, s.seqlen});
    // Every algorithm, then the sequential one on packed rows (one sequence per row at L = 1).
    for (int a = 0; a <= static_cast<int>(ScanAlgorithm::kLogSpace) + 1; ++a) {
      const bool packed = a > static_cast<int>(ScanAlgorithm::kLogSpace);
      if (packed && s.seqlen < 2 * kPackedSequences) continue;
      SelectiveScanOptions scan_options;
      scan_options.algorithm = packed ? ScanAlgorithm::kSequential : static_cast<ScanAlgorithm>(a);
      const std::string algo = packed ? kPackedAlgo : ScanAlgorithmName(scan_options.algorithm);
      if (!options.algo.empty() && options.algo != algo) continue;
      const SelectiveScanInputs& inputs = packed ? packed_inputs : unpacked_inputs;
      const std::string label = std::string(c.name) + " " + algo;
      Status status = Status::Ok();
      const double fwd_ms = TimeCase(
          options, label + " fwd",
          [&] {
            status = SelectiveScanForward(inputs, buffers.out_t, buffers.final_t, scan_options);
          },
          &notes);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
      }
      if (const int64_t bad = CountNonFinite(buffers.out)) {
        notes.push_back(label + ": the forward output has " + std::to_string(bad) +
                        " non-finite values (see docs/numerics.md)");
      }
      Result fwd =
          MakeResult(c.name, algo, "fwd", fwd_ms, MinimumBytes(s, c.reads_state, false), states);
      peer.Apply(GgmlCase(c), c.ggml_fwd_ms, kPeer, &fwd);
      results.push_back(fwd);
      // As in training: the forward saves its chunk states, the backward starts from them.
      const double both_ms = TimeCase(
          options, label + " fwd+bwd",
          [&] {
            status = SelectiveScanForward(inputs, buffers.out_t, buffers.final_t,
                                          buffers.chunk_states_t, scan_options);
            if (status.ok()) {
              status = SelectiveScanBackward(inputs, buffers.dout_t, Tensor{},
                                             buffers.chunk_states_t, buffers.grads, scan_options);
            }
          },
          &notes);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
      }
      results.push_back(MakeResult(c.name, algo, "fwd+bwd", both_ms,
                                   MinimumBytes(s, c.reads_state, true), states));
    }
  }
  Print(options, results);
  for (const std::string& note : peer.Notes()) notes.push_back(note);
  PrintNotes(options, notes);
  return 0;
}

const SuiteRegistration kRegistration{
    {"scan",
     "Mamba-1 selective scan, every algorithm, fwd and fwd+bwd: policy (B=1 D=512 L=60 N=16), "
     "policy-long-dt (dt in [1, 10]), "
     "policy-train (B=256), m1-130m (D=1536 L=2048), decode (D=1536 L=1, reads the state); "
     "sequential+seq_idx: each row packing 8 sequences",
     RunScanBench}};

}  // namespace
}  // namespace ssmkit::bench

// `ssmkit bench ssd`: the Mamba-2 SSD scan (mamba_chunk_scan_combined) at the docs/targets.md
// workload shapes, each algorithm, forward and forward+backward, with a Mamba-2 layer's
// options (D per head, dt_bias, dt_softplus; no z: Mamba-2 gates in its norm). The peer is
// ggml's SSM_SCAN: the docs/targets.md figure, or measured in this run with --ggml (peer_ggml.hpp).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "peer_ggml.hpp"
#include "ssmkit/ssd.hpp"

namespace ssmkit::bench {
namespace {

struct SsdShape {
  const char* name;
  int64_t batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size;
  double ggml_fwd_ms;  // llama.cpp ggml CPU, 2 threads, docs/targets.md; 0 = none
};

constexpr SsdShape kShapes[] = {
    {"m2-130m", 1, 2048, 24, 64, 1, 128, 256, 23.4},
    {"m2-h48-l512", 1, 512, 48, 64, 1, 128, 256, 10.2},
    {"m2-130m-b4", 4, 512, 24, 64, 1, 128, 256, 0.0},
    {"decode", 1, 1, 24, 64, 1, 128, 256, 0.0141},
};

// A Mamba-2 layer's scan inputs: A = -exp(A_log), A_log uniform in [log 1, log 16];
// dt = softplus(dt_in + dt_bias) log-uniform in [1e-3, 1e-1]; x, B, C, D normal.
struct SsdData {
  std::vector<float> x, dt, A, B, C, D, dt_bias, out, final_states;
  std::vector<float> dout, dx, ddt, dA, dB, dC, dD, ddt_bias;
  SsdInputs inputs;
  Tensor out_t, final_t, dout_t;
  SsdGrads grads;

  explicit SsdData(const SsdShape& s) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    const int64_t seq = s.batch * s.seqlen * s.nheads * s.headdim;
    const int64_t bc = s.batch * s.seqlen * s.ngroups * s.dstate;
    const int64_t dts = s.batch * s.seqlen * s.nheads;
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(n);
      for (auto& e : v) e = normal(rng);
    };
    fill(x, seq);
    fill(B, bc);
    fill(C, bc);
    fill(D, s.nheads);
    fill(dout, seq);
    dt.resize(dts);
    for (auto& e : dt)
      e = std::log(std::expm1(std::exp(std::log(1e-3f) + uniform(rng) * std::log(100.0f))));
    dt_bias.assign(s.nheads, 0.0f);
    A.resize(s.nheads);
    for (auto& e : A) e = -std::exp(uniform(rng) * std::log(16.0f));
    out.resize(seq);
    final_states.resize(s.batch * s.nheads * s.headdim * s.dstate);
    dx.resize(seq);
    ddt.resize(dts);
    dB.resize(bc);
    dC.resize(bc);
    dA.resize(s.nheads);
    dD.resize(s.nheads);
    ddt_bias.resize(s.nheads);
    const DType f32 = DType::kF32;
    const std::initializer_list<int64_t> seq_shape = {s.batch, s.seqlen, s.nheads, s.headdim};
    const std::initializer_list<int64_t> bc_shape = {s.batch, s.seqlen, s.ngroups, s.dstate};
    const std::initializer_list<int64_t> dt_shape = {s.batch, s.seqlen, s.nheads};
    inputs.x = Tensor::Contiguous(x.data(), f32, seq_shape);
    inputs.dt = Tensor::Contiguous(dt.data(), f32, dt_shape);
    inputs.A = Tensor::Contiguous(A.data(), f32, {s.nheads});
    inputs.B = Tensor::Contiguous(B.data(), f32, bc_shape);
    inputs.C = Tensor::Contiguous(C.data(), f32, bc_shape);
    inputs.D = Tensor::Contiguous(D.data(), f32, {s.nheads});
    inputs.dt_bias = Tensor::Contiguous(dt_bias.data(), f32, {s.nheads});
    inputs.dt_softplus = true;
    out_t = Tensor::Contiguous(out.data(), f32, seq_shape);
    final_t =
        Tensor::Contiguous(final_states.data(), f32, {s.batch, s.nheads, s.headdim, s.dstate});
    dout_t = Tensor::Contiguous(dout.data(), f32, seq_shape);
    grads.dx = Tensor::Contiguous(dx.data(), f32, seq_shape);
    grads.ddt = Tensor::Contiguous(ddt.data(), f32, dt_shape);
    grads.dA = Tensor::Contiguous(dA.data(), f32, {s.nheads});
    grads.dB = Tensor::Contiguous(dB.data(), f32, bc_shape);
    grads.dC = Tensor::Contiguous(dC.data(), f32, bc_shape);
    grads.dD = Tensor::Contiguous(dD.data(), f32, {s.nheads});
    grads.ddt_bias = Tensor::Contiguous(ddt_bias.data(), f32, {s.nheads});
  }
};

// The packed variant: batch-1 rows cut into this many sequences of equal length, given by
// cu_seqlens (each sequence run as its own pass, with its varlen state written).
constexpr int64_t kPackedSequences = 8;
constexpr const char* kPackedSuffix = "+cu_seqlens";

// cu_seqlens (S + 1) cutting L into kPackedSequences sequences of equal length.
std::vector<int64_t> PackedCuSeqlens(int64_t seqlen) {
  std::vector<int64_t> cu;
  for (int64_t k = 0; k < kPackedSequences; ++k) cu.push_back(k * (seqlen / kPackedSequences));
  cu.push_back(seqlen);
  return cu;
}

// ggml's SSM_SCAN with head_dim > 1 is the Mamba-2 scan (A one scalar per head).
std::string GgmlCase(const SsdShape& s) {
  return GgmlSsmScanCase(s.dstate, s.headdim, s.nheads, s.ngroups, s.seqlen, s.batch);
}

int RunSsdBench(const Options& options) {
  std::vector<Result> results;
  GgmlPeer peer;
  std::vector<std::string> peer_cases;
  for (const SsdShape& shape : kShapes) {
    if (options.shape.empty() || options.shape == shape.name) peer_cases.push_back(GgmlCase(shape));
  }
  if (!peer.Measure(options, "ssd", peer_cases)) return 2;
  std::vector<std::string> ratios;
  for (const SsdShape& shape : kShapes) {
    if (!options.shape.empty() && options.shape != shape.name) continue;
    SsdData data(shape);
    // Minimum traffic (f32): read x, dt, B, C, write out; the backward also reads dout and
    // writes dx, ddt, dB, dC.
    const double seq_bytes = 4.0 * shape.batch * shape.seqlen * shape.nheads * shape.headdim;
    const double bc_bytes = 4.0 * shape.batch * shape.seqlen * shape.ngroups * shape.dstate;
    const double dt_bytes = 4.0 * shape.batch * shape.seqlen * shape.nheads;
    const double fwd_bytes = 2 * seq_bytes + 2 * bc_bytes + dt_bytes;
    const double states = static_cast<double>(shape.batch) * shape.seqlen * shape.nheads *
                          shape.headdim * shape.dstate;
    const std::vector<int64_t> cu = PackedCuSeqlens(shape.seqlen);
    std::vector<float> varlen(kPackedSequences * shape.nheads * shape.headdim * shape.dstate);
    SsdInputs packed_inputs = data.inputs;
    packed_inputs.cu_seqlens =
        Tensor::Contiguous(cu.data(), DType::kI64, {static_cast<int64_t>(cu.size())});
    const SsdOutputs packed_outputs{
        data.out_t, data.final_t,
        Tensor::Contiguous(varlen.data(), DType::kF32,
                           {kPackedSequences, shape.nheads, shape.headdim, shape.dstate})};
    // Each algorithm, then sequential and chunked on packed batch-1 rows.
    constexpr SsdAlgorithm kVariants[] = {SsdAlgorithm::kAuto, SsdAlgorithm::kSequential,
                                          SsdAlgorithm::kChunked, SsdAlgorithm::kSequential,
                                          SsdAlgorithm::kChunked};
    for (int variant = 0; variant < 5; ++variant) {
      const bool packed = variant >= 3;
      if (packed && (shape.batch != 1 || shape.seqlen < 2 * kPackedSequences)) continue;
      const SsdAlgorithm algorithm = kVariants[variant];
      SsdOptions ssd_options;
      ssd_options.algorithm = algorithm;
      ssd_options.chunk_size = shape.chunk_size;
      std::string algo = SsdAlgorithmName(algorithm);
      if (packed) algo += kPackedSuffix;
      if (!options.algo.empty() && options.algo != algo) continue;
      const SsdInputs& inputs = packed ? packed_inputs : data.inputs;
      const SsdOutputs outputs =
          packed ? packed_outputs : SsdOutputs{data.out_t, data.final_t, Tensor{}};
      Status status = Status::Ok();
      auto forward = [&] {
        if (status.ok()) status = SsdForward(inputs, outputs, ssd_options);
      };
      auto both = [&] {
        forward();
        if (status.ok())
          status = SsdBackward(inputs, data.dout_t, Tensor{}, data.grads, ssd_options);
      };
      // Interleaved: the fwd+bwd / fwd ratio has a bar (<= 4x, issue 3), and this machine's
      // speed drifts between two medians taken one after the other.
      const std::vector<double> ms = MedianMsInterleaved(options, {forward, both});
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
      }
      const double fwd_ms = ms[0], both_ms = ms[1];
      Result fwd{"ssd", shape.name, algo, "fwd", fwd_ms, fwd_bytes, states, "state"};
      peer.Apply(GgmlCase(shape), shape.ggml_fwd_ms, "ggml, docs/targets.md, not this run", &fwd);
      results.push_back(fwd);
      results.push_back({"ssd", shape.name, algo, "fwd+bwd", both_ms, 2 * fwd_bytes + seq_bytes,
                         states, "state"});
      char note[160];
      std::snprintf(note, sizeof note, "%s %s: fwd+bwd / fwd = %.2fx (timed interleaved)",
                    shape.name, algo.c_str(), both_ms / fwd_ms);
      ratios.push_back(note);
    }
  }
  Print(options, results);
  std::vector<std::string> notes = peer.Notes();
  notes.insert(notes.end(), ratios.begin(), ratios.end());
  PrintNotes(options, notes);
  return 0;
}

const SuiteRegistration kRegistration{
    {"ssd",
     "Mamba-2 SSD scan, auto/sequential/chunked: m2-130m, m2-h48-l512, m2-130m-b4, decode; "
     "+cu_seqlens: batch-1 rows packing 8 sequences",
     RunSsdBench}};

}  // namespace
}  // namespace ssmkit::bench

// `ssmkit bench scan`: the Mamba-1 selective scan at the TARGETS.md workload shapes, every
// algorithm, forward and forward+backward, inputs distributed as in a Mamba-1 layer.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "ssmkit/selective_scan.hpp"

namespace ssmkit::bench {
namespace {

struct ScanShape {
  const char* name;
  int64_t batch, dim, seqlen, dstate;
  double ggml_fwd_ms;  // llama.cpp ggml CPU, 2 threads, this machine kind (TARGETS.md); 0 = none
};

constexpr ScanShape kShapes[] = {
    {"policy", 1, 512, 60, 16, 1.49},
    {"policy-train", 256, 512, 60, 16, 0.0},
    {"m1-130m", 1, 1536, 2048, 16, 123.8},
    {"decode", 1, 1536, 1, 16, 0.0757},
};

// A Mamba-1 layer's scan: variable B and C (B, N, L), D, z, delta_bias, softplus; S4D-real
// A = -(n + 1); dt = softplus(delta + bias) log-uniform in [1e-3, 1e-1].
struct ScanData {
  std::vector<float> u, delta, A, B, C, D, z, delta_bias, out, final_state;
  std::vector<float> du, ddelta, dA, dB, dC, dD, dz, ddelta_bias;
  SelectiveScanInputs inputs;
  Tensor out_t, final_t, dout_t;
  SelectiveScanGrads grads;

  explicit ScanData(const ScanShape& s) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> log_dt(std::log(1e-3f), std::log(1e-1f));
    const int64_t seq = s.batch * s.dim * s.seqlen, bc = s.batch * s.dstate * s.seqlen;
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(n);
      for (auto& x : v) x = normal(rng);
    };
    fill(u, seq);
    fill(z, seq);
    fill(B, bc);
    fill(C, bc);
    fill(D, s.dim);
    delta.resize(seq);
    for (auto& x : delta) x = std::log(std::expm1(std::exp(log_dt(rng))));
    delta_bias.assign(s.dim, 0.0f);
    A.resize(s.dim * s.dstate);
    for (int64_t d = 0; d < s.dim; ++d)
      for (int64_t n = 0; n < s.dstate; ++n) A[d * s.dstate + n] = -static_cast<float>(n + 1);
    out.resize(seq);
    final_state.resize(s.batch * s.dim * s.dstate);
    for (auto* g : {&du, &ddelta, &dz}) g->resize(seq);
    dA.resize(A.size());
    dB.resize(bc);
    dC.resize(bc);
    dD.resize(s.dim);
    ddelta_bias.resize(s.dim);
    const DType f32 = DType::kF32;
    inputs.u = Tensor::Contiguous(u.data(), f32, {s.batch, s.dim, s.seqlen});
    inputs.delta = Tensor::Contiguous(delta.data(), f32, {s.batch, s.dim, s.seqlen});
    inputs.A = Tensor::Contiguous(A.data(), f32, {s.dim, s.dstate});
    inputs.B = Tensor::Contiguous(B.data(), f32, {s.batch, s.dstate, s.seqlen});
    inputs.C = Tensor::Contiguous(C.data(), f32, {s.batch, s.dstate, s.seqlen});
    inputs.D = Tensor::Contiguous(D.data(), f32, {s.dim});
    inputs.z = Tensor::Contiguous(z.data(), f32, {s.batch, s.dim, s.seqlen});
    inputs.delta_bias = Tensor::Contiguous(delta_bias.data(), f32, {s.dim});
    inputs.delta_softplus = true;
    out_t = Tensor::Contiguous(out.data(), f32, {s.batch, s.dim, s.seqlen});
    final_t = Tensor::Contiguous(final_state.data(), f32, {s.batch, s.dim, s.dstate});
    dout_t = inputs.z;  // any (B, D, L) f32 tensor serves as the incoming gradient
    grads.du = Tensor::Contiguous(du.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.ddelta = Tensor::Contiguous(ddelta.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.dz = Tensor::Contiguous(dz.data(), f32, {s.batch, s.dim, s.seqlen});
    grads.dA = Tensor::Contiguous(dA.data(), f32, {s.dim, s.dstate});
    grads.dB = Tensor::Contiguous(dB.data(), f32, {s.batch, s.dstate, s.seqlen});
    grads.dC = Tensor::Contiguous(dC.data(), f32, {s.batch, s.dstate, s.seqlen});
    grads.dD = Tensor::Contiguous(dD.data(), f32, {s.dim});
    grads.ddelta_bias = Tensor::Contiguous(ddelta_bias.data(), f32, {s.dim});
  }
};

int RunScanBench(const Options& options) {
  std::vector<Result> results;
  for (const ScanShape& shape : kShapes) {
    if (!options.shape.empty() && options.shape != shape.name) continue;
    ScanData data(shape);
    // Minimum traffic: read u, delta, z, B, C and write out (f32); the backward also reads
    // dout and writes du, ddelta, dz, dB, dC.
    const double seq_bytes = 4.0 * shape.batch * shape.dim * shape.seqlen;
    const double bc_bytes = 4.0 * shape.batch * shape.dstate * shape.seqlen;
    const double states = static_cast<double>(shape.batch) * shape.dim * shape.seqlen * shape.dstate;
    for (int a = 0; a <= static_cast<int>(ScanAlgorithm::kLogSpace); ++a) {
      SelectiveScanOptions scan_options;
      scan_options.algorithm = static_cast<ScanAlgorithm>(a);
      const std::string algo = ScanAlgorithmName(scan_options.algorithm);
      if (!options.algo.empty() && options.algo != algo) continue;
      Status status = Status::Ok();
      const double fwd_ms = MedianMs(options, [&] {
        status = SelectiveScanForward(data.inputs, data.out_t, data.final_t, scan_options);
      });
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
      }
      Result fwd{"selective_scan", shape.name, algo, "fwd", fwd_ms, 4 * seq_bytes + 2 * bc_bytes, states, "state"};
      if (shape.ggml_fwd_ms > 0) {
        fwd.peer_ms = shape.ggml_fwd_ms;
        fwd.peer = "ggml, TARGETS.md, not this run";
      }
      results.push_back(fwd);
      const double both_ms = MedianMs(options, [&] {
        status = SelectiveScanForward(data.inputs, data.out_t, data.final_t, scan_options);
        if (status.ok()) status = SelectiveScanBackward(data.inputs, data.dout_t, Tensor{}, data.grads, scan_options);
      });
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
      }
      results.push_back({"selective_scan", shape.name, algo, "fwd+bwd", both_ms,
                         4 * seq_bytes + 2 * bc_bytes + 4 * seq_bytes + 4 * bc_bytes, states, "state"});
    }
  }
  Print(options, results);
  return 0;
}

const SuiteRegistration kRegistration{
    {"scan", "Mamba-1 selective scan, every algorithm: policy, policy-train, m1-130m, decode", RunScanBench}};

}  // namespace
}  // namespace ssmkit::bench

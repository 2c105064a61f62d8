// `ssmkit check scan`: every scan algorithm against the fp64 oracle on fresh random inputs
// shaped like a Mamba-1 layer, at chosen lengths. The source of docs/numerics.md.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check_harness.hpp"
#include "ref/selective_scan_ref.hpp"
#include "ssmkit/selective_scan.hpp"

namespace ssmkit::check_cli {
namespace {

struct Measurement {
  std::string algo;
  int64_t seqlen;
  double out_error, state_error, min_log_decay;
  int64_t non_finite;
};

double RelError(const std::vector<float>& got, const std::vector<double>& want, int64_t* non_finite) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++*non_finite;
      continue;
    }
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return *non_finite ? INFINITY : std::sqrt(diff / norm);
}

// B=1, D=dim channels, N=16, variable B/C, D, z, softplus; A = -(n+1) (S4D-real);
// dt log-uniform in [dt_min, dt_max].
std::vector<Measurement> MeasureLength(const Options& o, int64_t L, uint64_t seed) {
  const int64_t D = o.dim, N = 16;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> log_dt(std::log(o.dt_min), std::log(o.dt_max));
  std::vector<double> u(D * L), delta(D * L), A(D * N), B(N * L), C(N * L), Dskip(D), z(D * L);
  for (auto& x : u) x = static_cast<float>(normal(rng));
  for (auto& x : z) x = static_cast<float>(normal(rng));
  for (auto& x : B) x = static_cast<float>(normal(rng));
  for (auto& x : C) x = static_cast<float>(normal(rng));
  for (auto& x : Dskip) x = static_cast<float>(normal(rng));
  for (auto& x : delta) x = static_cast<float>(std::log(std::expm1(std::exp(log_dt(rng)))));
  for (int64_t i = 0; i < D * N; ++i) A[i] = -static_cast<double>(i % N + 1);
  auto to_f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  std::vector<float> uf = to_f32(u), deltaf = to_f32(delta), Af = to_f32(A), Bf = to_f32(B), Cf = to_f32(C),
                     Df = to_f32(Dskip), zf = to_f32(z);

  ref::ScanShape shape;
  shape.dim = D;
  shape.seqlen = L;
  shape.dstate = N;
  shape.delta_softplus = true;
  ref::ScanInputs ref_in{u.data(), delta.data(), A.data(), B.data(), C.data(), Dskip.data(), z.data(), nullptr, nullptr};
  std::vector<double> ref_out(D * L), ref_state(D * N);
  ref::SelectiveScanForward(shape, ref_in, ref_out.data(), ref_state.data());
  // The most negative summed decay sum_l dt_l * A over the rows: log-space needs e^-that.
  double min_log_decay = 0;
  for (int64_t d = 0; d < D; ++d) {
    double sum = 0;
    for (int64_t l = 0; l < L; ++l) sum += std::log1p(std::exp(delta[d * L + l])) * -static_cast<double>(N);
    min_log_decay = std::min(min_log_decay, sum);
  }

  SelectiveScanInputs in;
  in.u = Tensor::Contiguous(uf.data(), DType::kF32, {1, D, L});
  in.delta = Tensor::Contiguous(deltaf.data(), DType::kF32, {1, D, L});
  in.A = Tensor::Contiguous(Af.data(), DType::kF32, {D, N});
  in.B = Tensor::Contiguous(Bf.data(), DType::kF32, {1, N, L});
  in.C = Tensor::Contiguous(Cf.data(), DType::kF32, {1, N, L});
  in.D = Tensor::Contiguous(Df.data(), DType::kF32, {D});
  in.z = Tensor::Contiguous(zf.data(), DType::kF32, {1, D, L});
  in.delta_softplus = true;
  std::vector<Measurement> rows;
  for (int a = 0; a <= static_cast<int>(ScanAlgorithm::kLogSpace); ++a) {
    SelectiveScanOptions options;
    options.algorithm = static_cast<ScanAlgorithm>(a);
    if (!o.algo.empty() && o.algo != ScanAlgorithmName(options.algorithm)) continue;
    std::vector<float> out(D * L, NAN), state(D * N, NAN);
    const Status s = SelectiveScanForward(in, Tensor::Contiguous(out.data(), DType::kF32, {1, D, L}),
                                          Tensor::Contiguous(state.data(), DType::kF32, {1, D, N}), options);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return {};
    }
    Measurement m{ScanAlgorithmName(options.algorithm), L, 0, 0, min_log_decay, 0};
    m.out_error = RelError(out, ref_out, &m.non_finite);
    m.state_error = RelError(state, ref_state, &m.non_finite);
    rows.push_back(m);
  }
  return rows;
}

int RunCheckScan(const Options& o) {
  const uint64_t seed = o.seed ? o.seed : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("# selective_scan vs fp64 oracle: B=1 D=%lld N=16, dt log-uniform in [%g, %g], seed %llu\n",
              static_cast<long long>(o.dim), o.dt_min, o.dt_max, static_cast<unsigned long long>(seed));
  std::printf("%-14s %7s %14s %14s %10s %18s\n", "algo", "L", "rel err out", "rel err state", "non-finite",
              "min sum(dt*A_n)");
  for (int64_t L : o.lengths) {
    for (const Measurement& m : MeasureLength(o, L, seed + static_cast<uint64_t>(L))) {
      std::printf("%-14s %7lld %14.3e %14.3e %10lld %18.1f\n", m.algo.c_str(), static_cast<long long>(m.seqlen),
                  m.out_error, m.state_error, static_cast<long long>(m.non_finite), m.min_log_decay);
    }
  }
  return 0;
}

const Registration kRegistration{{"scan", "selective scan: every algorithm vs the fp64 oracle", RunCheckScan}};

}  // namespace
}  // namespace ssmkit::check_cli

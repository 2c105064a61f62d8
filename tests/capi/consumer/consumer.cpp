// A C++ consumer of the installed static library (find_package(ssmkit COMPONENTS static)):
// one RMSNorm forward through the C++ API, checked against its definition.
#include <cmath>
#include <cstdio>
#include <ssmkit/norm.hpp>
#include <vector>

int main() {
  const int64_t M = 3, E = 4;
  std::vector<float> x = {1, -2, 3, 0.5f, 2, 2, -1, 4, 0.25f, -3, 1, 1};
  std::vector<float> w = {1, 0.5f, -1, 2}, out(M * E);
  ssmkit::RmsNormInputs in;
  in.x = ssmkit::Tensor::Contiguous(x.data(), ssmkit::DType::kF32, {M, E});
  in.weight = ssmkit::Tensor::Contiguous(w.data(), ssmkit::DType::kF32, {E});
  const ssmkit::Status s = ssmkit::RmsNormForward(
      in, ssmkit::Tensor::Contiguous(out.data(), ssmkit::DType::kF32, {M, E}));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t e = 0; e < E; ++e) ss += double(x[m * E + e]) * x[m * E + e];
    const double rstd = 1.0 / std::sqrt(ss / E + 1e-6);
    for (int64_t e = 0; e < E; ++e) {
      const double want = x[m * E + e] * rstd * w[e];
      if (std::fabs(out[m * E + e] - want) > 1e-5) {
        std::fprintf(stderr, "out[%ld,%ld] = %g, want %g\n", long(m), long(e), out[m * E + e],
                     want);
        return 1;
      }
    }
  }
  std::printf("consumer: C++ static library ok\n");
  return 0;
}

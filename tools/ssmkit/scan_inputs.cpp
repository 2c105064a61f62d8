#include "scan_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace ssmkit::scan_inputs {

double Softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

namespace {

double InverseSoftplus(double y) { return std::log(std::expm1(y)); }  // y > 0

}  // namespace

LayerData MakeLayerData(const Shape& s, const Options& options, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> log_dt(std::log(options.dt_min), std::log(options.dt_max));
  const int64_t seq = s.batch * s.dim * s.seqlen, bc = s.batch * s.dstate * s.seqlen;
  auto normals = [&](int64_t count, double mean, double sd) {
    std::vector<float> v(count);
    for (float& x : v) x = static_cast<float>(mean + sd * normal(rng));
    return v;
  };
  LayerData data;
  data.shape = s;
  data.u = normals(seq, 0.0, 1.0);
  data.z = normals(seq, 0.0, 1.0);
  data.B = normals(bc, 0.0, 1.0);
  data.C = normals(bc, 0.0, 1.0);
  data.D = normals(s.dim, 1.0, 0.1);
  data.A.resize(s.dim * s.dstate);
  for (int64_t d = 0; d < s.dim; ++d) {
    for (int64_t n = 0; n < s.dstate; ++n) data.A[d * s.dstate + n] = -static_cast<float>(n + 1);
  }
  data.delta_bias.resize(s.dim);
  for (float& bias : data.delta_bias)
    bias = static_cast<float>(InverseSoftplus(std::exp(log_dt(rng))));
  data.delta.resize(seq);
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t d = (i / s.seqlen) % s.dim;
    data.delta[i] = static_cast<float>(InverseSoftplus(std::exp(log_dt(rng))) - data.delta_bias[d]);
  }
  if (options.with_initial_state)
    data.initial_state = normals(s.batch * s.dim * s.dstate, 0.0, 1.0);
  return data;
}

SelectiveScanInputs LayerData::Inputs() const {
  const Shape& s = shape;
  const DType f32 = DType::kF32;
  SelectiveScanInputs in;
  in.u = Tensor::Contiguous(u.data(), f32, {s.batch, s.dim, s.seqlen});
  in.delta = Tensor::Contiguous(delta.data(), f32, {s.batch, s.dim, s.seqlen});
  in.A = Tensor::Contiguous(A.data(), f32, {s.dim, s.dstate});
  in.B = Tensor::Contiguous(B.data(), f32, {s.batch, s.dstate, s.seqlen});
  in.C = Tensor::Contiguous(C.data(), f32, {s.batch, s.dstate, s.seqlen});
  in.D = Tensor::Contiguous(D.data(), f32, {s.dim});
  in.z = Tensor::Contiguous(z.data(), f32, {s.batch, s.dim, s.seqlen});
  in.delta_bias = Tensor::Contiguous(delta_bias.data(), f32, {s.dim});
  if (!initial_state.empty()) {
    in.initial_state = Tensor::Contiguous(initial_state.data(), f32, {s.batch, s.dim, s.dstate});
  }
  in.delta_softplus = true;
  return in;
}

std::vector<double> LayerData::CumulativeLogDecay(int64_t b, int64_t d) const {
  const int64_t L = shape.seqlen, row = (b * shape.dim + d) * L;
  const double a =
      *std::min_element(A.begin() + d * shape.dstate, A.begin() + (d + 1) * shape.dstate);
  std::vector<double> sums(L);
  double sum = 0.0;
  for (int64_t l = 0; l < L; ++l) {
    sum += Softplus(static_cast<double>(delta[row + l]) + delta_bias[d]) * a;
    sums[l] = sum;
  }
  return sums;
}

}  // namespace ssmkit::scan_inputs

// fp64 oracle of rotary position embeddings: per token and pair f, the angle
// a = float32(inv_freq[f] * position) and the rotation
//   x0' = x0 c - x1 s,  x1' = x1 c + x0 s,   c = cos(a) * scaling, s = sin(a) * scaling
// with s negated for the backward (the transpose of the rotation).
#include "ref/rope_ref.hpp"

#include <cmath>

namespace ssmkit::ref {

std::vector<float> RopeInvFreq(double theta, int64_t rotary_dim) {
  // 1 / theta^(arange(0, R, 2) / R), every step in float32 as torch does it.
  std::vector<float> inv(static_cast<size_t>(rotary_dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t f = 0; f < rotary_dim / 2; ++f) {
    const float exponent = static_cast<float>(2 * f) / static_cast<float>(rotary_dim);
    inv[f] = 1.0f / std::pow(base, exponent);
  }
  return inv;
}

void Rope(const RopeShape& s, const double* x, const int32_t* positions, const float* inv_freq,
          bool backward, double* out) {
  const int64_t E = s.head_dim, R = s.rotary_dim, half = R / 2;
  const std::vector<float> own = RopeInvFreq(s.theta, R);
  const float* freq = inv_freq ? inv_freq : own.data();
  for (int64_t t = 0; t < s.batch * s.len; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const double* xr = x + (t * s.heads + h) * E;
      double* yr = out + (t * s.heads + h) * E;
      for (int64_t f = 0; f < half; ++f) {
        const float angle = freq[f] * static_cast<float>(positions[t]);
        const double c = std::cos(static_cast<double>(angle)) * s.attention_scaling;
        const double sn =
            std::sin(static_cast<double>(angle)) * s.attention_scaling * (backward ? -1.0 : 1.0);
        const int64_t i0 = s.interleaved ? 2 * f : f;
        const int64_t i1 = s.interleaved ? 2 * f + 1 : f + half;
        const double x0 = xr[i0], x1 = xr[i1];
        yr[i0] = x0 * c - x1 * sn;
        yr[i1] = x1 * c + x0 * sn;
      }
      for (int64_t e = R; e < E; ++e) yr[e] = xr[e];
    }
  }
}

}  // namespace ssmkit::ref

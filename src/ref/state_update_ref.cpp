// fp64 oracle of selective_state_update: the definition of include/ssmkit/state_update.hpp,
//   dt' = softplus(dt + dt_bias),  h = exp(dt' A) h + dt' B x,  y = C . h + D x,  out = y silu(z),
// once per form. Rows whose state index is negative are skipped entirely.
#include "ref/state_update_ref.hpp"

#include <cmath>

namespace ssmkit::ref {
namespace {

double Softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }
double Silu(double v) { return v / (1.0 + std::exp(-v)); }

double TimeStep(const StateUpdateShape& s, const StateUpdateInputs& in, int64_t b, int64_t h) {
  const double v = in.dt[b * s.dim + h] + (in.dt_bias ? in.dt_bias[h] : 0.0);
  return s.dt_softplus ? Softplus(v) : v;
}

int64_t StateRow(const StateUpdateInputs& in, int64_t b) {
  return in.state_batch_indices ? in.state_batch_indices[b] : b;
}

}  // namespace

void SelectiveStateUpdate1(const StateUpdateShape& s, const StateUpdateInputs& in, double* state,
                           double* out) {
  const int64_t D = s.dim, N = s.dstate;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t sb = StateRow(in, b);
    if (sb < 0) continue;
    for (int64_t d = 0; d < D; ++d) {
      const double dt = TimeStep(s, in, b, d);
      const double x = in.x[b * D + d];
      const int64_t gb = d / (D / s.b_groups), gc = d / (D / s.c_groups);
      double* h = state + (sb * D + d) * N;
      double y = in.D ? in.D[d] * x : 0.0;
      for (int64_t n = 0; n < N; ++n) {
        h[n] = std::exp(dt * in.A[d * N + n]) * h[n] + dt * in.B[(b * s.b_groups + gb) * N + n] * x;
        y += in.C[(b * s.c_groups + gc) * N + n] * h[n];
      }
      out[b * D + d] = in.z ? y * Silu(in.z[b * D + d]) : y;
    }
  }
}

void SelectiveStateUpdate2(const StateUpdateShape& s, const StateUpdateInputs& in, double* state,
                           double* out) {
  const int64_t H = s.dim, P = s.headdim, N = s.dstate;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t sb = StateRow(in, b);
    if (sb < 0) continue;
    for (int64_t hd = 0; hd < H; ++hd) {
      const double dt = TimeStep(s, in, b, hd);
      const double decay = std::exp(dt * in.A[hd]);
      const int64_t gb = hd / (H / s.b_groups), gc = hd / (H / s.c_groups);
      for (int64_t p = 0; p < P; ++p) {
        const int64_t i = (b * H + hd) * P + p;
        const double x = in.x[i];
        double* h = state + ((sb * H + hd) * P + p) * N;
        double y = in.D ? in.D[s.d_per_p ? hd * P + p : hd] * x : 0.0;
        for (int64_t n = 0; n < N; ++n) {
          h[n] = decay * h[n] + dt * in.B[(b * s.b_groups + gb) * N + n] * x;
          y += in.C[(b * s.c_groups + gc) * N + n] * h[n];
        }
        out[i] = in.z ? y * Silu(in.z[i]) : y;
      }
    }
  }
}

}  // namespace ssmkit::ref

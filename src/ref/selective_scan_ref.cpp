// fp64 oracle of the selective scan. Forward follows the definition step by step; backward
// keeps every state h (B, D, L, N) and runs the adjoint recurrence
//   g_l = dy_l * C_l + a_{l+1} * g_{l+1},   g_{L-1} = dy_{L-1} * C_{L-1} + dfinal_state
// with a_l = exp(dt_l * A). From g: dB_l = g * dt_l * u_l, da_l = g * h_{l-1},
// dA += da_l * a_l * dt_l, ddt_l = sum_n g * B * u + da_l * a_l * A, dh0 = a_0 * g_0.
// Packed sequences: where sequence k starts, h_{l-1} reads as its initial state (zeros, or
// h0[k] per sequence); g does not flow back past that step: a_l g_l goes to the initial
// state's gradient, and g restarts from the gradient reaching sequence k-1's last state.
#include "ref/selective_scan_ref.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ref/packed_sequences_ref.hpp"

namespace ssmkit::ref {
namespace {

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// Index of B or C element (b, d, n, l) in its contiguous form.
int64_t BCIndex(const ScanShape& s, bool variable, int64_t groups, int64_t b, int64_t d, int64_t n,
                int64_t l) {
  if (!variable) return d * s.dstate + n;
  const int64_t g = d / (s.dim / groups);
  return ((b * groups + g) * s.dstate + n) * s.seqlen + l;
}

// dt for (b, d, l) and the derivative of dt with respect to delta.
void TimeStep(const ScanShape& s, const ScanInputs& in, int64_t d, double delta, double* dt,
              double* ddt_ddelta) {
  const double x = delta + (in.delta_bias ? in.delta_bias[d] : 0.0);
  if (s.delta_softplus && x <= 20.0) {
    *dt = Softplus(x);
    *ddt_ddelta = Sigmoid(x);
  } else {
    *dt = x;
    *ddt_ddelta = 1.0;
  }
}

RowSequences Sequences(const ScanShape& s, const ScanInputs& in, int64_t b) {
  return PackedRow(in.seq_idx ? in.seq_idx + b * s.seqlen : nullptr, in.cu_seqlens, s.nseqs,
                   s.seqlen);
}

// Offset of (b, d)'s row in h0 (and dh0) for sequence k of row b, or -1 where that sequence
// starts from zeros.
int64_t InitialRow(const ScanShape& s, const ScanInputs& in, int64_t b, int64_t d, int64_t k) {
  if (!in.h0) return -1;
  if (s.h0_per_sequence) return (k * s.dim + d) * s.dstate;
  return k == 0 ? (b * s.dim + d) * s.dstate : -1;
}

// Runs the recurrence of one (b, d) row, writing y (before the gate) and all states.
void ForwardRow(const ScanShape& s, const ScanInputs& in, const RowSequences& rs, int64_t b,
                int64_t d, double* y, double* h_all /* (L, N) */, double* h_last /* (N) */,
                double* varlen_states) {
  const int64_t L = s.seqlen, N = s.dstate, row = (b * s.dim + d) * L;
  std::vector<double> h(N);
  for (int64_t l = 0; l < L; ++l) {
    if (rs.starts[l]) {
      const int64_t init = InitialRow(s, in, b, d, rs.seq[l]);
      for (int64_t n = 0; n < N; ++n) h[n] = init >= 0 ? in.h0[init + n] : 0.0;
    }
    double dt, unused;
    TimeStep(s, in, d, in.delta[row + l], &dt, &unused);
    const double u = in.u[row + l];
    double acc = in.D ? in.D[d] * u : 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const double a = std::exp(dt * in.A[d * N + n]);
      const double bx = in.B[BCIndex(s, s.b_variable, s.b_groups, b, d, n, l)];
      h[n] = a * h[n] + dt * bx * u;
      acc += in.C[BCIndex(s, s.c_variable, s.c_groups, b, d, n, l)] * h[n];
      if (h_all) h_all[l * N + n] = h[n];
    }
    y[l] = acc;
    if (varlen_states && rs.EndsAt(l)) {
      std::copy(h.begin(), h.end(), varlen_states + (rs.seq[l] * s.dim + d) * N);
    }
  }
  for (int64_t n = 0; n < N; ++n) h_last[n] = h[n];
}

}  // namespace

void SelectiveScanForward(const ScanShape& s, const ScanInputs& in, double* out,
                          double* final_state, double* varlen_states) {
  const int64_t L = s.seqlen, N = s.dstate;
  std::vector<double> h_last(N);
  for (int64_t b = 0; b < s.batch; ++b) {
    const RowSequences rs = Sequences(s, in, b);
    for (int64_t d = 0; d < s.dim; ++d) {
      const int64_t row = (b * s.dim + d) * L;
      ForwardRow(s, in, rs, b, d, out + row, nullptr, h_last.data(), varlen_states);
      if (in.z) {
        for (int64_t l = 0; l < L; ++l) {
          const double zv = in.z[row + l];
          out[row + l] *= zv * Sigmoid(zv);
        }
      }
      if (final_state) {
        for (int64_t n = 0; n < N; ++n) final_state[(b * s.dim + d) * N + n] = h_last[n];
      }
    }
  }
}

void SelectiveScanBackward(const ScanShape& s, const ScanInputs& in, const double* dout,
                           const double* dfinal_state, const ScanGrads& gr,
                           const double* dvarlen_states) {
  const int64_t B = s.batch, D = s.dim, L = s.seqlen, N = s.dstate;
  auto zero = [](double* p, int64_t count) {
    if (p) std::fill(p, p + count, 0.0);
  };
  const int64_t b_size = s.b_variable ? B * s.b_groups * N * L : D * N;
  const int64_t c_size = s.c_variable ? B * s.c_groups * N * L : D * N;
  zero(gr.dA, D * N);
  zero(gr.dB, b_size);
  zero(gr.dC, c_size);
  zero(gr.dD, D);
  zero(gr.ddelta_bias, D);
  // An initial state no sequence starts from gets a zero gradient.
  zero(gr.dh0, (s.h0_per_sequence ? s.nseqs : B) * D * N);

  std::vector<double> y(L), h_all(L * N), h_last(N), g(N), h_prev(N);
  for (int64_t b = 0; b < B; ++b) {
    const RowSequences rs = Sequences(s, in, b);
    for (int64_t d = 0; d < D; ++d) {
      const int64_t row = (b * D + d) * L;
      ForwardRow(s, in, rs, b, d, y.data(), h_all.data(), h_last.data(), nullptr);
      for (int64_t n = 0; n < N; ++n) g[n] = dfinal_state ? dfinal_state[(b * D + d) * N + n] : 0.0;
      for (int64_t l = L - 1; l >= 0; --l) {
        if (dvarlen_states && rs.EndsAt(l)) {  // g_l also reaches sequence k's last state
          for (int64_t n = 0; n < N; ++n) g[n] += dvarlen_states[(rs.seq[l] * D + d) * N + n];
        }
        const int64_t init = rs.starts[l] ? InitialRow(s, in, b, d, rs.seq[l]) : -1;
        for (int64_t n = 0; n < N; ++n) {
          h_prev[n] = !rs.starts[l] ? h_all[(l - 1) * N + n] : (init >= 0 ? in.h0[init + n] : 0.0);
        }
        double dy = dout[row + l];
        if (in.z) {
          const double zv = in.z[row + l], sig = Sigmoid(zv);
          if (gr.dz) gr.dz[row + l] = dout[row + l] * y[l] * sig * (1.0 + zv * (1.0 - sig));
          dy = dout[row + l] * zv * sig;
        }
        double dt, ddt_ddelta;
        TimeStep(s, in, d, in.delta[row + l], &dt, &ddt_ddelta);
        const double u = in.u[row + l];
        double du = in.D ? dy * in.D[d] : 0.0;
        double ddt = 0.0;
        if (gr.dD) gr.dD[d] += dy * u;
        for (int64_t n = 0; n < N; ++n) {
          const int64_t bi = BCIndex(s, s.b_variable, s.b_groups, b, d, n, l);
          const int64_t ci = BCIndex(s, s.c_variable, s.c_groups, b, d, n, l);
          const double a_coef = in.A[d * N + n];
          const double a = std::exp(dt * a_coef);
          if (gr.dC) gr.dC[ci] += dy * h_all[l * N + n];
          g[n] += dy * in.C[ci];  // g is now dLoss/dh_l
          const double da = g[n] * h_prev[n];
          if (gr.dB) gr.dB[bi] += g[n] * dt * u;
          du += g[n] * dt * in.B[bi];
          ddt += g[n] * in.B[bi] * u + da * a * a_coef;
          if (gr.dA) gr.dA[d * N + n] += da * a * dt;
          g[n] *= a;  // dLoss/dh_{l-1} through this step
        }
        if (gr.du) gr.du[row + l] = du;
        const double ddelta = ddt * ddt_ddelta;
        if (gr.ddelta) gr.ddelta[row + l] = ddelta;
        if (gr.ddelta_bias) gr.ddelta_bias[d] += ddelta;
        if (rs.starts[l]) {  // g is the gradient of the sequence's initial state
          if (gr.dh0 && init >= 0) std::copy(g.begin(), g.end(), gr.dh0 + init);
          std::fill(g.begin(), g.end(), 0.0);
        }
      }
    }
  }
}

}  // namespace ssmkit::ref

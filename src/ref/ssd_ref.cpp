// fp64 oracle of the SSD scan. Each (b, h) is an independent recurrence over l with a
// (P, N) state. Forward follows the definition step by step; backward keeps every state
// h_l (L, P, N) and runs the adjoint recurrence backwards in time:
//   g_l  = dy_l C_l^T + [no reset at l+1] a_{l+1} g_{l+1},   g_{L-1} += dfinal_states
// (g_l = dLoss/dh_l, a_l = exp(dt_l A), dy = dout * silu(z)). From g:
//   dx_l  = D dy_l + dt_l g_l B_l                 dB_l += dt_l g_l^T x_l (summed over heads)
//   dC_l += h_l^T dy_l (summed over heads)        da_l  = <g_l, h_{l-1}>
//   ddt_l = <g_l, x_l B_l^T> + da_l a_l A         dA   += da_l a_l dt_l
//   dh0   = a_0 g_0,  and ddt_in = ddt * [dt inside the clamp] * softplus'(dt_in + bias).
// Packed sequences: where sequence k starts, h_{l-1} reads as its initial state (zeros, or
// h0[k] per sequence); there a_l g_l is that state's gradient, and g restarts from the
// gradient reaching sequence k-1's last state.
#include "ref/ssd_ref.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ref/packed_sequences_ref.hpp"

namespace ssmkit::ref {
namespace {

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double Softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

// dt for (b, l, h) after bias, softplus and clamp, and d dt / d dt_in (zero where clamped).
void TimeStep(const SsdShape& s, const SsdInputs& in, int64_t b, int64_t l, int64_t h, double* dt,
              double* ddt_ddtin) {
  const double raw = in.dt[(b * s.seqlen + l) * s.nheads + h] + (in.dt_bias ? in.dt_bias[h] : 0.0);
  double v = raw, grad = 1.0;
  if (s.dt_softplus && raw <= 20.0) {
    v = Softplus(raw);
    grad = Sigmoid(raw);
  }
  if (v < s.dt_min || v > s.dt_max) grad = 0.0;
  *dt = std::min(std::max(v, s.dt_min), s.dt_max);
  *ddt_ddtin = grad;
}

RowSequences Sequences(const SsdShape& s, const SsdInputs& in, int64_t b) {
  return PackedRow(in.seq_idx ? in.seq_idx + b * s.seqlen : nullptr, in.cu_seqlens, s.nseqs,
                   s.seqlen);
}

struct Index {  // flat offsets into the contiguous arrays
  const SsdShape& s;
  int64_t x(int64_t b, int64_t l, int64_t h, int64_t p) const {
    return ((b * s.seqlen + l) * s.nheads + h) * s.headdim + p;
  }
  int64_t bc(int64_t b, int64_t l, int64_t h, int64_t n) const {
    const int64_t g = h / (s.nheads / s.ngroups);
    return ((b * s.seqlen + l) * s.ngroups + g) * s.dstate + n;
  }
  int64_t state(int64_t b, int64_t h, int64_t p, int64_t n) const {
    return ((b * s.nheads + h) * s.headdim + p) * s.dstate + n;
  }
  int64_t d(int64_t h, int64_t p) const { return s.d_per_channel ? h * s.headdim + p : h; }
  // Offset of head h's (P, N) block of h0 (and dh0) for sequence k of row b, or -1 where that
  // sequence starts from zeros.
  int64_t initial(const SsdInputs& in, int64_t b, int64_t h, int64_t k) const {
    if (!in.h0) return -1;
    if (s.h0_per_sequence) return state(k, h, 0, 0);
    return k == 0 ? state(b, h, 0, 0) : -1;
  }
};

// Runs the recurrence of one (b, h): y (L, P) before the gate, every state h_all (L, P, N)
// when asked, the last state (P, N), and each sequence's last into varlen_states.
void ForwardHead(const SsdShape& s, const SsdInputs& in, const RowSequences& rs, int64_t b,
                 int64_t h, double* y, double* h_all, double* h_last, double* varlen_states) {
  const Index ix{s};
  const int64_t P = s.headdim, N = s.dstate;
  std::vector<double> st(P * N);
  for (int64_t l = 0; l < s.seqlen; ++l) {
    if (rs.starts[l]) {
      const int64_t init = ix.initial(in, b, h, rs.seq[l]);
      for (int64_t i = 0; i < P * N; ++i) st[i] = init >= 0 ? in.h0[init + i] : 0.0;
    }
    double dt, unused;
    TimeStep(s, in, b, l, h, &dt, &unused);
    const double a = std::exp(dt * in.A[h]);
    for (int64_t p = 0; p < P; ++p) {
      const double xv = in.x[ix.x(b, l, h, p)];
      double acc = in.D ? in.D[ix.d(h, p)] * xv : 0.0;
      for (int64_t n = 0; n < N; ++n) {
        double& hv = st[p * N + n];
        hv = a * hv + dt * xv * in.B[ix.bc(b, l, h, n)];
        acc += in.C[ix.bc(b, l, h, n)] * hv;
      }
      y[l * P + p] = acc;
    }
    if (h_all) std::copy(st.begin(), st.end(), h_all + l * P * N);
    if (varlen_states && rs.EndsAt(l))
      std::copy(st.begin(), st.end(), varlen_states + ix.state(rs.seq[l], h, 0, 0));
  }
  std::copy(st.begin(), st.end(), h_last);
}

}  // namespace

void SsdForward(const SsdShape& s, const SsdInputs& in, double* out, double* final_states,
                double* varlen_states) {
  const Index ix{s};
  const int64_t L = s.seqlen, P = s.headdim, N = s.dstate;
  std::vector<double> y(L * P), h_last(P * N);
  for (int64_t b = 0; b < s.batch; ++b) {
    const RowSequences rs = Sequences(s, in, b);
    for (int64_t h = 0; h < s.nheads; ++h) {
      ForwardHead(s, in, rs, b, h, y.data(), nullptr, h_last.data(), varlen_states);
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t p = 0; p < P; ++p) {
          double v = y[l * P + p];
          if (in.z) {
            const double zv = in.z[ix.x(b, l, h, p)];
            v *= zv * Sigmoid(zv);
          }
          out[ix.x(b, l, h, p)] = v;
        }
      }
      if (final_states) {
        for (int64_t p = 0; p < P; ++p)
          for (int64_t n = 0; n < N; ++n) final_states[ix.state(b, h, p, n)] = h_last[p * N + n];
      }
    }
  }
}

void SsdBackward(const SsdShape& s, const SsdInputs& in, const double* dout,
                 const double* dfinal_states, const SsdGrads& gr, const double* dvarlen_states) {
  const Index ix{s};
  const int64_t Bn = s.batch, L = s.seqlen, H = s.nheads, P = s.headdim, N = s.dstate;
  auto zero = [](double* p, int64_t count) {
    if (p) std::fill(p, p + count, 0.0);
  };
  zero(gr.dA, H);
  zero(gr.dB, Bn * L * s.ngroups * N);
  zero(gr.dC, Bn * L * s.ngroups * N);
  zero(gr.dD, s.d_per_channel ? H * P : H);
  zero(gr.ddt_bias, H);
  // An initial state no sequence starts from gets a zero gradient.
  zero(gr.dh0, (s.h0_per_sequence ? s.nseqs : Bn) * H * P * N);

  std::vector<double> y(L * P), h_all(L * P * N), h_last(P * N), g(P * N), dy(P), h_prev(P * N);
  for (int64_t b = 0; b < Bn; ++b) {
    const RowSequences rs = Sequences(s, in, b);
    for (int64_t h = 0; h < H; ++h) {
      ForwardHead(s, in, rs, b, h, y.data(), h_all.data(), h_last.data(), nullptr);
      for (int64_t i = 0; i < P * N; ++i) {
        const int64_t p = i / N, n = i % N;
        g[i] = dfinal_states ? dfinal_states[ix.state(b, h, p, n)] : 0.0;
      }
      for (int64_t l = L - 1; l >= 0; --l) {
        if (dvarlen_states && rs.EndsAt(l)) {  // g_l also reaches sequence k's last state
          for (int64_t i = 0; i < P * N; ++i)
            g[i] += dvarlen_states[ix.state(rs.seq[l], h, 0, 0) + i];
        }
        const int64_t init = rs.starts[l] ? ix.initial(in, b, h, rs.seq[l]) : -1;
        for (int64_t i = 0; i < P * N; ++i) {
          h_prev[i] =
              !rs.starts[l] ? h_all[(l - 1) * P * N + i] : (init >= 0 ? in.h0[init + i] : 0.0);
        }
        for (int64_t p = 0; p < P; ++p) {
          const int64_t xi = ix.x(b, l, h, p);
          dy[p] = dout[xi];
          if (in.z) {
            const double zv = in.z[xi], sig = Sigmoid(zv);
            if (gr.dz) gr.dz[xi] = dout[xi] * y[l * P + p] * sig * (1.0 + zv * (1.0 - sig));
            dy[p] = dout[xi] * zv * sig;
          }
        }
        double dt, ddt_ddtin;
        TimeStep(s, in, b, l, h, &dt, &ddt_ddtin);
        const double a = std::exp(dt * in.A[h]);
        double ddt = 0.0, da = 0.0;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t xi = ix.x(b, l, h, p);
          const double xv = in.x[xi];
          double dx = in.D ? in.D[ix.d(h, p)] * dy[p] : 0.0;
          if (gr.dD) gr.dD[ix.d(h, p)] += dy[p] * xv;
          for (int64_t n = 0; n < N; ++n) {
            const int64_t bi = ix.bc(b, l, h, n), si = p * N + n;
            if (gr.dC) gr.dC[bi] += dy[p] * h_all[l * P * N + si];
            g[si] += dy[p] * in.C[bi];  // g is now dLoss/dh_l
            if (gr.dB) gr.dB[bi] += g[si] * dt * xv;
            dx += g[si] * dt * in.B[bi];
            ddt += g[si] * xv * in.B[bi];
            da += g[si] * h_prev[si];
          }
          if (gr.dx) gr.dx[xi] = dx;
        }
        ddt += da * a * in.A[h];
        if (gr.dA) gr.dA[h] += da * a * dt;
        const double ddt_in = ddt * ddt_ddtin;
        if (gr.ddt) gr.ddt[(b * L + l) * H + h] = ddt_in;
        if (gr.ddt_bias) gr.ddt_bias[h] += ddt_in;
        for (double& gv : g) gv *= a;  // dLoss/dh_{l-1} through this step
        if (rs.starts[l]) {            // g is the gradient of the sequence's initial state
          if (gr.dh0 && init >= 0) std::copy(g.begin(), g.end(), gr.dh0 + init);
          std::fill(g.begin(), g.end(), 0.0);
        }
      }
    }
  }
}

}  // namespace ssmkit::ref

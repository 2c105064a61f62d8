// fp64 oracle of the causal conv1d. Each row (b, d) is padded in front with its K - 1
// initial values, xpad = [h0, x], and
//   pre[l] = bias + sum_k w[k] xpad[l + k],   out[l] = act(pre[l]),   final = xpad[L : L+K-1].
// With seq_idx, xpad[l + k] counts for pre[l] only when it lies in l's sequence (h0 in the
// row's first), and final only takes the last sequence's inputs.
// Backward, with g[l] = dout[l] act'(pre[l]):
//   dxpad[j] = sum_k w[k] g[j - k]  (g = 0 outside [0, L))  +  dfinal[j - L]  (for j >= L)
//   dx[l] = dxpad[K-1 + l],  dh0[i] = dxpad[i],  dw[k] = sum_{b,l} g[l] xpad[l+k],  db = sum g
// (each term with the same mask as in the forward).
#include "ref/conv1d_ref.hpp"

#include <cmath>
#include <vector>

namespace ssmkit::ref {
namespace {

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// xpad of row (b, d): K - 1 initial values then the L inputs.
std::vector<double> PaddedRow(const Conv1dShape& s, const Conv1dInputs& in, int64_t b, int64_t d) {
  const int64_t K = s.width, L = s.seqlen, row = b * s.dim + d;
  std::vector<double> xpad(K - 1 + L, 0.0);
  for (int64_t i = 0; i < K - 1; ++i) {
    if (in.initial_states) xpad[i] = in.initial_states[row * (K - 1) + i];
  }
  for (int64_t l = 0; l < L; ++l) xpad[K - 1 + l] = in.x[row * L + l];
  return xpad;
}

// Whether xpad[j] (j < K - 1: an initial value) belongs to the sequence of position l.
bool SameSequence(const Conv1dShape& s, const Conv1dInputs& in, int64_t b, int64_t j, int64_t l) {
  if (!in.seq_idx) return true;
  const int32_t* seq = in.seq_idx + b * s.seqlen;
  const int64_t input = j - (s.width - 1);
  return seq[input < 0 ? 0 : input] == seq[l];
}

double PreActivation(const Conv1dShape& s, const Conv1dInputs& in, int64_t b, int64_t d,
                     const std::vector<double>& xpad, int64_t l) {
  double acc = in.bias ? in.bias[d] : 0.0;
  for (int64_t k = 0; k < s.width; ++k) {
    if (SameSequence(s, in, b, l + k, l)) acc += in.weight[d * s.width + k] * xpad[l + k];
  }
  return acc;
}

}  // namespace

void CausalConv1dForward(const Conv1dShape& s, const Conv1dInputs& in, double* out,
                         double* final_states) {
  const int64_t K = s.width, L = s.seqlen;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t d = 0; d < s.dim; ++d) {
      const int64_t row = b * s.dim + d;
      const std::vector<double> xpad = PaddedRow(s, in, b, d);
      for (int64_t l = 0; l < L; ++l) {
        const double pre = PreActivation(s, in, b, d, xpad, l);
        out[row * L + l] = s.silu ? pre * Sigmoid(pre) : pre;
      }
      if (final_states) {
        for (int64_t i = 0; i < K - 1; ++i) {
          const bool kept = SameSequence(s, in, b, L + i, L - 1);
          final_states[row * (K - 1) + i] = kept ? xpad[L + i] : 0.0;
        }
      }
    }
  }
}

void CausalConv1dBackward(const Conv1dShape& s, const Conv1dInputs& in, const double* dout,
                          const double* dfinal_states, const Conv1dGrads& gr) {
  const int64_t K = s.width, L = s.seqlen;
  if (gr.dweight) {
    for (int64_t i = 0; i < s.dim * K; ++i) gr.dweight[i] = 0.0;
  }
  if (gr.dbias) {
    for (int64_t d = 0; d < s.dim; ++d) gr.dbias[d] = 0.0;
  }
  std::vector<double> g(L);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t d = 0; d < s.dim; ++d) {
      const int64_t row = b * s.dim + d;
      const std::vector<double> xpad = PaddedRow(s, in, b, d);
      for (int64_t l = 0; l < L; ++l) {
        const double pre = PreActivation(s, in, b, d, xpad, l);
        const double sig = Sigmoid(pre);
        g[l] = dout[row * L + l] * (s.silu ? sig * (1.0 + pre * (1.0 - sig)) : 1.0);
      }
      std::vector<double> dxpad(K - 1 + L, 0.0);
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t k = 0; k < K; ++k) {
          if (!SameSequence(s, in, b, l + k, l)) continue;
          dxpad[l + k] += in.weight[d * K + k] * g[l];
          if (gr.dweight) gr.dweight[d * K + k] += g[l] * xpad[l + k];
        }
        if (gr.dbias) gr.dbias[d] += g[l];
      }
      if (dfinal_states) {
        for (int64_t i = 0; i < K - 1; ++i) {
          if (SameSequence(s, in, b, L + i, L - 1))
            dxpad[L + i] += dfinal_states[row * (K - 1) + i];
        }
      }
      if (gr.dx) {
        for (int64_t l = 0; l < L; ++l) gr.dx[row * L + l] = dxpad[K - 1 + l];
      }
      if (gr.dinitial_states) {
        for (int64_t i = 0; i < K - 1; ++i) gr.dinitial_states[row * (K - 1) + i] = dxpad[i];
      }
    }
  }
}

void CausalConv1dUpdate(const Conv1dShape& s, int64_t state_len, const double* x,
                        const double* weight, const double* bias, double* conv_state, double* out) {
  const int64_t K = s.width, T = s.seqlen, S = state_len;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t d = 0; d < s.dim; ++d) {
      const int64_t row = b * s.dim + d;
      double* state = conv_state + row * S;
      for (int64_t t = 0; t < T; ++t) {
        const double xt = x[row * T + t];
        // The window: the state's last K - 1 values, then x_t; weight[K-1] takes x_t.
        double pre = bias ? bias[d] : 0.0;
        for (int64_t k = 0; k < K - 1; ++k) pre += weight[d * K + k] * state[S - (K - 1) + k];
        pre += weight[d * K + K - 1] * xt;
        out[row * T + t] = s.silu ? pre * Sigmoid(pre) : pre;
        for (int64_t i = 0; i + 1 < S; ++i) state[i] = state[i + 1];
        state[S - 1] = xt;
      }
    }
  }
}

}  // namespace ssmkit::ref

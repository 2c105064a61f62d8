// fp64 oracle of the RMS norms. Every op is: a pre-step giving the normalised input x',
// the group normalisation xhat = x' * rstd, the affine y = xhat * w + b, and a post-step.
// The backward of the normalisation over one group of S features, g = dL/dy * w:
//   dL/dx'_i = rstd * (g_i - xhat_i * (1/S) sum_j g_j xhat_j)
// (from d rstd / d x'_i = -rstd^3 x'_i / S).
#include "ref/norm_ref.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ssmkit::ref {
namespace {

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double Silu(double v) { return v * Sigmoid(v); }
double SiluGrad(double v) {
  const double s = Sigmoid(v);
  return s * (1.0 + v * (1.0 - s));
}

int64_t GroupSize(const NormShape& s) { return s.group_size > 0 ? s.group_size : s.features; }

// rstd of one group of S values.
double Rstd(const double* xs, int64_t S, double eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < S; ++i) sum += xs[i] * xs[i];
  return 1.0 / std::sqrt(sum / static_cast<double>(S) + eps);
}

// y = xhat * w + b over one row of E features in groups of S.
void NormalizeRow(const double* xs, int64_t E, int64_t S, double eps, const double* w,
                  const double* b, double* y) {
  for (int64_t g0 = 0; g0 < E; g0 += S) {
    const double rstd = Rstd(xs + g0, S, eps);
    for (int64_t e = g0; e < g0 + S; ++e) y[e] = xs[e] * rstd * w[e] + (b ? b[e] : 0.0);
  }
}

// The backward of NormalizeRow: dxs from dy; adds this row's terms to dw and db.
void NormalizeRowBackward(const double* xs, int64_t E, int64_t S, double eps, const double* w,
                          const double* dy, double* dxs, double* dw, double* db) {
  for (int64_t g0 = 0; g0 < E; g0 += S) {
    const double rstd = Rstd(xs + g0, S, eps);
    double dot = 0.0;  // sum_j g_j xhat_j
    for (int64_t e = g0; e < g0 + S; ++e) {
      const double xhat = xs[e] * rstd;
      dot += dy[e] * w[e] * xhat;
      if (dw) dw[e] += dy[e] * xhat;
      if (db) db[e] += dy[e];
    }
    const double mean_dot = dot / static_cast<double>(S);
    for (int64_t e = g0; e < g0 + S; ++e) {
      dxs[e] = rstd * (dy[e] * w[e] - xs[e] * rstd * mean_dot);
    }
  }
}

void ZeroIfWanted(double* v, int64_t n) {
  if (v) std::fill(v, v + n, 0.0);
}

}  // namespace

void RmsNormForward(const NormShape& s, const RmsNormInputs& in, double* out) {
  const int64_t E = s.features, S = GroupSize(s);
  const bool gate_before = in.z && !s.norm_before_gate;
  const bool gate_after = in.z && s.norm_before_gate;
  std::vector<double> xs(E);
  for (int64_t m = 0; m < s.rows; ++m) {
    const double* x = in.x + m * E;
    const double* z = in.z ? in.z + m * E : nullptr;
    for (int64_t e = 0; e < E; ++e) xs[e] = gate_before ? x[e] * Silu(z[e]) : x[e];
    double* y = out + m * E;
    NormalizeRow(xs.data(), E, S, s.eps, in.weight, in.bias, y);
    if (gate_after) {
      for (int64_t e = 0; e < E; ++e) y[e] *= Silu(z[e]);
    }
  }
}

void RmsNormBackward(const NormShape& s, const RmsNormInputs& in, const double* dout,
                     const RmsNormGrads& grads) {
  const int64_t E = s.features, S = GroupSize(s);
  const bool gate_before = in.z && !s.norm_before_gate;
  const bool gate_after = in.z && s.norm_before_gate;
  ZeroIfWanted(grads.dweight, E);
  ZeroIfWanted(grads.dbias, E);
  std::vector<double> xs(E), y(E), dy(E), dxs(E);
  for (int64_t m = 0; m < s.rows; ++m) {
    const double* x = in.x + m * E;
    const double* z = in.z ? in.z + m * E : nullptr;
    const double* dout_row = dout + m * E;
    for (int64_t e = 0; e < E; ++e) xs[e] = gate_before ? x[e] * Silu(z[e]) : x[e];
    // out = y * silu(z): dy = dout * silu(z), dz = dout * y * silu'(z).
    if (gate_after) NormalizeRow(xs.data(), E, S, s.eps, in.weight, in.bias, y.data());
    for (int64_t e = 0; e < E; ++e) {
      dy[e] = gate_after ? dout_row[e] * Silu(z[e]) : dout_row[e];
      if (gate_after && grads.dz) grads.dz[m * E + e] = dout_row[e] * y[e] * SiluGrad(z[e]);
    }
    NormalizeRowBackward(xs.data(), E, S, s.eps, in.weight, dy.data(), dxs.data(), grads.dweight,
                         grads.dbias);
    // x' = x * silu(z): dx = dx' * silu(z), dz = dx' * x * silu'(z).
    for (int64_t e = 0; e < E; ++e) {
      if (grads.dx) grads.dx[m * E + e] = gate_before ? dxs[e] * Silu(z[e]) : dxs[e];
      if (gate_before && grads.dz) grads.dz[m * E + e] = dxs[e] * x[e] * SiluGrad(z[e]);
    }
  }
}

void AddRmsNormForward(const NormShape& s, const AddRmsNormInputs& in, double* out,
                       double* residual_out) {
  const int64_t E = s.features;
  for (int64_t i = 0; i < s.rows * E; ++i) {
    residual_out[i] = in.x[i] + (in.residual ? in.residual[i] : 0.0);
  }
  for (int64_t m = 0; m < s.rows; ++m) {
    NormalizeRow(residual_out + m * E, E, E, s.eps, in.weight, in.bias, out + m * E);
  }
}

void AddRmsNormBackward(const NormShape& s, const AddRmsNormInputs& in, const double* dout,
                        const double* dresidual_out, const AddRmsNormGrads& grads) {
  const int64_t E = s.features;
  ZeroIfWanted(grads.dweight, E);
  ZeroIfWanted(grads.dbias, E);
  std::vector<double> r(E), dr(E);
  for (int64_t m = 0; m < s.rows; ++m) {
    for (int64_t e = 0; e < E; ++e)
      r[e] = in.x[m * E + e] + (in.residual ? in.residual[m * E + e] : 0.0);
    NormalizeRowBackward(r.data(), E, E, s.eps, in.weight, dout + m * E, dr.data(), grads.dweight,
                         grads.dbias);
    // residual_out = x + residual feeds both the norm and the residual stream.
    for (int64_t e = 0; e < E; ++e) {
      const double total = dr[e] + (dresidual_out ? dresidual_out[m * E + e] : 0.0);
      if (grads.dx) grads.dx[m * E + e] = total;
      if (grads.dresidual) grads.dresidual[m * E + e] = total;
    }
  }
}

}  // namespace ssmkit::ref

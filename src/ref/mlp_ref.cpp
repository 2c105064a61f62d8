// fp64 oracle of the MLP and MoE ops. Per token t, with proj(x) = W x + b:
//   gated:   a = (gate(x) + gate_add) gm,  u = up(x) + up_add,  h = act(a) u
//   ungated: u = up(x) + up_add,  h = act(u)
//   y = down(h) dm
// Backward, dy' = dy dm: ddown += dy' h^T, dh = down^T dy';
//   gated: du = dh act(a), dg = dh u act'(a) gm;  ungated: du = dh act'(u)
//   dgate += dg x^T, dup += du x^T, dx = gate^T dg + up^T du.
// MoE: out = sum_j w_j y_{e_j} + shared(x); dw_j = <dout, y_{e_j}>; each expert backward with
// dy = w_j dout; the routing weights' backward gives dlogits, then dW_r += dlogits x^T,
// dx += W_r^T dlogits.
#include "ref/mlp_ref.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

namespace ssmkit::ref {
namespace {

constexpr double kGeluTanhC = 0.044715;

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

void ZeroIfWanted(double* v, int64_t n) {
  if (v != nullptr) std::fill(v, v + n, 0.0);
}

// One projection row: b[f] + sum_i W[f, i] x[i], W (rows, n).
double Dot(const double* w_row, const double* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += w_row[i] * x[i];
  return sum;
}

// The pre-activations of one token: a (gated only) and u, each (F).
void PreActivations(const MlpShape& s, const double* x, const MlpWeights& w, const double* gate_add,
                    const double* up_add, double* a, double* u) {
  for (int64_t f = 0; f < s.F; ++f) {
    u[f] =
        Dot(w.up + f * s.d, x, s.d) + (w.up_bias ? w.up_bias[f] : 0.0) + (up_add ? up_add[f] : 0.0);
    if (s.gated) {
      a[f] = (Dot(w.gate + f * s.d, x, s.d) + (w.gate_bias ? w.gate_bias[f] : 0.0) +
              (gate_add ? gate_add[f] : 0.0)) *
             s.gate_multiplier;
    }
  }
}

double Hidden(const MlpShape& s, double a, double u) {
  return s.gated ? Activation(s.activation, a) * u : Activation(s.activation, u);
}

void ForwardRow(const MlpShape& s, const double* x, const MlpWeights& w, const double* gate_add,
                const double* up_add, double* y) {
  std::vector<double> a(s.F), u(s.F), h(s.F);
  PreActivations(s, x, w, gate_add, up_add, a.data(), u.data());
  for (int64_t f = 0; f < s.F; ++f) h[f] = Hidden(s, a[f], u[f]);
  for (int64_t i = 0; i < s.d; ++i) {
    y[i] = (Dot(w.down + i * s.F, h.data(), s.F) + (w.down_bias ? w.down_bias[i] : 0.0)) *
           s.down_multiplier;
  }
}

// One token's backward: overwrites dx (d) and dgate_add / dup_add (F); adds to the weights'
// gradients.
void BackwardRow(const MlpShape& s, const double* x, const MlpWeights& w, const double* gate_add,
                 const double* up_add, const double* dy, double* dx, double* dgate_add,
                 double* dup_add, const MlpWeightGrads& g) {
  const int64_t d = s.d, F = s.F;
  std::vector<double> a(F), u(F), h(F), dyp(d), dh(F, 0.0), dg(F, 0.0), du(F);
  PreActivations(s, x, w, gate_add, up_add, a.data(), u.data());
  for (int64_t f = 0; f < F; ++f) h[f] = Hidden(s, a[f], u[f]);
  for (int64_t i = 0; i < d; ++i) dyp[i] = dy[i] * s.down_multiplier;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t f = 0; f < F; ++f) {
      dh[f] += dyp[i] * w.down[i * F + f];
      if (g.ddown) g.ddown[i * F + f] += dyp[i] * h[f];
    }
    if (g.ddown_bias) g.ddown_bias[i] += dyp[i];
  }
  for (int64_t f = 0; f < F; ++f) {
    if (s.gated) {
      du[f] = dh[f] * Activation(s.activation, a[f]);
      dg[f] = dh[f] * u[f] * ActivationGrad(s.activation, a[f]) * s.gate_multiplier;
    } else {
      du[f] = dh[f] * ActivationGrad(s.activation, u[f]);
    }
    if (dgate_add) dgate_add[f] = dg[f];
    if (dup_add) dup_add[f] = du[f];
    if (g.dgate_bias) g.dgate_bias[f] += dg[f];
    if (g.dup_bias) g.dup_bias[f] += du[f];
    for (int64_t i = 0; i < d; ++i) {
      if (g.dgate) g.dgate[f * d + i] += dg[f] * x[i];
      if (g.dup) g.dup[f * d + i] += du[f] * x[i];
    }
  }
  if (dx == nullptr) return;
  for (int64_t i = 0; i < d; ++i) {
    double sum = 0.0;
    for (int64_t f = 0; f < F; ++f) {
      sum += du[f] * w.up[f * d + i];
      if (s.gated) sum += dg[f] * w.gate[f * d + i];
    }
    dx[i] = sum;
  }
}

void ZeroWeightGrads(const MlpShape& s, const MlpWeightGrads& g) {
  ZeroIfWanted(g.dgate, s.F * s.d);
  ZeroIfWanted(g.dup, s.F * s.d);
  ZeroIfWanted(g.ddown, s.d * s.F);
  ZeroIfWanted(g.dgate_bias, s.F);
  ZeroIfWanted(g.dup_bias, s.F);
  ZeroIfWanted(g.ddown_bias, s.d);
}

// a ranks above b: NaN above every number, then the larger value, then the lower index.
bool RanksAbove(double a, int64_t ia, double b, int64_t ib) {
  if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
  if (a != b && !std::isnan(a)) return a > b;
  return ia < ib;
}

// The k best of v (n), best first.
void TopK(const double* v, int64_t n, int64_t k, int64_t* index) {
  std::vector<bool> taken(n, false);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      if (!taken[e] && (best < 0 || RanksAbove(v[e], e, v[best], best))) best = e;
    }
    taken[best] = true;
    index[j] = best;
  }
}

std::vector<double> Softmax(const double* v, int64_t n) {
  const double mx = *std::max_element(v, v + n);
  std::vector<double> p(n);
  double sum = 0.0;
  for (int64_t e = 0; e < n; ++e) sum += p[e] = std::exp(v[e] - mx);
  for (double& pe : p) pe /= sum;
  return p;
}

void RouterLogits(const MoeShape& s, const MoeInputs& in, const double* x, double* logits) {
  for (int64_t e = 0; e < s.E; ++e) {
    logits[e] = Dot(in.router_weight + e * s.d, x, s.d) + (in.router_bias ? in.router_bias[e] : 0);
  }
}

// With q = softmax over n entries and a gradient dq that is nonzero only at the m entries
// idx[0..m) (idx null: the first m), entry i's
//   dq_i sum_{e != idx_i} q_e - sum_{j != i} q_{idx_j} dq_j  =  dq_i - sum_j q_{idx_j} dq_j;
// times q_{idx_i} it is the gradient of that entry's logit. 1 - q is summed from the other
// entries rather than taken as 1 minus a rounded q: a q near 1 (one dominant expert) keeps
// its digits, and so does its logit's small gradient.
double SoftmaxInner(const double* q, int64_t n, const int64_t* idx, const double* dq, int64_t m,
                    int64_t i) {
  const int64_t self = idx ? idx[i] : i;
  double rest = 0.0, others = 0.0;
  for (int64_t e = 0; e < n; ++e) rest += e == self ? 0.0 : q[e];
  for (int64_t j = 0; j < m; ++j) others += j == i ? 0.0 : q[idx ? idx[j] : j] * dq[j];
  return dq[i] * rest - others;
}

// kSigmoidGroupTopK, written as transformers' NemotronHTopkRouter reads: group scores from
// the two best corrected scores of each group, the best groups kept, the rest masked to -inf,
// top-k of what is left; the weights are the uncorrected sigmoids.
void RouteSigmoidGroups(const MoeShape& s, const double* logits, const double* score_bias,
                        int64_t* index, double* weight) {
  const int64_t per_group = s.E / s.groups;
  std::vector<double> sig(s.E), choice(s.E), group_score(s.groups);
  for (int64_t e = 0; e < s.E; ++e) {
    sig[e] = Sigmoid(logits[e]);
    choice[e] = sig[e] + score_bias[e];
  }
  for (int64_t g = 0; g < s.groups; ++g) {
    int64_t best[2];
    TopK(choice.data() + g * per_group, per_group, 2, best);
    group_score[g] = choice[g * per_group + best[0]] + choice[g * per_group + best[1]];
  }
  std::vector<int64_t> kept(s.top_k_groups);
  TopK(group_score.data(), s.groups, s.top_k_groups, kept.data());
  std::vector<double> masked(s.E, -INFINITY);
  for (int64_t g : kept) {
    std::copy_n(choice.begin() + g * per_group, per_group, masked.begin() + g * per_group);
  }
  TopK(masked.data(), s.E, s.k, index);
  double sum = 0.0;
  for (int64_t j = 0; j < s.k; ++j) sum += weight[j] = sig[index[j]];
  for (int64_t j = 0; j < s.k; ++j) {
    if (s.normalize_top_k) weight[j] /= sum + 1e-20;
    weight[j] *= s.routed_scaling;
  }
}

// w_j = a sig_j / (S + 1e-20) (normalised) or a sig_j: d sig_j, then times sig (1 - sig).
void RouteSigmoidGroupsBackward(const MoeShape& s, const double* logits, const int64_t* index,
                                const double* dw, double* dlogits) {
  double sum = 0.0, qdw = 0.0;
  for (int64_t j = 0; j < s.k; ++j) sum += Sigmoid(logits[index[j]]);
  for (int64_t j = 0; j < s.k; ++j) qdw += Sigmoid(logits[index[j]]) / (sum + 1e-20) * dw[j];
  for (int64_t j = 0; j < s.k; ++j) {
    const double x = logits[index[j]];
    const double ds =
        s.routed_scaling * (s.normalize_top_k ? (dw[j] - qdw) / (sum + 1e-20) : dw[j]);
    dlogits[index[j]] = ds * Sigmoid(x) * Sigmoid(-x);
  }
}

// dlogits (E) from the gradient dw (k) of one token's routing weights.
void RouteBackward(const MoeShape& s, const double* logits, const int64_t* index,
                   const double* weight, const double* dw, double* dlogits) {
  std::fill(dlogits, dlogits + s.E, 0.0);
  if (s.routing == MoeRouting::kSigmoidGroupTopK) {
    RouteSigmoidGroupsBackward(s, logits, index, dw, dlogits);
    return;
  }
  if (s.routing == MoeRouting::kTopKSoftmax) {
    for (int64_t j = 0; j < s.k; ++j) {
      dlogits[index[j]] = weight[j] * SoftmaxInner(weight, s.k, nullptr, dw, s.k, j);
    }
    return;
  }
  const std::vector<double> p = Softmax(logits, s.E);
  std::vector<double> dp(s.k);
  double selected = 0.0;
  for (int64_t j = 0; j < s.k; ++j) selected += p[index[j]];
  for (int64_t j = 0; j < s.k; ++j) {
    // w_j = p_j / S when normalised: dp_j = (dw_j - sum_i w_i dw_i) / S
    dp[j] = s.normalize_top_k ? SoftmaxInner(weight, s.k, nullptr, dw, s.k, j) / selected : dw[j];
  }
  double pdp = 0.0;
  for (int64_t j = 0; j < s.k; ++j) pdp += p[index[j]] * dp[j];
  for (int64_t e = 0; e < s.E; ++e) dlogits[e] = -p[e] * pdp;
  for (int64_t j = 0; j < s.k; ++j) {
    dlogits[index[j]] = p[index[j]] * SoftmaxInner(p.data(), s.E, index, dp.data(), s.k, j);
  }
}

MlpShape SharedShape(const MoeShape& s) {
  MlpShape shared = s.expert;
  shared.F = s.shared_F;
  return shared;
}

}  // namespace

double Activation(MlpActivation act, double v) {
  switch (act) {
    case MlpActivation::kSilu:
      return v * Sigmoid(v);
    case MlpActivation::kGeluErf:
      return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2));
    case MlpActivation::kGeluTanh: {
      const double c = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * v * (1.0 + std::tanh(c * (v + kGeluTanhC * v * v * v)));
    }
    case MlpActivation::kRelu:
      return std::max(v, 0.0);
    case MlpActivation::kRelu2:
      return std::max(v, 0.0) * std::max(v, 0.0);
  }
  return std::nan("");
}

double ActivationGrad(MlpActivation act, double v) {
  switch (act) {
    case MlpActivation::kSilu: {
      const double sg = Sigmoid(v);
      return sg * (1.0 + v * (1.0 - sg));
    }
    case MlpActivation::kGeluErf: {
      const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi);
      return 0.5 * (1.0 + std::erf(v / std::numbers::sqrt2)) + v * pdf;
    }
    case MlpActivation::kGeluTanh: {
      const double c = std::sqrt(2.0 / std::numbers::pi);
      const double th = std::tanh(c * (v + kGeluTanhC * v * v * v));
      return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * c * (1.0 + 3.0 * kGeluTanhC * v * v);
    }
    case MlpActivation::kRelu:
      return v > 0.0 ? 1.0 : 0.0;
    case MlpActivation::kRelu2:
      return 2.0 * std::max(v, 0.0);
  }
  return std::nan("");
}

void MlpForward(const MlpShape& s, int64_t T, const double* x, const MlpWeights& w,
                const double* gate_add, const double* up_add, double* out) {
  for (int64_t t = 0; t < T; ++t) {
    ForwardRow(s, x + t * s.d, w, gate_add ? gate_add + t * s.F : nullptr,
               up_add ? up_add + t * s.F : nullptr, out + t * s.d);
  }
}

void MlpBackward(const MlpShape& s, int64_t T, const double* x, const MlpWeights& w,
                 const double* gate_add, const double* up_add, const double* dout, double* dx,
                 double* dgate_add, double* dup_add, const MlpWeightGrads& g) {
  ZeroWeightGrads(s, g);
  for (int64_t t = 0; t < T; ++t) {
    BackwardRow(s, x + t * s.d, w, gate_add ? gate_add + t * s.F : nullptr,
                up_add ? up_add + t * s.F : nullptr, dout + t * s.d, dx ? dx + t * s.d : nullptr,
                dgate_add ? dgate_add + t * s.F : nullptr, dup_add ? dup_add + t * s.F : nullptr,
                g);
  }
}

void MoeRoute(const MoeShape& s, const double* logits, int64_t* index, double* weight,
              const double* score_bias) {
  if (s.routing == MoeRouting::kSigmoidGroupTopK) {
    RouteSigmoidGroups(s, logits, score_bias, index, weight);
    return;
  }
  if (s.routing == MoeRouting::kTopKSoftmax) {
    TopK(logits, s.E, s.k, index);
    std::vector<double> chosen(s.k);
    for (int64_t j = 0; j < s.k; ++j) chosen[j] = logits[index[j]];
    const std::vector<double> p = Softmax(chosen.data(), s.k);
    std::copy(p.begin(), p.end(), weight);
    return;
  }
  const std::vector<double> p = Softmax(logits, s.E);
  TopK(p.data(), s.E, s.k, index);
  double sum = 0.0;
  for (int64_t j = 0; j < s.k; ++j) sum += weight[j] = p[index[j]];
  if (s.normalize_top_k) {
    for (int64_t j = 0; j < s.k; ++j) weight[j] /= sum;
  }
}

void MoeForward(const MoeShape& s, int64_t T, const MoeInputs& in, double* out,
                double* router_logits, int64_t* counts, int64_t* top_index, double* top_weight) {
  const int64_t d = s.d, E = s.E, k = s.k;
  const int64_t dx = in.expert_x ? s.expert.d : d;  // the experts' width, and out's
  if (counts != nullptr) std::fill(counts, counts + E, int64_t{0});
  std::vector<double> logits(E), weight(k), y(std::max(d, dx));
  std::vector<int64_t> index(k);
  for (int64_t t = 0; t < T; ++t) {
    const double* x = in.x + t * d;
    const double* xe = in.expert_x ? in.expert_x + t * dx : x;
    RouterLogits(s, in, x, logits.data());
    MoeRoute(s, logits.data(), index.data(), weight.data(), in.score_bias);
    double* o = out + t * dx;
    std::fill(o, o + dx, 0.0);
    for (int64_t e = 0; e < E; ++e) {  // ascending expert order, as the op sums
      for (int64_t j = 0; j < k; ++j) {
        if (index[j] != e) continue;
        ForwardRow(s.expert, xe, in.experts[e], nullptr, nullptr, y.data());
        for (int64_t i = 0; i < dx; ++i) o[i] += weight[j] * y[i];
        if (counts != nullptr) ++counts[e];
      }
    }
    if (s.shared_F > 0) {
      ForwardRow(SharedShape(s), x, in.shared, nullptr, nullptr, y.data());
      for (int64_t i = 0; i < d; ++i) o[i] += y[i];
    }
    if (router_logits != nullptr) std::copy(logits.begin(), logits.end(), router_logits + t * E);
    if (top_index != nullptr) std::copy(index.begin(), index.end(), top_index + t * k);
    if (top_weight != nullptr) std::copy(weight.begin(), weight.end(), top_weight + t * k);
  }
}

void MoeBackward(const MoeShape& s, int64_t T, const MoeInputs& in, const double* dout,
                 const double* drouter_logits, const MoeGrads& g) {
  const int64_t d = s.d, E = s.E, k = s.k;
  for (int64_t e = 0; e < static_cast<int64_t>(g.experts.size()); ++e) {
    ZeroWeightGrads(s.expert, g.experts[e]);
  }
  if (s.shared_F > 0) ZeroWeightGrads(SharedShape(s), g.shared);
  ZeroIfWanted(g.drouter_weight, E * d);
  ZeroIfWanted(g.drouter_bias, E);
  const MlpWeightGrads none;
  std::vector<double> logits(E), weight(k), dw(k), dlogits(E), y(d), dy(d), dxe(d), dx(d);
  std::vector<int64_t> index(k);
  for (int64_t t = 0; t < T; ++t) {
    const double* x = in.x + t * d;
    const double* dot = dout + t * d;
    RouterLogits(s, in, x, logits.data());
    MoeRoute(s, logits.data(), index.data(), weight.data(), in.score_bias);
    std::fill(dx.begin(), dx.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = index[j];
      ForwardRow(s.expert, x, in.experts[e], nullptr, nullptr, y.data());
      dw[j] = 0.0;
      for (int64_t i = 0; i < d; ++i) {
        dw[j] += dot[i] * y[i];
        dy[i] = weight[j] * dot[i];
      }
      BackwardRow(s.expert, x, in.experts[e], nullptr, nullptr, dy.data(), dxe.data(), nullptr,
                  nullptr, g.experts.empty() ? none : g.experts[e]);
      for (int64_t i = 0; i < d; ++i) dx[i] += dxe[i];
    }
    if (s.shared_F > 0) {
      BackwardRow(SharedShape(s), x, in.shared, nullptr, nullptr, dot, dxe.data(), nullptr, nullptr,
                  g.shared);
      for (int64_t i = 0; i < d; ++i) dx[i] += dxe[i];
    }
    RouteBackward(s, logits.data(), index.data(), weight.data(), dw.data(), dlogits.data());
    if (drouter_logits != nullptr) {
      for (int64_t e = 0; e < E; ++e) dlogits[e] += drouter_logits[t * E + e];
    }
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < d; ++i) {
        dx[i] += dlogits[e] * in.router_weight[e * d + i];
        if (g.drouter_weight) g.drouter_weight[e * d + i] += dlogits[e] * x[i];
      }
      if (g.drouter_bias) g.drouter_bias[e] += dlogits[e];
    }
    if (g.dx != nullptr) std::copy(dx.begin(), dx.end(), g.dx + t * d);
  }
}

}  // namespace ssmkit::ref

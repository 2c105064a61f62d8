// MoE routing of one token (include/ssmkit/mlp.hpp), scalar f32: E is tens of experts and the
// cost is nothing next to the experts' products. Softmax as torch computes it,
// exp(v - max) / sum. Dimension legend: E experts, k selected.
//
// Backward, with w the k weights and dw their gradient:
//   kTopKSoftmax: w = softmax(logits[S]):  dlogits[S_j] = w_j (dw_j - sum_i w_i dw_i)
//   kSoftmaxTopK: w_j = p[S_j] (/ sum_i p[S_i] when normalised), p = softmax(logits):
//     dp[S_j] = dw_j, or (dw_j - sum_i w_i dw_i) / sum_i p[S_i] when normalised; 0 elsewhere
//     dlogits[e] = p[e] (dp[e] - sum_j p[S_j] dp[S_j])
//   kSigmoidGroupTopK: w_j = a s[S_j] (/ (sum_i s[S_i] + 1e-20) when normalised), s = sigmoid:
//     ds[S_j] = a dw_j, or a (dw_j - sum_i q_i dw_i) / (sum_i s[S_i] + 1e-20) with
//     q_i = s[S_i] / (sum + 1e-20) when normalised; dlogits[S_j] = ds[S_j] s (1 - s), 0 elsewhere,
//     1 - s taken as sigmoid(-logit) so that a saturated s keeps its small gradient
// Each (dq_j - sum_i q_i dq_i) of a softmax is evaluated as dq_j sum_{e != j} q_e - sum_{i != j}
// q_i dq_i (SoftmaxInner), so that a weight near 1 (one dominant expert) does not lose its logit's
// small gradient to 1 minus a rounded 1.
#include "cpu/moe_routing.hpp"

#include <algorithm>
#include <cmath>

namespace ssmkit::cpu {
namespace {

// a (expert ia) ranks above b (expert ib): NaN above every number, then the larger value,
// then the lower index.
bool RanksAbove(float a, int32_t ia, float b, int32_t ib) {
  if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
  if (a != b && !std::isnan(a)) return a > b;
  return ia < ib;
}

// The k best of v (E), best first, by insertion into a sorted list of k.
void TopK(const float* v, int64_t E, int64_t k, int32_t* index) {
  int64_t n = 0;
  for (int32_t e = 0; e < static_cast<int32_t>(E); ++e) {
    if (n == k && !RanksAbove(v[e], e, v[index[k - 1]], index[k - 1])) continue;
    int64_t j = n < k ? n++ : k - 1;
    for (; j > 0 && RanksAbove(v[e], e, v[index[j - 1]], index[j - 1]); --j)
      index[j] = index[j - 1];
    index[j] = e;
  }
}

// p = softmax(v) over n values.
void Softmax(const float* v, int64_t n, float* p) {
  float mx = v[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, v[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += p[i] = std::exp(v[i] - mx);
  for (int64_t i = 0; i < n; ++i) p[i] /= sum;
}

// For q = softmax over n entries and dq nonzero only at idx[0..m) (idx null: the first m):
// dq_i sum_{e != idx_i} q_e - sum_{j != i} q_{idx_j} dq_j, which equals dq_i - sum_j q dq.
float SoftmaxInner(const float* q, int64_t n, const int32_t* idx, const float* dq, int64_t m,
                   int64_t i) {
  const int64_t self = idx ? idx[i] : i;
  float rest = 0.0f, others = 0.0f;
  for (int64_t e = 0; e < n; ++e) rest += e == self ? 0.0f : q[e];
  for (int64_t j = 0; j < m; ++j) others += j == i ? 0.0f : q[idx ? idx[j] : j] * dq[j];
  return dq[i] * rest - others;
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// The sum of the two largest of v (n >= 2), ranked as TopK ranks.
float TopTwoSum(const float* v, int64_t n) {
  int32_t best[2];
  TopK(v, n, 2, best);
  return v[best[0]] + v[best[1]];
}

// kSigmoidGroupTopK (include/ssmkit/mlp.hpp). scratch: 2E + groups floats.
void RouteSigmoidGroups(const MoeOptions& options, int64_t E, const float* logits,
                        const float* score_bias, int32_t* index, float* weight, float* scratch) {
  const int64_t k = options.top_k, G = options.groups, per_group = E / G;
  float* s = scratch;               // (E) sigmoid scores
  float* choice = scratch + E;      // (E) s + bias, -inf outside the kept groups
  float* group_score = choice + E;  // (G)
  for (int64_t e = 0; e < E; ++e) {
    s[e] = Sigmoid(logits[e]);
    choice[e] = s[e] + score_bias[e];
  }
  for (int64_t g = 0; g < G; ++g) group_score[g] = TopTwoSum(choice + g * per_group, per_group);
  // Group g is kept when fewer than top_k_groups groups rank above it (TopK's order).
  for (int64_t g = 0; g < G; ++g) {
    int64_t above = 0;
    for (int64_t h = 0; h < G; ++h) {
      above += h != g && RanksAbove(group_score[h], static_cast<int32_t>(h), group_score[g],
                                    static_cast<int32_t>(g));
    }
    if (above < options.top_k_groups) continue;
    std::fill(choice + g * per_group, choice + (g + 1) * per_group, -INFINITY);
  }
  TopK(choice, E, k, index);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += weight[j] = s[index[j]];
  const float denominator = sum + 1e-20f;
  for (int64_t j = 0; j < k; ++j) {
    if (options.normalize_top_k) weight[j] /= denominator;
    weight[j] *= options.routed_scaling;
  }
}

void RouteSigmoidGroupsBackward(const MoeOptions& options, int64_t E, const float* logits,
                                const int32_t* index, const float* dweight, float* dlogits) {
  const int64_t k = options.top_k;
  const float a = options.routed_scaling;
  float sum = 0.0f, qdw = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += Sigmoid(logits[index[j]]);
  const float denominator = sum + 1e-20f;
  for (int64_t j = 0; j < k; ++j) qdw += Sigmoid(logits[index[j]]) / denominator * dweight[j];
  for (int64_t e = 0; e < E; ++e) dlogits[e] = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const float x = logits[index[j]];
    const float ds =
        options.normalize_top_k ? a * (dweight[j] - qdw) / denominator : a * dweight[j];
    dlogits[index[j]] = ds * Sigmoid(x) * Sigmoid(-x);
  }
}

}  // namespace

int64_t RouteScratchFloats(int64_t E, int64_t k) { return 3 * E + k; }

void RouteToken(const MoeOptions& options, int64_t E, const float* logits, const float* score_bias,
                int32_t* index, float* weight, float* scratch) {
  const int64_t k = options.top_k;
  if (options.routing == MoeRouting::kSigmoidGroupTopK) {
    RouteSigmoidGroups(options, E, logits, score_bias, index, weight, scratch);
    return;
  }
  if (options.routing == MoeRouting::kTopKSoftmax) {
    TopK(logits, E, k, index);
    for (int64_t j = 0; j < k; ++j) scratch[j] = logits[index[j]];
    Softmax(scratch, k, weight);
    return;
  }
  Softmax(logits, E, scratch);
  TopK(scratch, E, k, index);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += weight[j] = scratch[index[j]];
  if (options.normalize_top_k) {
    for (int64_t j = 0; j < k; ++j) weight[j] /= sum;
  }
}

void RouteTokenBackward(const MoeOptions& options, int64_t E, const float* logits,
                        const int32_t* index, const float* weight, const float* dweight,
                        float* dlogits, float* scratch) {
  const int64_t k = options.top_k;
  if (options.routing == MoeRouting::kSigmoidGroupTopK) {
    RouteSigmoidGroupsBackward(options, E, logits, index, dweight, dlogits);
    return;
  }
  for (int64_t e = 0; e < E; ++e) dlogits[e] = 0.0f;
  if (options.routing == MoeRouting::kTopKSoftmax) {
    for (int64_t j = 0; j < k; ++j) {
      dlogits[index[j]] = weight[j] * SoftmaxInner(weight, k, nullptr, dweight, k, j);
    }
    return;
  }
  const float* p = scratch;  // (E), then dp (k) after it
  float* dp = scratch + E;
  Softmax(logits, E, scratch);
  float selected = 0.0f;
  for (int64_t j = 0; j < k; ++j) selected += p[index[j]];
  float pdp = 0.0f;  // sum_j p[S_j] dp[S_j]
  for (int64_t j = 0; j < k; ++j) {
    dp[j] = options.normalize_top_k ? SoftmaxInner(weight, k, nullptr, dweight, k, j) / selected
                                    : dweight[j];
    pdp += p[index[j]] * dp[j];
  }
  for (int64_t e = 0; e < E; ++e) dlogits[e] = -p[e] * pdp;
  for (int64_t j = 0; j < k; ++j) {
    dlogits[index[j]] = p[index[j]] * SoftmaxInner(p, E, index, dp, k, j);
  }
}

}  // namespace ssmkit::cpu

#include "ssmkit/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <string>

namespace ssmkit {

Status Sampler::Create(const SamplerOptions& options, int64_t vocab_size, Sampler* sampler) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature)) {
    return Status::InvalidArgument("sampler: temperature: expected a finite value >= 0, given " +
                                   std::to_string(options.temperature));
  }
  if (options.top_k < 0) {
    return Status::InvalidArgument("sampler: top_k: expected >= 0, given " +
                                   std::to_string(options.top_k));
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return Status::InvalidArgument("sampler: top_p: expected a value in (0, 1], given " +
                                   std::to_string(options.top_p));
  }
  if (vocab_size < 1) {
    return Status::InvalidArgument("sampler: vocab_size: expected >= 1, given " +
                                   std::to_string(vocab_size));
  }
  try {
    sampler->options_ = options;
    sampler->rng_.seed(options.seed);
    sampler->order_.assign(static_cast<size_t>(vocab_size), 0);
    sampler->probs_.assign(static_cast<size_t>(vocab_size), 0.0);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("sampler: out of memory");
  }
  return Status::Ok();
}

// The first index of the largest logit that is a number (0 when none is). Two passes: the
// largest number, as kLanes independent running maxima (branch-free max instructions; NaN
// compares false and drops out), then the first index holding it. A batch-8 decode step of
// m1-130m (8 x 50,280 logits) spent ~2% of its time in a one-pass loop with a compare and a
// branch per logit, one chain of dependent steps.
int32_t Sampler::Greedy(std::span<const float> logits) const {
  constexpr size_t kLanes = 16;
  const size_t n = logits.size();
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -INFINITY);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const float v = logits[i + j];
      lane_max[j] = v > lane_max[j] ? v : lane_max[j];
    }
  }
  float best = -INFINITY;
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (float m : lane_max) best = m > best ? m : best;
  // No logit equals best when none is a number (best stays -inf, NaN equals nothing).
  for (size_t k = 0; k < n; ++k) {
    if (logits[k] == best) return static_cast<int32_t>(k);
  }
  return 0;
}

void Sampler::SortLargest(std::span<const float> logits, int64_t m, int64_t within) {
  // Larger logit first; the smaller id first on ties, so the order is fully determined.
  const auto before = [&logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::nth_element(order_.begin(), order_.begin() + (m - 1), order_.begin() + within, before);
  std::sort(order_.begin(), order_.begin() + m, before);
}

int32_t Sampler::Sample(std::span<const float> logits) {
  const SamplerOptions& o = options_;
  const int64_t n =
      std::min<int64_t>(static_cast<int64_t>(logits.size()), static_cast<int64_t>(order_.size()));
  if (o.temperature == 0.0f || o.top_k == 1 || n <= 1) return Greedy(logits.first(n));
  // The candidates: every id with a number for a logit.
  order_.resize(static_cast<size_t>(n));  // within capacity: no allocation
  int64_t count = 0;
  float max_logit = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) continue;
    order_[count++] = static_cast<int32_t>(i);
    max_logit = std::max(max_logit, logits[i]);
  }
  order_.resize(static_cast<size_t>(count));
  if (count == 0) return 0;
  if (max_logit == -INFINITY) return order_[0];
  const int64_t k = o.top_k > 0 ? std::min<int64_t>(o.top_k, count) : count;
  if (k < count) SortLargest(logits, k, count);  // order_[0, k): the k largest
  const double inv_t = 1.0 / o.temperature;
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i)
    total += std::exp((static_cast<double>(logits[order_[i]]) - max_logit) * inv_t);
  int64_t kept = k;
  if (o.top_p < 1.0f) {
    // The nucleus lies within the m most likely tokens once their mass reaches top_p: sort a
    // growing prefix rather than the whole vocabulary.
    const double target = static_cast<double>(o.top_p) * total;
    for (int64_t m = std::min<int64_t>(k, 64);; m = std::min<int64_t>(k, m * 4)) {
      SortLargest(logits, m, k);
      double mass = 0.0;
      int64_t i = 0;
      for (; i < m; ++i) {
        mass += std::exp((static_cast<double>(logits[order_[i]]) - max_logit) * inv_t);
        if (mass >= target) break;
      }
      if (i < m) {
        kept = i + 1;
        break;
      }
      if (m == k) break;
    }
  }
  double mass = 0.0;
  for (int64_t i = 0; i < kept; ++i) {
    probs_[i] = std::exp((static_cast<double>(logits[order_[i]]) - max_logit) * inv_t);
    mass += probs_[i];
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * mass;
  double cumulative = 0.0;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += probs_[i];
    if (u < cumulative) return order_[i];
  }
  return order_[kept - 1];
}

}  // namespace ssmkit

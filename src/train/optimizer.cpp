#include "train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/parallel.hpp"

namespace ssmkit::train {

AdamW::AdamW(const ParamTable& table, AdamWOptions options)
    : table_(table),
      options_(options),
      m_(static_cast<size_t>(table.total()), 0.0f),
      v_(static_cast<size_t>(table.total()), 0.0f) {}

void AdamW::Step(float lr, std::span<float> params, std::span<const float> grads) {
  ++step_;
  const AdamWOptions& o = options_;
  const double t = static_cast<double>(step_);
  // torch computes the corrections in double and applies them in f32 arithmetic.
  const float step_size =
      static_cast<float>(lr / (1.0 - std::pow(static_cast<double>(o.beta1), t)));
  const float correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), t)));
  for (const ParamInfo& info : table_.params()) {
    const float decay = info.weight_decay ? 1.0f - lr * o.weight_decay : 1.0f;
    float* p = params.data() + info.offset;
    const float* g = grads.data() + info.offset;
    float* m = m_.data() + info.offset;
    float* v = v_.data() + info.offset;
    ParallelFor(info.numel, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        p[i] *= decay;
        m[i] += (g[i] - m[i]) * (1.0f - o.beta1);  // torch's lerp
        v[i] = v[i] * o.beta2 + (1.0f - o.beta2) * g[i] * g[i];
        const float denom = std::sqrt(v[i]) / correction2_sqrt + o.eps;
        p[i] -= step_size * m[i] / denom;
      }
    });
  }
}

double ClipGradNorm(std::span<float> grads, double max_norm) {
  const int64_t n = static_cast<int64_t>(grads.size());
  std::vector<double> partial(static_cast<size_t>(ParallelBlocks(n)), 0.0);
  ParallelFor(n, [&](int64_t begin, int64_t end, int block) {
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += static_cast<double>(grads[i]) * grads[i];
    partial[block] = sum;
  });
  double sum = 0.0;
  for (double p : partial) sum += p;
  const double norm = std::sqrt(sum);
  if (max_norm > 0.0 && norm > max_norm) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    ParallelFor(n, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) grads[i] *= scale;
    });
  }
  return norm;
}

double LearningRate(const Schedule& s, int64_t step) {
  if (step < s.warmup_steps)
    return s.max_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (step >= s.total_steps) return s.min_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, s.total_steps - s.warmup_steps));
  const double progress = static_cast<double>(step - s.warmup_steps) / span;
  return s.min_lr + 0.5 * (s.max_lr - s.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace ssmkit::train

// AdamW with decoupled weight decay (Loshchilov & Hutter), step for step what
// torch.optim.AdamW computes (amsgrad off), global gradient-norm clipping as
// torch.nn.utils.clip_grad_norm_, and the warmup + cosine learning-rate schedule.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/param_table.hpp"

namespace ssmkit::train {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // on the tensors ParamTable marks (matrices), 0 on the rest
};

class AdamW {
 public:
  AdamW(const ParamTable& table, AdamWOptions options);

  // One update with learning rate lr: for each parameter (t = step() after the increment)
  //   p -= lr * wd * p                       (decayed tensors only)
  //   m  = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
  //   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
  void Step(float lr, std::span<float> params, std::span<const float> grads);

  int64_t step() const { return step_; }
  // The state, for checkpoints: exp_avg (m) and exp_avg_sq (v), each ParamTable::total().
  std::vector<float>& exp_avg() { return m_; }
  std::vector<float>& exp_avg_sq() { return v_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  const ParamTable& table_;
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<float> m_, v_;
};

// The L2 norm of all gradients (accumulated in double); when it exceeds max_norm > 0 every
// gradient is scaled by max_norm / (norm + 1e-6), as torch's clip_grad_norm_. Returns the norm
// before clipping.
double ClipGradNorm(std::span<float> grads, double max_norm);

struct Schedule {
  double max_lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;
};

// Learning rate of optimizer step `step` (0-based): linear warmup max_lr * (step + 1) / warmup,
// then a cosine from max_lr down to min_lr at total_steps (min_lr after).
double LearningRate(const Schedule& s, int64_t step);

}  // namespace ssmkit::train

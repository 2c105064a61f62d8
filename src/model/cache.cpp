#include "model/cache.hpp"

#include <algorithm>

#include "model/views.hpp"

namespace ssmkit::model {

void StateCache::Allocate(const ModelConfig& config, int64_t blocks, int64_t max_batch) {
  config_ = config;
  blocks_ = blocks;
  max_batch_ = max_batch;
  conv_floats_ = config.conv_dim() * (config.d_conv - 1);
  ssm_floats_ = config.d_inner * config.d_state;  // D = H * P for Mamba-2
  data_.assign(static_cast<size_t>((conv_floats_ + ssm_floats_) * max_batch * blocks), 0.0f);
}

float* StateCache::conv_data(int64_t i) const {
  return const_cast<float*>(data_.data()) + i * (conv_floats_ + ssm_floats_) * max_batch_;
}

float* StateCache::ssm_data(int64_t i) const { return conv_data(i) + conv_floats_ * max_batch_; }

Tensor StateCache::conv(int64_t i, int64_t first, int64_t count) const {
  const int64_t C = config_.conv_dim(), S = config_.d_conv - 1;
  return View(conv_data(i) + first * conv_floats_, {count, C, S}, {C * S, S, 1});
}

Tensor StateCache::ssm(int64_t i, int64_t first, int64_t count) const {
  const int64_t D = config_.d_inner, N = config_.d_state;
  const float* p = ssm_data(i) + first * ssm_floats_;
  if (config_.arch == ModelArch::kMamba1) return View(p, {count, D, N}, {D * N, N, 1});
  const int64_t H = config_.nheads, P = config_.headdim;
  return View(p, {count, H, P, N}, {D * N, P * N, N, 1});
}

void StateCache::Clear(int64_t slot) {
  for (int64_t i = 0; i < blocks_; ++i) {
    std::fill_n(conv_data(i) + slot * conv_floats_, conv_floats_, 0.0f);
    std::fill_n(ssm_data(i) + slot * ssm_floats_, ssm_floats_, 0.0f);
  }
}

}  // namespace ssmkit::model

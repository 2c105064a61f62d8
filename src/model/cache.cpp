#include "model/cache.hpp"

#include "model/views.hpp"

namespace ssmkit::model {

void StateCache::Allocate(const ModelConfig& config, int64_t max_batch) {
  config_ = config;
  max_batch_ = max_batch;
  conv_floats_ = max_batch * config.conv_dim() * (config.d_conv - 1);
  ssm_floats_ = max_batch * config.d_inner * config.d_state;  // D = H * P for Mamba-2
  data_.assign(static_cast<size_t>((conv_floats_ + ssm_floats_) * config.n_layer), 0.0f);
}

Tensor StateCache::conv(int64_t layer, int64_t batch) const {
  const int64_t C = config_.conv_dim(), S = config_.d_conv - 1;
  const float* p = data_.data() + layer * (conv_floats_ + ssm_floats_);
  return View(p, {batch, C, S}, {C * S, S, 1});
}

Tensor StateCache::ssm(int64_t layer, int64_t batch) const {
  const int64_t D = config_.d_inner, N = config_.d_state;
  const float* p = data_.data() + layer * (conv_floats_ + ssm_floats_) + conv_floats_;
  if (config_.arch == ModelArch::kMamba1) return View(p, {batch, D, N}, {D * N, N, 1});
  const int64_t H = config_.nheads, P = config_.headdim;
  return View(p, {batch, H, P, N}, {D * N, P * N, N, 1});
}

}  // namespace ssmkit::model

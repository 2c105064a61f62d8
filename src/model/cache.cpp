#include "model/cache.hpp"

#include <algorithm>

#include "model/views.hpp"

namespace ssmkit::model {

void StateCache::Shape(const ModelConfig& config, int64_t blocks, int64_t max_batch) {
  config_ = config;
  blocks_ = blocks;
  max_batch_ = max_batch;
  conv_floats_ = config.conv_dim() * (config.d_conv - 1);
  ssm_floats_ = config.d_inner * config.d_state;  // D = H * P for Mamba-2
}

void StateCache::Allocate(const ModelConfig& config, int64_t blocks, int64_t max_batch) {
  Shape(config, blocks, max_batch);
  data_.Assign(static_cast<size_t>((conv_floats_ + ssm_floats_) * max_batch * blocks));
  base_ = data_.data();
  device_ = Device::kCpu;
}

Status StateCache::AllocateOnDevice(const ModelConfig& config, int64_t blocks, int64_t max_batch) {
  Shape(config, blocks, max_batch);
  const int64_t bytes = (conv_floats_ + ssm_floats_) * max_batch * blocks * 4;
  SSMKIT_RETURN_IF_ERROR(device_data_.Allocate("session: SSM and conv states", bytes));
  base_ = static_cast<float*>(device_data_.data());
  device_ = Device::kCuda;
  SSMKIT_RETURN_IF_ERROR(cuda::ZeroOnDevice(base_, bytes, nullptr));
  return cuda::SynchronizeStream(nullptr);
}

float* StateCache::conv_data(int64_t i) const {
  return base_ + i * (conv_floats_ + ssm_floats_) * max_batch_;
}

float* StateCache::ssm_data(int64_t i) const { return conv_data(i) + conv_floats_ * max_batch_; }

Tensor StateCache::conv(int64_t i, int64_t first, int64_t count) const {
  const int64_t C = config_.conv_dim(), S = config_.d_conv - 1;
  Tensor t = View(conv_data(i) + first * conv_floats_, {count, C, S}, {C * S, S, 1});
  t.device = device_;
  return t;
}

Tensor StateCache::ssm(int64_t i, int64_t first, int64_t count) const {
  const int64_t D = config_.d_inner, N = config_.d_state;
  const float* p = ssm_data(i) + first * ssm_floats_;
  const int64_t H = config_.nheads, P = config_.headdim;
  Tensor t = config_.arch == ModelArch::kMamba1 ? View(p, {count, D, N}, {D * N, N, 1})
                                                : View(p, {count, H, P, N}, {D * N, P * N, N, 1});
  t.device = device_;
  return t;
}

void StateCache::Clear(int64_t slot) {
  for (int64_t i = 0; i < blocks_; ++i) {
    std::fill_n(conv_data(i) + slot * conv_floats_, conv_floats_, 0.0f);
    std::fill_n(ssm_data(i) + slot * ssm_floats_, ssm_floats_, 0.0f);
  }
}

Status StateCache::ClearOnDevice(int64_t first, int64_t count, void* stream) const {
  for (int64_t i = 0; i < blocks_; ++i) {
    SSMKIT_RETURN_IF_ERROR(
        cuda::ZeroOnDevice(conv_data(i) + first * conv_floats_, count * conv_floats_ * 4, stream));
    SSMKIT_RETURN_IF_ERROR(
        cuda::ZeroOnDevice(ssm_data(i) + first * ssm_floats_, count * ssm_floats_ * 4, stream));
  }
  return Status::Ok();
}

}  // namespace ssmkit::model

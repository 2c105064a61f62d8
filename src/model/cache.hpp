// The recurrent state of every slot, per Mamba block: the conv state (the last K - 1 conv
// inputs) and the SSM state. Allocated once for max_batch slots, in host memory or on the GPU
// (a CUDA session's: the views are then CUDA tensors); slot s is row s of each block's arrays,
// so slots [s, s + n) are one strided (n, ...) view.
// Dimension legend: S slots (max_batch), C conv channels, K conv width, D d_inner,
// N state size, H heads, P head dim.
#pragma once

#include <cstdint>

#include "core/aligned_floats.hpp"
#include "cuda/device_runtime.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

class StateCache {
 public:
  // `blocks`: the blocks with a conv + SSM state. May throw std::bad_alloc.
  void Allocate(const ModelConfig& config, int64_t blocks, int64_t max_batch);
  // The same in device memory, zeroed.
  Status AllocateOnDevice(const ModelConfig& config, int64_t blocks, int64_t max_batch);
  Device device() const { return device_; }

  // Slots [first, first + count) of block i's states.
  Tensor conv(int64_t i, int64_t first, int64_t count) const;  // (n, C, K - 1) f32
  Tensor ssm(int64_t i, int64_t first, int64_t count) const;   // (n, D, N) or (n, H, P, N) f32
  // Every slot of block i's SSM state, for per-row indices (state_batch_indices).
  Tensor ssm_all(int64_t i) const { return ssm(i, 0, max_batch_); }

  int64_t conv_floats() const { return conv_floats_; }  // one slot's conv state
  int64_t ssm_floats() const { return ssm_floats_; }    // one slot's SSM state
  int64_t blocks() const { return blocks_; }
  // One slot's states, zeroed (host memory).
  void Clear(int64_t slot);
  // Slots [first, first + count) zeroed on the GPU, in order on `stream` (a cudaStream_t).
  Status ClearOnDevice(int64_t first, int64_t count, void* stream) const;

 private:
  void Shape(const ModelConfig& config, int64_t blocks, int64_t max_batch);
  float* conv_data(int64_t i) const;
  float* ssm_data(int64_t i) const;

  ModelConfig config_;
  int64_t blocks_ = 0, max_batch_ = 0;
  int64_t conv_floats_ = 0, ssm_floats_ = 0;  // per slot
  Device device_ = Device::kCpu;
  float* base_ = nullptr;  // data_'s or device_data_'s
  AlignedFloats data_;
  cuda::DeviceMemory device_data_;
};

}  // namespace ssmkit::model

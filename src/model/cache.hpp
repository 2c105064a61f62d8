// The recurrent state of a batch of sequences, per layer: the conv state (the last K - 1 conv
// inputs) and the SSM state. Allocated once for max_batch sequences; a batch of B <= max_batch
// uses the first B rows of each.
// Dimension legend: B batch, C conv channels, K conv width, D d_inner, N state size,
// H heads, P head dim.
#pragma once

#include <cstdint>
#include <vector>

#include "ssmkit/model.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

class StateCache {
 public:
  // May throw std::bad_alloc.
  void Allocate(const ModelConfig& config, int64_t max_batch);

  Tensor conv(int64_t layer, int64_t batch) const;  // (B, C, K - 1) f32
  Tensor ssm(int64_t layer, int64_t batch) const;   // (B, D, N) or (B, H, P, N) f32

 private:
  ModelConfig config_;
  int64_t max_batch_ = 0;
  int64_t conv_floats_ = 0, ssm_floats_ = 0;  // per layer, at max_batch
  std::vector<float> data_;
};

}  // namespace ssmkit::model

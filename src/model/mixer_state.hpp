// How a Mamba mixer reaches its slots' states in the cache (model/cache.hpp) for one forward
// pass (model/seq_batch.hpp).
// Dimension legend: n sequences, C conv channels, K conv width.
#pragma once

#include <algorithm>
#include <cstdint>

#include <string>

#include "model/cache.hpp"
#include "model/seq_batch.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

// A copy of `state` (one slot's, contiguous) in `scratch` when the slot holds tokens, as the
// initial state of a prefill chunk (the ops read it while they write the final state into the
// cache, so it must not alias); undefined for an empty slot (the ops start from zeros).
inline Tensor InitialState(const Tensor& state, int64_t start, float* scratch) {
  if (start == 0) return Tensor{};
  std::copy_n(static_cast<const float*>(state.data), state.numel(), scratch);
  Tensor copy = state;
  copy.data = scratch;
  return copy;
}

// Gathering scattered slots' states (the two helpers below) is host code: on the GPU a decode
// batch must be consecutive slots, one strided view of the cache.
inline Status CheckDecodeSlots(const StateCache& cache, const SeqBatch& batch, const char* mixer) {
  if (cache.device() == Device::kCpu || batch.consecutive_slots()) return Status::Ok();
  return Status::Unsupported(std::string(mixer) +
                             " decode on CUDA: the slots must be consecutive (one strided view "
                             "of the states); scattered slots are gathered on the CPU only");
}

// The conv states (n, C, K - 1) of a decode batch: the cache's rows themselves when the slots
// are consecutive, else gathered into `scratch` (n * conv_floats) and written back by Finish.
class DecodeConvStates {
 public:
  DecodeConvStates(const StateCache& cache, int64_t block, const SeqBatch& batch, float* scratch)
      : cache_(cache), block_(block), batch_(batch), gathered_(!batch.consecutive_slots()) {
    if (!gathered_) {
      tensor_ = cache.conv(block, batch.slots[0], batch.n);
      return;
    }
    const int64_t f = cache.conv_floats();
    for (int64_t i = 0; i < batch.n; ++i) {
      const Tensor row = cache.conv(block, batch.slots[i], 1);
      std::copy_n(static_cast<const float*>(row.data), f, scratch + i * f);
    }
    tensor_ = cache.conv(block, 0, batch.n);
    tensor_.data = scratch;
  }
  const Tensor& tensor() const { return tensor_; }
  void Finish() const {
    if (!gathered_) return;
    const int64_t f = cache_.conv_floats();
    for (int64_t i = 0; i < batch_.n; ++i) {
      const Tensor row = cache_.conv(block_, batch_.slots[i], 1);
      std::copy_n(static_cast<const float*>(tensor_.data) + i * f, f,
                  static_cast<float*>(row.data));
    }
  }

 private:
  const StateCache& cache_;
  int64_t block_;
  const SeqBatch& batch_;
  bool gathered_;
  Tensor tensor_;
};

// The SSM states of a decode batch: a strided view for consecutive slots, else every slot's
// state with per-row indices (selective_state_update's state_batch_indices).
inline void DecodeSsmStates(const StateCache& cache, int64_t block, const SeqBatch& batch,
                            Tensor* state, Tensor* indices) {
  if (batch.consecutive_slots()) {
    *state = cache.ssm(block, batch.slots[0], batch.n);
    *indices = Tensor{};
  } else {
    *state = cache.ssm_all(block);
    *indices = batch.slot_tensor();
  }
}

}  // namespace ssmkit::model

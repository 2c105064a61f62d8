// The sequences of one forward pass through the blocks: n sequences packed token-major into
// T rows (no padding); sequence i is rows [offset[i], offset[i + 1]) and continues slot
// slots[i], which held start[i] tokens before it.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

struct SeqBatch {
  int64_t n = 0;
  int64_t T = 0;
  const int32_t* slots = nullptr;      // (n) distinct slot ids
  const int64_t* offset = nullptr;     // (n + 1) row offsets, offset[n] = T
  const int64_t* start = nullptr;      // (n) tokens each slot held before
  const int32_t* positions = nullptr;  // (T) each row's position in its sequence (start + j)
  bool decode = false;                 // one token per sequence: the single-step ops run

  int64_t length(int64_t i) const { return offset[i + 1] - offset[i]; }
  // Slots slots[0] + i for every i: the caches' rows form one strided view.
  bool consecutive_slots() const {
    for (int64_t i = 1; i < n; ++i) {
      if (slots[i] != slots[0] + i) return false;
    }
    return true;
  }
  Tensor slot_tensor() const { return Tensor::Contiguous(slots, DType::kI32, {n}); }
};

}  // namespace ssmkit::model

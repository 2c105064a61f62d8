#include "cpu/thread_scratch.hpp"

#include <cstddef>

#include "core/aligned_floats.hpp"

namespace ssmkit::cpu {

float* ThreadScratch(ScratchSlot slot, int64_t floats) {
  thread_local AlignedFloats buffers[static_cast<int>(ScratchSlot::kCount)];
  AlignedFloats& buffer = buffers[static_cast<int>(slot)];
  buffer.Grow(static_cast<size_t>(floats));
  return buffer.data();
}

}  // namespace ssmkit::cpu

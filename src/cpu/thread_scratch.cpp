#include "cpu/thread_scratch.hpp"

#include <cstddef>
#include <vector>

namespace ssmkit::cpu {

float* ThreadScratch(ScratchSlot slot, int64_t floats) {
  thread_local std::vector<float> buffers[static_cast<int>(ScratchSlot::kCount)];
  std::vector<float>& buffer = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(buffer.size()) < floats) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

}  // namespace ssmkit::cpu

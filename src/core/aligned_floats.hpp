// A host f32 buffer whose data() starts on a cache line (64 bytes, one AVX-512 vector).
// std::vector<float> gives 16-byte alignment, and where in a line it starts depends on the
// allocator's history (which thread's arena, what was freed before). The engine's activation
// buffers and states live in such buffers: started mid-line, every vector store of the batched
// decode step straddles two lines, and a batch-32 m2-130m step ran 20-25% slower (102-106 ms
// against 80-85 on a Zen 4) when the session was created on another thread than main
// (docs/benchmarks.md, "Activation buffers on cache lines").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ssmkit {

class AlignedFloats {
 public:
  static constexpr size_t kLineFloats = 64 / sizeof(float);

  // n zeroed floats. May throw std::bad_alloc.
  void Assign(size_t n) {
    storage_.assign(n + kLineFloats, 0.0f);
    Place(n);
  }
  // At least n floats; what the buffer held is undefined after it grows. May throw
  // std::bad_alloc.
  void Grow(size_t n) {
    if (n <= size_) return;
    storage_.resize(n + kLineFloats);
    Place(n);
  }
  float* data() { return storage_.data() + offset_; }
  const float* data() const { return storage_.data() + offset_; }
  size_t size() const { return size_; }

 private:
  void Place(size_t n) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    offset_ = (64 - address % 64) % 64 / sizeof(float);
    size_ = n;
  }

  std::vector<float> storage_;
  size_t offset_ = 0, size_ = 0;
};

}  // namespace ssmkit

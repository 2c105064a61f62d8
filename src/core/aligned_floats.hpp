// A host f32 buffer whose data() starts on a cache line (64 bytes, one AVX-512 vector).
// std::vector<float> gives 16-byte alignment, and where in a line it starts depends on the
// allocator's history (which thread's arena, what was freed before). The engine's activation
// buffers and states live in such buffers: started mid-line, every vector store of the batched
// decode step straddles two lines, and a batch-32 m2-130m step ran 20-25% slower (102-106 ms
// against 80-85 on a Zen 4) when the session was created on another thread than main
// (docs/benchmarks.md, "Activation buffers on cache lines"). The storage is a CacheLineVector;
// this adds Grow's promise: a buffer large enough is kept as it is.
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/cache_line_vector.hpp"

namespace ssmkit {

class AlignedFloats {
 public:
  // n zeroed floats (storage for one at least: data() is not null after an Assign). May throw
  // std::bad_alloc.
  void Assign(size_t n) {
    storage_.assign(std::max<size_t>(n, 1), 0.0f);
    size_ = n;
  }
  // At least n floats; what the buffer held is undefined after it grows. May throw
  // std::bad_alloc.
  void Grow(size_t n) {
    if (n <= size_) return;
    storage_.resize(n);
    size_ = n;
  }
  float* data() { return storage_.data(); }
  const float* data() const { return storage_.data(); }
  size_t size() const { return size_; }

 private:
  CacheLineVector<float> storage_;
  size_t size_ = 0;
};

}  // namespace ssmkit

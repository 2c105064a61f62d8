// A float buffer reserved as address space only, for the int64-indexing tests: tensors whose
// batch stride exceeds 2^31 elements cost memory only for the pages actually touched.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace ssmkit::testing {

// A float buffer of `count` elements reserved as address space only: pages are backed (with
// zeros) when first touched.
class SparseFloats {
 public:
  explicit SparseFloats(int64_t count) : bytes_(static_cast<size_t>(count) * sizeof(float)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<float*>(p);
  }
  ~SparseFloats() {
    if (data_) munmap(data_, bytes_);
  }
  SparseFloats(const SparseFloats&) = delete;
  SparseFloats& operator=(const SparseFloats&) = delete;
  float* data() const { return data_; }

 private:
  size_t bytes_;
  float* data_ = nullptr;
};

}  // namespace ssmkit::testing

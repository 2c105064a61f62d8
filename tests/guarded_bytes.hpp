// A copy of some bytes that ends where an inaccessible page begins: a kernel that reads past the
// end of its operand faults there instead of reading its neighbour's memory unnoticed (reads
// the sanitizers cannot see, e.g. AMX's tile loads, included).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ssmkit::testing {

class GuardedBytes {
 public:
  GuardedBytes(const void* src, size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = (bytes + page - 1) / page * page + page;
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<uint8_t*>(p);
    if (mprotect(base_ + mapped_ - page, page, PROT_NONE) != 0) return;
    data_ = base_ + mapped_ - page - bytes;
    std::memcpy(data_, src, bytes);
  }
  ~GuardedBytes() {
    if (base_ != nullptr) munmap(base_, mapped_);
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  // nullptr when the pages could not be mapped or protected.
  void* data() const { return data_; }

 private:
  size_t mapped_ = 0;
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
};

}  // namespace ssmkit::testing

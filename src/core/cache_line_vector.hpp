// std::vector whose buffer starts on a cache line (64 bytes, one AVX-512 vector), for buffers
// that kernels load vectors from. std::allocator gives 16-byte alignment: where in a line the
// buffer starts then depends on the allocator's history, and with it whether 32- or 64-byte
// loads straddle two lines (each such load costs a second access).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ssmkit {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }

  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <class T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace ssmkit

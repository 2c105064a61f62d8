// 16-byte moves along contiguous rows for kernels templated on the storage dtype (float, __half,
// __nv_bfloat16; common.cuh's ToF32 / FromF32 convert): cp.async into shared memory and packed
// stores, for hot loops that read and write (B, D, L) rows.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "cuda/common.cuh"

namespace ssmkit::cuda {

// Elements of T in 16 bytes: one vector move.
template <class T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// True when data and every stride (in elements of elem_size bytes) keep 16-byte alignment, so
// that a row start plus a multiple of kVec16 elements can be moved as 16-byte vectors.
inline bool Aligned16(const void* data, int64_t elem_size, std::initializer_list<int64_t> strides) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return false;
  for (int64_t s : strides) {
    if ((s * elem_size) % 16 != 0) return false;
  }
  return true;
}

// Stores kVec16<T> values from v (f32, shared or registers) to dst, 16-byte aligned.
template <class T>
__device__ __forceinline__ void StoreVec16(T* dst, const float* v) {
  uint4 bits;
  if constexpr (sizeof(T) == 4) {
    bits = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  } else {
    T* e = reinterpret_cast<T*>(&bits);
#pragma unroll
    for (int i = 0; i < kVec16<T>; ++i) e[i] = FromF32<T>(v[i]);
  }
  *reinterpret_cast<uint4*>(dst) = bits;
}

// ---- cp.async (sm_80+): global -> shared without passing through registers

// Copies 16 bytes from gmem to smem (both 16-byte aligned); bytes at and past src_bytes (0..16)
// are not read and land as zeros. The copy completes at CopyAsyncWait.
__device__ __forceinline__ void CopyAsync16(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void CopyAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending committed groups (the newest) are in flight; the calling
// thread's completed copies are then visible to it (a barrier makes them visible to the block).
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace ssmkit::cuda

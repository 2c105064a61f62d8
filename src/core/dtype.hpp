// Scalar conversions between the storage dtypes and f32. bf16 rounds to nearest even;
// f16 uses the compiler's _Float16 (IEEE binary16).
#pragma once

#include <cstdint>
#include <cstring>

#include "ssmkit/tensor.hpp"

namespace ssmkit {

inline float Bf16ToF32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float F16ToF32(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

inline uint16_t F32ToF16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

// Element i of a buffer of `dtype` (i counts elements, not bytes).
inline float LoadAsF32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kI32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case DType::kI64:
      return static_cast<float>(static_cast<const int64_t*>(data)[i]);
  }
  return 0.0f;
}

inline void StoreFromF32(void* data, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[i] = v;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[i] = F32ToBf16(v);
      return;
    case DType::kF16:
      static_cast<uint16_t*>(data)[i] = F32ToF16(v);
      return;
    case DType::kI32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      return;
    case DType::kI64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v);
      return;
  }
}

}  // namespace ssmkit

namespace ssmkit {

// Converts n consecutive elements starting at element `offset` of `src` to f32.
inline void RowToF32(const void* src, DType dtype, int64_t offset, int64_t n, float* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(src) + offset,
                static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadAsF32(src, dtype, offset + i);
}

// Writes n f32 values to consecutive elements of `dst` starting at element `offset`.
inline void RowFromF32(const float* src, int64_t n, void* dst, DType dtype, int64_t offset) {
  if (dtype == DType::kF32) {
    std::memcpy(static_cast<float*>(dst) + offset, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) StoreFromF32(dst, dtype, offset + i, src[i]);
}

}  // namespace ssmkit

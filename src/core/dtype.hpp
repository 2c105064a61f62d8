// Scalar conversions between the storage dtypes and f32. bf16 rounds to nearest even;
// f16 uses the compiler's IEEE binary16 type (SSMKIT_NATIVE_F16) where it has one.
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

// f16 by bit manipulation, for compilers without a binary16 type on this target (clang before 15
// on x86, which the fuzz preset uses); tests/dtype_test.cpp checks them against the compiler's
// (SSMKIT_NATIVE_F16) on every f16 value and on f32 values around every rounding boundary.
inline float F16ToF32Portable(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  uint32_t wide;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    std::memcpy(&wide, &magnitude, sizeof wide);
    wide |= sign;
  } else if (exponent == 31) {  // inf, or NaN made quiet with its payload kept
    wide = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u);
  } else {
    wide = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

// Round to nearest even, overflow to inf, NaN stays NaN (quiet).
inline uint16_t F32ToF16Portable(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t out;
  if (x >= (143u << 23)) {  // |f| >= 65536 (past f16's range whatever the rounding), inf, NaN
    out = x > 0x7f800000u ? 0x7e00u | ((x >> 13) & 0x3ffu) : 0x7c00u;
  } else if (x < (113u << 23)) {             // below f16's smallest normal: let an f32 add round it
    const uint32_t magic_bits = 126u << 23;  // 0.5: its last mantissa bit is f16's 2^-24
    float magic, sum;
    std::memcpy(&magic, &magic_bits, sizeof magic);
    std::memcpy(&sum, &x, sizeof sum);
    sum += magic;
    std::memcpy(&out, &sum, sizeof out);
    out -= magic_bits;
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;  // rebias, round half to even
    out = x >> 13;  // a carry into the exponent is the right rounding (up to inf at 65520)
  }
  return static_cast<uint16_t>(out | sign);
}

// The compiler's IEEE binary16 type, where C++ has one: on ARM the ACLE's __fp16 (GCC defines
// __FLT16_MANT_DIG__ there but has _Float16 in C only before GCC 13), elsewhere _Float16.
#if defined(__ARM_FP16_FORMAT_IEEE)
#define SSMKIT_NATIVE_F16 __fp16
#elif defined(__FLT16_MANT_DIG__)
#define SSMKIT_NATIVE_F16 _Float16
#endif

#if defined(SSMKIT_NATIVE_F16)
inline float F16ToF32(uint16_t bits) {
  SSMKIT_NATIVE_F16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

inline uint16_t F32ToF16(float f) {
  SSMKIT_NATIVE_F16 h = static_cast<SSMKIT_NATIVE_F16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}
#else
inline float F16ToF32(uint16_t bits) { return F16ToF32Portable(bits); }
inline uint16_t F32ToF16(float f) { return F32ToF16Portable(f); }
#endif

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
    default:  // quantized: not addressable by element (core/quant.hpp dequantizes rows)
      return 0.0f;
  }
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
    default:  // quantized: written a row at a time (core/quant.hpp)
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

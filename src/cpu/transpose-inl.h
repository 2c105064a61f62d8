// In-register transpose of a square block of W x W floats, W = the vector width (16 on AVX-512,
// 8 on AVX2, 4 on the portable target). Kernels that run the recurrence across channels (one
// vector = one time step of W channels) use it to turn rows of W channels (contiguous in time)
// into time steps and back, at a few shuffles per element instead of one scalar load and store.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
#if defined(SSMKIT_CPU_TRANSPOSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_TRANSPOSE_INL_H_
#undef SSMKIT_CPU_TRANSPOSE_INL_H_
#else
#define SSMKIT_CPU_TRANSPOSE_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// v[i] lane j becomes v[j] lane i, for a full vector tag DF of f32 (ScalableTag<float>).
template <class DF>
HWY_INLINE void TransposeSquare(DF df, hn::Vec<DF>* v) {
  using VF [[maybe_unused]] = hn::Vec<DF>;
  constexpr size_t kW = hn::MaxLanes(DF());
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kW == 16) {
    // 4 stages of 16 shuffles: 32-bit interleave within 128-bit blocks, 64-bit interleave
    // (each block then holds one element of 4 rows), then two 128-bit block shuffles that
    // gather the 4 blocks of a column.
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(v[i].raw, v[i + 1].raw);
      t[i + 1] = _mm512_unpackhi_ps(v[i].raw, v[i + 1].raw);
    }
    for (int i = 0; i < 16; i += 4) {  // u[i + e] holds element 4k + e of rows i..i+3
      const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
      const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
      u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int e = 0; e < 4; ++e) {  // t[e]: blocks 0, 2 of rows 0-3, 4-7; t[4+e]: blocks 1, 3
      t[e] = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
      t[4 + e] = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xdd);
      t[8 + e] = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
      t[12 + e] = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xdd);
    }
    for (int e = 0; e < 8; ++e) {  // column c = e (blocks 0 / 1) and c = 8 + e (blocks 2 / 3)
      v[e] = VF{_mm512_shuffle_f32x4(t[e], t[8 + e], 0x88)};
      v[8 + e] = VF{_mm512_shuffle_f32x4(t[e], t[8 + e], 0xdd)};
    }
    return;
  }
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (kW == 8) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(v[i].raw, v[i + 1].raw);
      t[i + 1] = _mm256_unpackhi_ps(v[i].raw, v[i + 1].raw);
    }
    for (int i = 0; i < 8; i += 4) {  // u[i + e] holds element 4k + e of rows i..i+3
      u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
      u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int e = 0; e < 4; ++e) {
      v[e] = VF{_mm256_permute2f128_ps(u[e], u[4 + e], 0x20)};
      v[4 + e] = VF{_mm256_permute2f128_ps(u[e], u[4 + e], 0x31)};
    }
    return;
  }
#endif
  // Any other width: through memory.
  HWY_ALIGN float buffer[kW * kW];
  for (size_t i = 0; i < kW; ++i) hn::Store(v[i], df, buffer + i * kW);
  HWY_ALIGN float column[kW];
  for (size_t j = 0; j < kW; ++j) {
    for (size_t i = 0; i < kW; ++i) column[i] = buffer[i * kW + j];
    v[j] = hn::Load(df, column);
  }
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_TRANSPOSE_INL_H_

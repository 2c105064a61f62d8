// Horizontal sums in batches: the lane sums of W vectors (W = the vector width) as one
// vector, for kernels whose partial sums end up spread over the lanes (the SSD backward's
// B . g per head dim). On AVX-512 a reduction tree of block shuffles and in-block unpacks
// costs ~3 shuffles and adds per sum, against ~10 for one SumOfLanes per vector. On AVX2 a
// tree of horizontal adds (~3 per sum) replaced the generic path, whose per-vector sums went
// through memory: the SSD backward 3-4% faster on one thread (Intel Xeon, AVX2 target).
// Also an f64-accumulated dot product for long sums.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
#if defined(SSMKIT_CPU_SSD_REDUCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SSD_REDUCE_INL_H_
#undef SSMKIT_CPU_SSD_REDUCE_INL_H_
#else
#define SSMKIT_CPU_SSD_REDUCE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns the vector whose lane i is the sum of the lanes of v[i], i < Lanes(df).
template <class DF>
HWY_INLINE hn::Vec<DF> SumLanesOfEach(DF df, const hn::Vec<DF>* v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(DF()) == 16) {
    // 16 -> 8: vector k holds 8 partials of item 2k (blocks 0-1) and of 2k+1 (blocks 2-3).
    __m512 w[8], x[4], y[2];
    for (int k = 0; k < 8; ++k) {
      const __m512 a = v[2 * k].raw, b = v[2 * k + 1].raw;
      w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    }
    // 8 -> 4: block j of x[k] holds 4 partials of item 4k + j.
    for (int k = 0; k < 4; ++k) {
      const __m512 a = w[2 * k], b = w[2 * k + 1];
      x[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
    }
    // 4 -> 2: in block j of y[m], lanes 0, 2 hold item 8m + j, lanes 1, 3 item 8m + 4 + j.
    for (int m = 0; m < 2; ++m) {
      const __m512 a = x[2 * m], b = x[2 * m + 1];
      y[m] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    // 2 -> 1: lane 4j + q holds item 4q + j; a permutation puts item i in lane i.
    const __m512d a = _mm512_castps_pd(y[0]), b = _mm512_castps_pd(y[1]);
    const __m512 r = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                                   _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return hn::Vec<DF>{_mm512_permutexvar_ps(order, r)};
  }
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (hn::MaxLanes(DF()) == 8) {
    // 8 -> 4: in each 128-bit block of w[k], lanes 0-1 hold 2 partials of item 2k, lanes 2-3
    // 2 of item 2k+1 (the other 2 of each in the other block).
    __m256 w[4], x[2];
    for (int k = 0; k < 4; ++k) w[k] = _mm256_hadd_ps(v[2 * k].raw, v[2 * k + 1].raw);
    // 4 -> 2: lane j of each block of x[m] holds a partial of item 4m + j.
    for (int m = 0; m < 2; ++m) x[m] = _mm256_hadd_ps(w[2 * m], w[2 * m + 1]);
    // 2 -> 1: the two blocks' partials added, items 0-3 from x[0], 4-7 from x[1].
    return hn::Vec<DF>{_mm256_add_ps(_mm256_permute2f128_ps(x[0], x[1], 0x20),
                                     _mm256_permute2f128_ps(x[0], x[1], 0x31))};
  }
#endif
  HWY_ALIGN float sums[hn::MaxLanes(DF())];
  for (size_t i = 0; i < hn::Lanes(df); ++i) sums[i] = hn::GetLane(hn::SumOfLanes(df, v[i]));
  return hn::Load(df, sums);
}

// sum_i a[i] b[i] with f64 accumulation (products of f32 exact in f64), for long sums.
template <class DF>
HWY_INLINE double DotF64(DF df, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                         int64_t n) {
  const hn::Rebind<double, hn::Half<DF>> dd;
  const hn::Half<DF> dh;
  const int64_t half = static_cast<int64_t>(hn::Lanes(dh));
  auto product = [&](int64_t i) {
    return hn::Mul(hn::PromoteTo(dd, hn::LoadU(dh, a + i)),
                   hn::PromoteTo(dd, hn::LoadU(dh, b + i)));
  };
  // Four accumulators: one would wait on the f64 add's latency every step.
  auto acc0 = hn::Zero(dd), acc1 = hn::Zero(dd), acc2 = hn::Zero(dd), acc3 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 4 * half <= n; i += 4 * half) {
    acc0 = hn::Add(acc0, product(i));
    acc1 = hn::Add(acc1, product(i + half));
    acc2 = hn::Add(acc2, product(i + 2 * half));
    acc3 = hn::Add(acc3, product(i + 3 * half));
  }
  for (; i + half <= n; i += half) acc0 = hn::Add(acc0, product(i));
  double sum = hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3))));
  for (; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SSD_REDUCE_INL_H_

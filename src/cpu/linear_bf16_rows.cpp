// The bf16 products (linear_bf16.hpp) for 2 <= T <= kLinearGemvMaxRows rows of x: decode
// batches, where the whole model's weights stream through once per step and the products of the
// few-rows f32 kernel (linear_gemv.cpp) bind it at 8 and more rows.
// Dimension legend: T rows of x, K input features, M output features, R weight rows per tile,
// Tt rows of x per tile.
//
// W is read in its own layout, 32 bf16 of a row per vector: vdpbf16ps adds the products of
// pairs of x's and W's elements along K to 16 f32 lanes, twice the multiply-adds per
// instruction of the f32 kernel's FMA and no widening of W. A tile of Tt = 8 rows of x by R = 3
// weight rows holds 24 accumulators (of 32 zmm registers), 3 weight vectors and one x vector;
// the tiles walk the rows of x for one block of 24 weight rows, which comes from memory once
// (the next block prefetched a few lines per step) and from L1 / L2 for the other tiles. K's
// tail is one masked step, zeros beyond K. Each output is its 16 lanes' partial sums along K in
// order, then the lanes, then the bias: the same whatever T, the tile and the thread count, so a
// row's bits do not depend on the other rows of the batch.
#include <algorithm>

#include "cpu/linear_bf16.hpp"
#include "cpu/spread_prefetch.hpp"
#include "ssmkit/linear.hpp"

#if SSMKIT_BF16_PRODUCTS_X86
#include <immintrin.h>
#endif

namespace ssmkit::cpu {

#if SSMKIT_BF16_PRODUCTS_X86
namespace {

constexpr int kTileXRows = 8;
constexpr int kTileWeightRows = 3;
// Weight rows per block, kept in cache while every tile of x rows passes. Tuned for speed only.
constexpr int64_t kBlockWeightRows = 8 * kTileWeightRows;
constexpr int64_t kStep = 32;  // bf16 elements per vector

// The 16 lanes' sum, in the same order for every accumulator: halves, then quarters, ...
SSMKIT_BF16_TARGET inline float SumOfLanes(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 e = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)));
}

// out[t, m + r] for the kT rows of x at x (bf16, rows K apart) and the kR weight rows at w
// (rows K apart); out rows out_stride apart.
template <int kT, int kR>
SSMKIT_BF16_TARGET __attribute__((noinline)) void Tile(const LinearParams& p, const uint16_t* w,
                                                       const uint16_t* x, float* out, int64_t m,
                                                       SpreadPrefetch& prefetch) {
  const int64_t K = p.in_features;
  __m512 acc[kT][kR];
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t) {
#pragma GCC unroll 3
    for (int r = 0; r < kR; ++r) acc[t][r] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; k += kStep) {
    prefetch.Step();
    const __mmask32 mask =
        K - k >= kStep ? ~__mmask32{0} : static_cast<__mmask32>((1u << (K - k)) - 1u);
    __m512bh wv[kR];
#pragma GCC unroll 3
    for (int r = 0; r < kR; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + r * K + k);
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      __m512i xv = _mm512_maskz_loadu_epi16(mask, x + t * K + k);
      asm("" : "+v"(xv));  // one load for the kR products, not one memory operand each
#pragma GCC unroll 3
      for (int r = 0; r < kR; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], (__m512bh)xv, wv[r]);
    }
  }
  // Unrolled like the loops above: an indexed acc would live on the stack, stored every step.
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t) {
#pragma GCC unroll 3
    for (int r = 0; r < kR; ++r) {
      float sum = SumOfLanes(acc[t][r]);
      if (p.bias != nullptr) sum += p.bias[m + r];
      out[t * p.out_stride_row + m + r] = sum;
    }
  }
}

// A tile of n <= kT rows of x.
template <int kR, int kT = kTileXRows>
void TileOfRows(int n, const LinearParams& p, const uint16_t* w, const uint16_t* x, float* out,
                int64_t m, SpreadPrefetch& pf) {
  if constexpr (kT > 1) {
    if (n < kT) return TileOfRows<kR, kT - 1>(n, p, w, x, out, m, pf);
  }
  Tile<kT, kR>(p, w, x, out, m, pf);
}

void TileOf(int n, int r, const LinearParams& p, const uint16_t* w, const uint16_t* x, float* out,
            int64_t m, SpreadPrefetch& pf) {
  static_assert(kTileWeightRows == 3, "a case per weight-row count");
  if (r == 3) return TileOfRows<3>(n, p, w, x, out, m, pf);
  if (r == 2) return TileOfRows<2>(n, p, w, x, out, m, pf);
  TileOfRows<1>(n, p, w, x, out, m, pf);
}

}  // namespace

void Bf16FewRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end) {
  const int64_t K = p.in_features, T = p.rows;
  const uint16_t* weight = static_cast<const uint16_t*>(p.weight);  // (M, K)
  for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlockWeightRows) {
    const int64_t m1 = std::min(m0 + kBlockWeightRows, m_end);
    const int64_t m2 = std::min(m1 + kBlockWeightRows, m_end);
    const int64_t tiles =
        (T + kTileXRows - 1) / kTileXRows * ((m1 - m0 + kTileWeightRows - 1) / kTileWeightRows);
    SpreadPrefetch pf(weight + m1 * K, weight + m2 * K, tiles * ((K + kStep - 1) / kStep));
    for (int64_t t = 0; t < T; t += kTileXRows) {
      const int n = static_cast<int>(std::min<int64_t>(kTileXRows, T - t));
      for (int64_t m = m0; m < m1; m += kTileWeightRows) {
        const int r = static_cast<int>(std::min<int64_t>(kTileWeightRows, m1 - m));
        TileOf(n, r, p, weight + m * K, xb + t * K, p.out + t * p.out_stride_row, m, pf);
      }
    }
  }
}

#else  // no AVX-512 BF16: never taken (TakesBf16Products); linear_bf16.cpp's scalar code

void Bf16FewRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end) {
  Bf16ProductRows(p, xb, m_begin, m_end);
}

#endif

}  // namespace ssmkit::cpu

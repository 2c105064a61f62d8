// Products with a bf16 weight on AVX-512 BF16 (opt-in, ssmkit::SetBf16Products): x rounded to
// bf16 once per call, then bf16 x bf16 products summed in f32 by vdpbf16ps, twice the
// multiply-adds per instruction of the f32 FMA of the other kernels.
// Dimension legend: T rows, K input features (even), M output features.
#pragma once

#include <cstdint>

#include "params/linear_params.hpp"

// The kernels' functions are compiled for AVX-512 BF16 with a target attribute (Highway 1.0.3
// has no such target) and run only where the CPU reports it (SetBf16Products).
#if defined(__x86_64__) && defined(__GNUC__)
#define SSMKIT_BF16_PRODUCTS_X86 1
#define SSMKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#else
#define SSMKIT_BF16_PRODUCTS_X86 0
#endif

#if SSMKIT_BF16_PRODUCTS_X86
#include <immintrin.h>

#include <algorithm>
#endif

namespace ssmkit::cpu {

#if SSMKIT_BF16_PRODUCTS_X86
// The first `count` (clamped to [0, 16]) of 16 lanes: a masked load or store of a vector's tail.
SSMKIT_BF16_TARGET inline __mmask16 FirstLanes(int64_t count) {
  return static_cast<__mmask16>((1u << std::clamp<int64_t>(count, 0, 16)) - 1u);
}

// Lane i holds i * step: the offsets of a gather or scatter of 16 elements step apart (16 step
// must fit in int32).
SSMKIT_BF16_TARGET inline __m512i LaneMultiples(int64_t step) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int>(step)));
}
#endif

// Whether Linear takes this path for p: the products are enabled and the CPU has AVX-512 BF16,
// K is even, and either T >= 2 rows (at most kLinearGemvMaxRows) with a bf16 weight, x and out
// row-major (one row of x, batch-1 decode, is bound by the weight's bytes and keeps x in f32; a
// quantized weight's few rows keep their 8-bit kernels), or more rows with a bf16 or quantized
// weight in any layout of x and out.
bool TakesBf16Products(const LinearParams& p);

// x rounded to bf16 (to nearest even), rows [t_begin, t_end) of the (T, K) buffer xb.
void RoundRowsToBf16(const LinearParams& p, int64_t t_begin, int64_t t_end, uint16_t* xb);

// Output features [m_begin, m_end) of p from xb (T, K) bf16 (RoundRowsToBf16; nullptr for a
// feature-major x, packed from its f32 columns), on the calling
// thread; bias added. May throw std::bad_alloc (the thread's packed weight panel, kept between
// calls). Each output is summed in one fixed order whatever the threads and the row range, and
// for T <= kLinearGemvMaxRows whatever the other rows of x (Bf16FewRows).
void Bf16ProductRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end);

// The same for 2 <= T <= kLinearGemvMaxRows (decode batches; linear_bf16_rows.cpp): W read in
// its own layout, once from memory for all T rows.
void Bf16FewRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end);

// Bp (Jb, 64) dwords = the pairs (x[2j, c], x[2j + 1, c]) rounded to bf16 for j in [j0, j0 + Jb)
// and columns c < cols (<= 64) of the f32 rows (K, >= cols) at x, ldx apart: a feature-major
// x's columns as the B operand of the bf16 products; zeros past cols, and x[K, c] zero for an
// odd K's last pair.
void PackPairColumns(const float* x, int64_t ldx, int64_t K, int64_t cols, int64_t j0, int64_t Jb,
                     uint32_t* Bp);

// With AMX's bf16 tiles (AmxBf16) the products of 2 or more rows take
// linear_bf16_amx_rows.cpp's kernel instead, 64 rows of x at a time, for any K and either
// layout of x and out: whether Linear takes it for p.
bool TakesAmxTiles(const LinearParams& p);
inline constexpr int64_t kAmxColumns = 64;   // rows of x packed (4 tiles of 16)
inline constexpr int64_t kAmxTileRows = 16;  // weight rows per tile

// x (at most kAmxColumns rows) packed for it: (AmxPairs(K), kAmxColumns) dwords, the pair x[t, 2j],
// x[t, 2j + 1] rounded to bf16 at [j, t]; zeros past K and T.
int64_t AmxPairs(int64_t K);
void PackAmxRows(const LinearParams& p, uint32_t* xq);

// Output features [m_begin, m_end) of p from xq (PackAmxRows), on the calling thread; bias
// added. Each output is summed over K's pairs in order, whatever T, the other rows of x, the
// range and the thread count.
void AmxFewRows(const LinearParams& p, const uint32_t* xq, int64_t m_begin, int64_t m_end);

}  // namespace ssmkit::cpu

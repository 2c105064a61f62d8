// The byte products of the signed weight formats of 32 elements (Q8_0, Q4_0, Q5_0) with few
// rows of x (quant_linear.cpp) on x86 (AVX2, and AVX-512 with or without VNNI), summed in one
// order for every row whatever the batch. Dimension legend: T rows of x, K input features,
// B = 32 elements per block, 8 rows per tile of x.
//
// The byte kernels of quant_dot_x86-inl.h give each row of x its own vector of partial sums:
// per row and block of 32 weights one vpdpbusd and three f32 operations (convert, scale, add),
// so that at 8 rows the product is bound by those instructions (docs/benchmarks.md). Here a
// tile of 8 rows is stored by columns (QuantizedRows::columns): one vector holds a quad of 4
// levels of each of the 8 rows, and a quad of the weight row broadcast to every lane multiplies
// all 8 at once, so the f32 work of a block is shared by the 8 rows (a convert, a scale, an add
// per block instead of per row and block). The byte multiplies take unsigned bytes times signed
// ones: with VNNI (kVnni) the weight's levels w go in as w + c (UnsignedLevelOffset c: Q8_0's
// levels with a flipped top bit, Q4_0's and Q5_0's as stored, before their offset), and each
// row's sum starts at -c times the sum of its block's levels (QuantizedRows::start), which x's
// quantization forms. Without VNNI, vpmaddubsw (sums of 2 products in int16, saturating) then
// vpmaddwd by 1: Q4_0's and Q5_0's levels go in the same way (at most 31: 4 pairs of products
// sum below 2^15), Q8_0's as |w| times x with w's sign (c = 0, no start).
//
// The order of each output's sum, the same for a row alone or in a tile, with or without VNNI:
// block b's exact integer sum S_b, converted to f32, times the f32 product (x's scale of b)
// (weight's d of b), is added into accumulator b % 8 (blocks in order); then
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). A tile by columns keeps the 8 accumulators
// as 8 vectors over its rows; a row alone (RowTotal) keeps them as the 8 lanes of one vector,
// each 8 blocks' sums reduced from their partial vectors at once.
//
// A Highway "-inl.h" included once per target from quant_linear.cpp after quant_dot_x86-inl.h;
// defines i8::ColumnsOf where SSMKIT_QUANT_DOT_BYTES is 1.
#if defined(SSMKIT_CPU_QUANT_COLUMNS_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_QUANT_COLUMNS_X86_INL_H_
#undef SSMKIT_CPU_QUANT_COLUMNS_X86_INL_H_
#else
#define SSMKIT_CPU_QUANT_COLUMNS_X86_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/quant_linear.hpp"
#include "cpu/stream_prefetch.hpp"
#include "hwy/highway.h"
#include "params/linear_params.hpp"

#if SSMKIT_QUANT_DOT_BYTES
HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace {
namespace i8 {

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): the 8 accumulators' fixed order, for
// vectors of any width (add: their addition; quant_amx_x86-inl.h's Q8_0 kernel adds 512-bit
// ones in the same order, for the same bits).
template <class V, class Add>
HWY_INLINE V TotalOfAccumulators(const V* a, Add add) {
  return add(add(add(a[0], a[4]), add(a[2], a[6])), add(add(a[1], a[5]), add(a[3], a[7])));
}
HWY_INLINE __m256 TotalOfAccumulators(const __m256* a) {
  return TotalOfAccumulators(a, [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); });
}

// The same order over the 8 lanes of one vector.
HWY_INLINE float TotalOfLanes(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // a_j + a_j+4
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));  // lane j < 2: (a_j + a_j+4) + (a_j+2 + a_j+6)
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Lane j: the sum of the 8 int32 lanes of p[j].
HWY_INLINE __m256i LaneTotals(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  // Each 128-bit half: the sums of that half of p[0..3] (p[4..7]).
  const __m256i low = _mm256_hadd_epi32(h01, h23), high = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20),
                          _mm256_permute2x128_si256(low, high, 0x31));
}

// Whether format F's levels go in as |w| times x with w's sign (c = 0): Q8_0 without VNNI, whose
// w + 128 would saturate vpmaddubsw's pair sums.
template <class F, bool kVnni>
constexpr bool kSignedProducts = !kVnni && F::kUnsignedOffset == 128;

// Block j's 32 weight levels times x's 32 (x's order) as 8 int32 partial sums, plus c times
// x's sum (the block's start takes that off): w + c by x, or |w| by x with w's sign
// (kSignedProducts).
template <class F, bool kVnni>
HWY_INLINE __m256i BlockPartials(const uint8_t* w, const int8_t* x) {
  if constexpr (kSignedProducts<F, kVnni>) {
    const __m256i levels = F::Levels(w);
    return QuadSums<false>(_mm256_abs_epi8(levels), _mm256_sign_epi8(Load32(x), levels));
  } else {
    return QuadSums<kVnni>(F::UnsignedLevels(w), Load32(x));
  }
}

// Lane j < n: block j's sum of w + c times x over a group of 8 blocks (w: the first; x: its
// levels in the lone rows' order), lanes past n zero or unspecified. kFull: n is 8.
template <class F, bool kFull, bool kVnni>
HWY_INLINE __m256i GroupSums(const uint8_t* HWY_RESTRICT w, int64_t n,
                             const int8_t* HWY_RESTRICT x) {
  if constexpr (F::kPairedRow) {
    // p[k]: block 2k's 4 partial sums in the low half, 2k + 1's in the high half.
    __m256i p[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      p[k] = _mm256_setzero_si256();
      const uint8_t* a = w + 2 * k * F::kBytes;
      if (kFull || 2 * k + 1 < n) {
        const Interleaved pair = F::UnsignedPair(a, a + F::kBytes);
#if SSMKIT_QUANT_DOT_VNNI
        if constexpr (kVnni) {
          p[k] = AddQuadProducts(p[k], pair.low, Load32(x + 64 * k));
          p[k] = AddQuadProducts(p[k], pair.high, Load32(x + 64 * k + 32));
          continue;
        }
#endif
        // Levels at most 31: the two int16 pair sums add below 2^15.
        p[k] = _mm256_madd_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(pair.low, Load32(x + 64 * k)),
                             _mm256_maddubs_epi16(pair.high, Load32(x + 64 * k + 32))),
            _mm256_set1_epi16(1));
      } else if (2 * k < n) {  // a last odd block, its levels as they are
        const __m256i s = BlockPartials<F, kVnni>(a, x + 64 * k);
        p[k] = _mm256_zextsi128_si256(
            _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
      }
    }
    // Halves: blocks 0 2 4 6 and 1 3 5 7, then in order.
    const __m256i h =
        _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  } else {
    __m256i partial[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      partial[j] = _mm256_setzero_si256();
      if (kFull || j < n) partial[j] = BlockPartials<F, kVnni>(w + j * F::kBytes, x + j * 32);
    }
    return LaneTotals(partial);
  }
}

// acc plus blocks [0, n) of a group of 8 (w: the first block; x, xs, start: its levels, scale
// and start) as lanes 0..n-1: their sums (GroupSums), started, converted and scaled at once;
// lanes n..7 take no part (masked off). kFull: n is 8, and the group needs no masks or tests.
template <class F, bool kFull, bool kVnni>
HWY_INLINE __m256 AddRowGroup(const uint8_t* HWY_RESTRICT w, int64_t n,
                              const int8_t* HWY_RESTRICT x, const float* HWY_RESTRICT xs,
                              const int32_t* HWY_RESTRICT start, __m256 acc) {
  const __m256i block_sums = GroupSums<F, kFull, kVnni>(w, n, x);
  // The 8 blocks' f16 d packed in general registers (idle here; a gather cost a third more).
  uint64_t d_bits[2] = {0, 0};
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    if (kFull || j < n) {
      uint16_t bits;
      std::memcpy(&bits, w + j * F::kBytes + F::kScaleOffset, sizeof bits);
      d_bits[j / 4] |= uint64_t{bits} << (16 * (j % 4));
    }
  }
  const __m256 d = _mm256_cvtph_ps(
      _mm_set_epi64x(static_cast<int64_t>(d_bits[1]), static_cast<int64_t>(d_bits[0])));
  __m256i sums;
  __m256 x_scale;
  if constexpr (kFull) {
    sums = _mm256_add_epi32(block_sums, Load32(start));
    x_scale = _mm256_loadu_ps(xs);
  } else {
    const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    sums = _mm256_add_epi32(block_sums, _mm256_maskload_epi32(start, valid));
    x_scale = _mm256_maskload_ps(xs, valid);
  }
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(x_scale, d), acc);
}

// One row of x (row-major levels x (K), scales xs and starts (K / B)) times weight row w (K / B
// blocks): the sum before the bias, in the order above, 8 blocks at a time (AddRowGroup).
template <class F, bool kVnni>
HWY_INLINE float RowTotal(const uint8_t* HWY_RESTRICT w, int64_t blocks,
                          const int8_t* HWY_RESTRICT x, const float* HWY_RESTRICT xs,
                          const int32_t* HWY_RESTRICT start) {
  __m256 acc = _mm256_setzero_ps();
  int64_t b0 = 0;
  for (; b0 + 8 <= blocks; b0 += 8) {
    acc = AddRowGroup<F, true, kVnni>(w + b0 * F::kBytes, 8, x + b0 * F::kElements, xs + b0,
                                      start + b0, acc);
  }
  if (b0 < blocks) {
    acc = AddRowGroup<F, false, kVnni>(w + b0 * F::kBytes, blocks - b0, x + b0 * F::kElements,
                                       xs + b0, start + b0, acc);
  }
  return TotalOfLanes(acc);
}

// sum[r] plus weight row r's quad q (kPick: its place in the 128-bit half, vpshufd's pattern,
// half[r] holding that half in both) times the 8 rows' quad q of x (xq, (8 rows, 4)): with
// VNNI, or with kSigned (|w| in half, w's half in sign for x's sign; one pair can reach
// 2^15 - 256, so each quad is widened at once), int32 lanes; else int16 pairs (vpmaddubsw; the
// caller keeps them below 2^15).
template <int kR, int kPick, bool kVnni, bool kSigned>
HWY_INLINE void AddQuad(const int8_t* xq, const __m256i* half, const __m256i* sign, __m256i* sum) {
  const __m256i x = Load32(xq);
  for (int r = 0; r < kR; ++r) {
    const __m256i u = _mm256_shuffle_epi32(half[r], kPick);
    if constexpr (kSigned) {
      const __m256i v = _mm256_sign_epi8(x, _mm256_shuffle_epi32(sign[r], kPick));
      sum[r] = _mm256_add_epi32(sum[r], QuadSums<false>(u, v));
      continue;
    }
#if SSMKIT_QUANT_DOT_VNNI
    if constexpr (kVnni) {
      sum[r] = AddQuadProducts(sum[r], u, x);
      continue;
    }
#endif
    sum[r] = _mm256_add_epi16(sum[r], _mm256_maddubs_epi16(u, x));
  }
}

// Block b of kR weight rows (w, row_bytes apart) times a tile of 8 rows by columns (x
// (blocks, 8, 8, 4) levels, xs and start (blocks, 8)), added into acc[r] (lanes: the rows).
template <class F, int kR, bool kVnni>
HWY_INLINE void AddColumnBlock(const uint8_t* HWY_RESTRICT w, int64_t row_bytes, int64_t b,
                               const int8_t* HWY_RESTRICT x, const float* HWY_RESTRICT xs,
                               const int32_t* HWY_RESTRICT start, __m256* acc) {
  constexpr bool kSigned = kSignedProducts<F, kVnni>;
  // Sums in int16 pairs until the block's end: the levels of Q4_0 / Q5_0 without VNNI.
  constexpr bool kPairs16 = !kVnni && !kSigned;
  const int8_t* xb = x + b * 8 * F::kElements;  // (8 quads, 8 rows, 4)
  const __m256i block_start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(start + 8 * b));
  // Weight row r's levels (+ c, or |w| and w), each 128-bit half in both halves (for vpshufd's
  // quads), and two sums per row (even and odd quads) for two chains of dependent products.
  __m256i low[kR], high[kR], low_sign[kR], high_sign[kR], even[kR], odd[kR];
  for (int r = 0; r < kR; ++r) {
    const uint8_t* block = w + r * row_bytes + b * F::kBytes;
    const __m256i levels = kSigned ? F::Levels(block) : F::UnsignedLevels(block);
    const __m256i u = kSigned ? _mm256_abs_epi8(levels) : levels;
    low[r] = _mm256_permute2x128_si256(u, u, 0x00);
    high[r] = _mm256_permute2x128_si256(u, u, 0x11);
    if constexpr (kSigned) {
      low_sign[r] = _mm256_permute2x128_si256(levels, levels, 0x00);
      high_sign[r] = _mm256_permute2x128_si256(levels, levels, 0x11);
    }
    even[r] = kPairs16 ? _mm256_setzero_si256() : block_start;
    odd[r] = _mm256_setzero_si256();
  }
  AddQuad<kR, 0x00, kVnni, kSigned>(xb, low, low_sign, even);
  AddQuad<kR, 0x55, kVnni, kSigned>(xb + 32, low, low_sign, odd);
  AddQuad<kR, 0xAA, kVnni, kSigned>(xb + 64, low, low_sign, even);
  AddQuad<kR, 0xFF, kVnni, kSigned>(xb + 96, low, low_sign, odd);
  AddQuad<kR, 0x00, kVnni, kSigned>(xb + 128, high, high_sign, even);
  AddQuad<kR, 0x55, kVnni, kSigned>(xb + 160, high, high_sign, odd);
  AddQuad<kR, 0xAA, kVnni, kSigned>(xb + 192, high, high_sign, even);
  AddQuad<kR, 0xFF, kVnni, kSigned>(xb + 224, high, high_sign, odd);
  const __m256 x_scale = _mm256_loadu_ps(xs + 8 * b);
  for (int r = 0; r < kR; ++r) {
    // kPairs16: 4 quads of pairs of levels at most 31 each, below 2^15, widened here.
    const __m256i one = _mm256_set1_epi16(1);
    const __m256i total =
        kPairs16 ? _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(even[r], one), block_start),
                                    _mm256_madd_epi16(odd[r], one))
                 : _mm256_add_epi32(even[r], odd[r]);
    const __m256 d = BroadcastF16(w + r * row_bytes + b * F::kBytes + F::kScaleOffset);
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(x_scale, d), acc[r]);
  }
}

// The tile times kR weight rows of K / B blocks each: total[r] lane t is row t's sum with
// weight row r before the bias. Blocks 8 at a time, so that accumulator b % 8 is a register.
template <class F, int kR, bool kVnni>
HWY_INLINE void ColumnTotals(const uint8_t* HWY_RESTRICT w, int64_t row_bytes, int64_t blocks,
                             const int8_t* HWY_RESTRICT x, const float* HWY_RESTRICT xs,
                             const int32_t* HWY_RESTRICT start, __m256* total) {
  __m256 acc[8][kR];
  for (int j = 0; j < 8; ++j) {
    for (int r = 0; r < kR; ++r) acc[j][r] = _mm256_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      if (b0 + j < blocks) {
        AddColumnBlock<F, kR, kVnni>(w, row_bytes, b0 + j, x, xs, start, acc[j]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    const __m256 a[8] = {acc[0][r], acc[1][r], acc[2][r], acc[3][r],
                         acc[4][r], acc[5][r], acc[6][r], acc[7][r]};
    total[r] = TotalOfAccumulators(a);
  }
}

// Weight rows multiplied at once by ColumnsOf: each quad of x loaded once for both, where the
// target has 32 vector registers for their 8 accumulators each (AVX-512). Tuned for speed only.
constexpr int64_t kPairRows = HWY_TARGET <= HWY_AVX3 ? 2 : 1;

// out[t, m] for every row t of x and m in [m_begin, m_end) (QuantLinearRows), with the
// weights of F (signed levels, 32 per block) and xq stored by columns: weight rows kPairRows at a
// time, each pair multiplied into every tile of x while it stays in L1. With tiles of x the next
// pair is prefetched: two rows read side by side hid the stream from the hardware's prefetcher
// (the 41 MB Q8_0 lm_head of m1-130m at T = 8 took 1.8x as long without). A single row of x
// reads the pair's rows one after the other and is left to the hardware: prefetching the next
// pair made the 130M shapes' batch-1 decode slower, and the byte kernels' kPrefetchRowsAhead
// made m1-2.8b's Q8_0 batch-1 decode 7.9-8.8 tokens/s against 11.1-11.5 without (Zen 4);
// except where StreamPrefetchBytes says otherwise (Intel).
template <class F, bool kVnni>
void ColumnsOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
  constexpr int64_t B = F::kElements;
  const int64_t T = p.rows, K = p.in_features, blocks = K / B, row_bytes = blocks * F::kBytes;
  const uint8_t* weight = static_cast<const uint8_t*>(p.weight);  // (M, row_bytes)
  const int64_t ahead = StreamPrefetchBytes();
  const auto put = [&](int64_t t, int64_t m, float total) {
    p.out[t * p.out_stride_row + m] = p.bias != nullptr ? total + p.bias[m] : total;
  };
  for (int64_t m = m_begin; m < m_end; m += kPairRows) {
    const int64_t pair = std::min(kPairRows, m_end - m);
    const uint8_t* w = weight + m * row_bytes;
    if (T > 1) {
      PrefetchLines(w + pair * row_bytes, std::min(kPairRows, m_end - m - pair) * row_bytes);
    } else if (ahead != 0) {
      PrefetchLines(w + ahead, pair * row_bytes);
    }
    for (int64_t t0 = 0; t0 < T; t0 += xq.tile) {
      if (!xq.InColumnTile(t0)) {
        for (int64_t t = t0; t < std::min(T, t0 + xq.tile); ++t) {
          const int8_t* x = xq.q8.data() + xq.BlockOffset(t, 0);  // (K)
          const float* xs = xq.scale.data() + t * blocks;         // (blocks)
          const int32_t* start = xq.start.data() + t * blocks;    // (blocks)
          for (int64_t r = 0; r < pair; ++r) {
            put(t, m + r, RowTotal<F, kVnni>(w + r * row_bytes, blocks, x, xs, start));
          }
        }
        continue;
      }
      const int8_t* x = xq.q8.data() + t0 * K;               // (blocks, 8, 8, 4)
      const float* xs = xq.scale.data() + t0 * blocks;       // (blocks, 8)
      const int32_t* start = xq.start.data() + t0 * blocks;  // (blocks, 8)
      alignas(32) float totals[kPairRows][8];
      __m256 total[kPairRows];
      if (pair == kPairRows) {
        ColumnTotals<F, kPairRows, kVnni>(w, row_bytes, blocks, x, xs, start, total);
      } else {
        ColumnTotals<F, 1, kVnni>(w, row_bytes, blocks, x, xs, start, total);
      }
      for (int64_t r = 0; r < pair; ++r) {
        _mm256_store_ps(totals[r], total[r]);
        for (int64_t t = t0; t < std::min(T, t0 + 8); ++t) put(t, m + r, totals[r][t - t0]);
      }
    }
  }
}

// Quantized row t's block b (levels (B), its scale and start) stored into its column tile: each
// quad of 4 levels at the row's place among the tile's 8.
HWY_INLINE void StoreColumnBlock(QuantizedRows* xq, int64_t t, int64_t b, const int8_t* levels,
                                 float scale, int32_t start) {
  const int64_t t0 = xq->TileStart(t), blocks = xq->cols / xq->block, r = t - t0;
  int8_t* tile = xq->q8.data() + t0 * xq->cols + b * 8 * xq->block;  // (8 quads, 8 rows, 4)
  for (int q = 0; q < 8; ++q) std::memcpy(tile + 32 * q + 4 * r, levels + 4 * q, 4);
  xq->scale[t0 * blocks + 8 * b + r] = scale;
  xq->start[t0 * blocks + 8 * b + r] = start;
}

}  // namespace i8
}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#endif  // SSMKIT_QUANT_DOT_BYTES

#endif  // include guard

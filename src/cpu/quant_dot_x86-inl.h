// The 8-bit products of quant_linear.cpp on x86 (Highway's AVX2 and AVX-512 targets): each
// block of a llama.cpp quantized weight (core/quant.hpp) times int8 levels of x, as llama.cpp's
// AVX2 kernels do it, since Highway 1.0.3 has no 8-bit multiply-add. Dimension legend: T rows of
// x, K input features, B elements per weight block (32 or 256).
//
// A chunk of 32 weights is unpacked to 32 bytes and multiplied by 32 levels of x with
// vpmaddubsw (u8 x s8, adjacent products summed into 16 int16 lanes), then vpmaddwd widens the
// pairs to 8 int32 lanes, multiplied by the sub-block scale of the K-quants (1 for Q8_0 / Q4_0).
// vpmaddubsw saturates its int16 sums, which no block reaches with |q| <= 127 in x: unsigned
// levels (Q4_K, Q5_K, Q6_K's q before its offset 32: at most 63) give at most 2 * 63 * 127 =
// 16002; the signed ones (Q8_0, Q4_0 - 8) go in as |w| and x with w's sign (vpsignb), at most
// 2 * 128 * 127 = 32512. The offsets and mins are taken off with the sums of 16 levels of x kept
// with them: Q6_K's 32 * sc_j * S_j over its sub-blocks of 16, Q4_K / Q5_K's m_j * S_j over
// their sub-blocks of 32, both a vpmaddwd per block and row. A block's int32 sums stay below
// 2^26 and are converted to f32 once per block.
//
// Per 32 weights and row of x this is 3 operations (4 for Q8_0 / Q4_0: the sign), against the
// 16-bit path's 4 (two vpmaddwd, two adds); the 32-element formats add their block's f32
// conversion and scaling (3) per row. The vectors are 256 bits on AVX-512 too (a tile of up to 8
// rows of x in its 32 registers as in AVX2's 16, the f32 accumulators spilled there).
// A Highway "-inl.h": included once per target from quant_linear.cpp (foreach_target.h); it
// defines namespace i8 on the x86 targets with AVX2 and SSMKIT_QUANT_DOT_BYTES = 1 there, 0 on
// the others.
#if defined(SSMKIT_CPU_QUANT_DOT_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_QUANT_DOT_X86_INL_H_
#undef SSMKIT_CPU_QUANT_DOT_X86_INL_H_
#else
#define SSMKIT_CPU_QUANT_DOT_X86_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/quant.hpp"
#include "cpu/quant_linear.hpp"
#include "hwy/highway.h"

#undef SSMKIT_QUANT_DOT_BYTES
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define SSMKIT_QUANT_DOT_BYTES 1
#include <immintrin.h>
#else
#define SSMKIT_QUANT_DOT_BYTES 0
#endif

#if SSMKIT_QUANT_DOT_BYTES
HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace {
namespace i8 {

using Level = int8_t;  // QuantizedRows::q8

// Rows of x per tile: one int32 accumulator per row while a block is multiplied, beside the
// chunk of weights and its scale; the rows' f32 accumulators are touched once per block. Tuned
// for speed only.
constexpr int kTileRows = 8;

HWY_INLINE __m256i Load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

HWY_INLINE __m256i Bytes(int8_t value) { return _mm256_set1_epi8(value); }

// The f16 at p in all 8 lanes (F16C: the same f32 as F16ToF32).
HWY_INLINE __m256 BroadcastF16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(bits)));
}

// A weight format. A block of kElements is read in groups of kGroup elements: Prepare reads the
// block's scales once, GroupOf loads group g's bytes (once for all the nibbles and bits they
// hold), Chunk gives its elements [c, c + 32) as bytes (signed when kSigned, else unsigned) and
// ChunkScale the int16 multipliers of their pair sums; c is a constant of the unrolled loop over
// the group's chunks. BlockValue turns a row's int32 sums over the block into 8 f32 lanes whose
// total times x's block scale is the block's contribution, the offset or mins taken off with the
// block's 16 sums of x levels (kSums).

// Q8_0 and Q4_0: 32 signed levels, one f16 scale d.
template <class Block>
struct Signed32 {
  static constexpr int kElements = 32, kGroup = 32, kBytes = sizeof(Block);
  static constexpr bool kSigned = true, kSums = false;
  struct Scales {
    __m256 d;
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    return {BroadcastF16(b + offsetof(Block, d))};
  }
  using Group = __m256i;  // the 32 levels
  static HWY_INLINE __m256i Chunk(const Group& g, int) { return g; }
  static HWY_INLINE __m256i ChunkScale(const Group&, int) { return _mm256_set1_epi16(1); }
  static HWY_INLINE __m256 BlockValue(const Scales& s, __m256i sum, const int16_t*) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(sum), s.d);
  }
};

struct Q8_0 : Signed32<quant::BlockQ8_0> {
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales&, int) {
    return Load32(b + offsetof(quant::BlockQ8_0, qs));
  }
};

struct Q4_0 : Signed32<quant::BlockQ4_0> {
  // q - 8: elements 0-15 are the low nibbles of qs, 16-31 the high ones.
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales&, int) {
    const __m128i qs =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(quant::BlockQ4_0, qs)));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), Bytes(0xF));
    return _mm256_sub_epi8(nibbles, Bytes(8));
  }
};

// Q4_K and Q5_K: 8 sub-blocks of 32, 6-bit scales sc and mins m (quant::ScalesMinsK4).
template <class Block, bool kFifthBit>
struct K4K5 {
  static constexpr int kElements = quant::kSuperBlock, kGroup = 64, kBytes = sizeof(Block);
  static constexpr bool kSigned = false, kSums = true;
  struct Scales {
    __m256 d, dmin;
    uint64_t sc;   // byte j: sub-block j's scale
    __m256i mins;  // int16 lanes 2j, 2j + 1: m_j, for the sums of 16 of sub-block j
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    uint64_t sc, m;
    quant::ScalesMinsK4(b + offsetof(Block, scales), &sc, &m);
    const __m128i m_bytes = _mm_set_epi64x(0, static_cast<int64_t>(m));
    return {BroadcastF16(b + offsetof(Block, d)), BroadcastF16(b + offsetof(Block, dmin)), sc,
            _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m_bytes, m_bytes))};
  }
  // Group k: sub-blocks 2k and 2k + 1, the low and high nibbles of qs[32 k + l], their fifth
  // bits bits 2k and 2k + 1 of qh[l] (Q5_K).
  struct Group {
    __m256i low, high;        // the levels of sub-blocks 2k, 2k + 1
    __m256i sc_low, sc_high;  // their scales
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales& s, int g) {
    const int k = g / 64;
    const __m256i qs = Load32(b + offsetof(Block, qs) + 32 * k);
    Group group = {_mm256_and_si256(qs, Bytes(0xF)),
                   _mm256_and_si256(_mm256_srli_epi16(qs, 4), Bytes(0xF)),
                   _mm256_set1_epi16(static_cast<int16_t>((s.sc >> (16 * k)) & 0xff)),
                   _mm256_set1_epi16(static_cast<int16_t>((s.sc >> (16 * k + 8)) & 0xff))};
    if constexpr (kFifthBit) AddFifthBits(b + offsetof(Block, qh), k, &group);
    return group;
  }
  static HWY_INLINE __m256i Chunk(const Group& g, int c) { return c < 32 ? g.low : g.high; }
  static HWY_INLINE __m256i ChunkScale(const Group& g, int c) {
    return c < 32 ? g.sc_low : g.sc_high;
  }
  static HWY_INLINE __m256 BlockValue(const Scales& s, __m256i sum, const int16_t* sums) {
    const __m256i min_sum = _mm256_madd_epi16(s.mins, Load32(sums));
    return _mm256_fmsub_ps(_mm256_cvtepi32_ps(sum), s.d,
                           _mm256_mul_ps(_mm256_cvtepi32_ps(min_sum), s.dmin));
  }

 private:
  // Bits 2k and 2k + 1 of each byte of qh (32) as bit 4 of the low and high levels. The 16-bit
  // shifts carry bits across the bytes of a lane only into the bits the masks drop.
  static HWY_INLINE void AddFifthBits(const uint8_t* qh, int k, Group* g) {
    const __m256i bits = _mm256_srl_epi16(Load32(qh), _mm_cvtsi32_si128(2 * k));
    g->low = _mm256_or_si256(g->low, _mm256_and_si256(_mm256_slli_epi16(bits, 4), Bytes(0x10)));
    g->high = _mm256_or_si256(g->high, _mm256_and_si256(_mm256_slli_epi16(bits, 3), Bytes(0x10)));
  }
};
using Q4_K = K4K5<quant::BlockQ4_K, false>;
using Q5_K = K4K5<quant::BlockQ5_K, true>;

// Q6_K: 16 sub-blocks of 16, int8 scales, q in [0, 63] multiplied as it is stored; the offset
// 32 comes off in BlockValue: 32 sc_j times the sum of x's levels over sub-block j.
struct Q6_K {
  static constexpr int kElements = quant::kSuperBlock, kGroup = 128,
                       kBytes = sizeof(quant::BlockQ6_K);
  static constexpr bool kSigned = false, kSums = true;
  struct Scales {
    __m256 d;
    __m256i offset;  // int16 lane j: 32 sc_j
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    const __m128i sc =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(quant::BlockQ6_K, scales)));
    return {BroadcastF16(b + offsetof(quant::BlockQ6_K, d)),
            _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5)};
  }
  // Group h: elements 128 h + 32 r + l, r < 4, l < 32: the low (r < 2) or high nibble of
  // ql[64 h + 32 (r % 2) + l], bits 2r, 2r + 1 of qh[32 h + l] above it.
  struct Group {
    __m256i ql[2];  // ql[64 h + 32 i ...]
    __m256i qh;
    __m128i sc;  // bytes 0-7: the scales of the group's 8 sub-blocks
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales&, int g) {
    const int h = g / 128;
    const uint8_t* ql = b + offsetof(quant::BlockQ6_K, ql) + 64 * h;
    return {{Load32(ql), Load32(ql + 32)},
            Load32(b + offsetof(quant::BlockQ6_K, qh) + 32 * h),
            _mm_loadl_epi64(
                reinterpret_cast<const __m128i*>(b + offsetof(quant::BlockQ6_K, scales) + 8 * h))};
  }
  static HWY_INLINE __m256i Chunk(const Group& g, int c) {
    const int r = c / 32;
    const __m256i low = g.ql[r % 2];
    const __m256i nibble = _mm256_and_si256(r < 2 ? low : _mm256_srli_epi16(low, 4), Bytes(0xF));
    return _mm256_or_si256(nibble, _mm256_and_si256(HighPairAtBit4(g.qh, r), Bytes(0x30)));
  }
  // Sub-block 2r of the group's in the low 8 lanes (elements 0-15 of the chunk), 2r + 1 in the
  // high 8.
  static HWY_INLINE __m256i ChunkScale(const Group& g, int c) {
    const int64_t r = c / 32, repeat = 0x0101010101010101;
    const __m128i pick = _mm_set_epi64x((2 * r + 1) * repeat, 2 * r * repeat);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(g.sc, pick));
  }
  static HWY_INLINE __m256 BlockValue(const Scales& s, __m256i sum, const int16_t* sums) {
    const __m256i offset = _mm256_madd_epi16(s.offset, Load32(sums));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum, offset)), s.d);
  }

 private:
  // Bits 2r, 2r + 1 of each byte moved to bits 4, 5 (the mask drops what crosses bytes).
  static HWY_INLINE __m256i HighPairAtBit4(__m256i qh, int r) {
    switch (r) {
      case 0:
        return _mm256_slli_epi16(qh, 4);
      case 1:
        return _mm256_slli_epi16(qh, 2);
      case 2:
        return qh;
      default:
        return _mm256_srli_epi16(qh, 2);
    }
  }
};

// Rows [t0, t0 + kT) of x times weight row w's blocks [b0, b1), added into acc (kT, 8): the f32
// accumulators of those rows for this weight row, kept in memory between spans. The mins and
// offsets are in acc too: min_total (the 16-bit kernels') stays as it is.
template <class F, int kT>
HWY_INLINE void DotSpan(const QuantizedRows& xq, const uint8_t* HWY_RESTRICT w, int64_t b0,
                        int64_t b1, int64_t t0, float* HWY_RESTRICT acc, float* /*min_total*/) {
  const int64_t K = xq.cols, blocks = K / F::kElements;
  const int8_t* x[kT];      // (K) each
  const float* xs[kT];      // (blocks) each
  const int16_t* xsum[kT];  // (K / 16) each
  __m256 a[kT];
  for (int t = 0; t < kT; ++t) {
    x[t] = xq.q8.data() + (t0 + t) * K;
    xs[t] = xq.scale.data() + (t0 + t) * blocks;
    xsum[t] = F::kSums ? xq.sums.data() + (t0 + t) * (K / 16) : nullptr;
    a[t] = _mm256_loadu_ps(acc + 8 * t);
  }
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* block = w + b * F::kBytes;
    const typename F::Scales s = F::Prepare(block);
    __m256i sum[kT];
    for (int t = 0; t < kT; ++t) sum[t] = _mm256_setzero_si256();
    for (int g = 0; g < F::kElements; g += F::kGroup) {
      const typename F::Group group = F::GroupOf(block, s, g);
#pragma GCC unroll 4
      for (int c = 0; c < F::kGroup; c += 32) {
        const __m256i levels = F::Chunk(group, c);
        const __m256i u = F::kSigned ? _mm256_abs_epi8(levels) : levels;  // the u8 operand
        const __m256i scale = F::ChunkScale(group, c);
        for (int t = 0; t < kT; ++t) {
          __m256i xv = Load32(x[t] + b * F::kElements + g + c);
          if constexpr (F::kSigned) xv = _mm256_sign_epi8(xv, levels);
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), scale));
        }
      }
    }
    for (int t = 0; t < kT; ++t) {
      const int16_t* block_sums = F::kSums ? xsum[t] + b * (F::kElements / 16) : nullptr;
      a[t] = _mm256_fmadd_ps(F::BlockValue(s, sum[t], block_sums), _mm256_broadcast_ss(xs[t] + b),
                             a[t]);
    }
  }
  for (int t = 0; t < kT; ++t) _mm256_storeu_ps(acc + 8 * t, a[t]);
}

}  // namespace i8
}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#endif  // SSMKIT_QUANT_DOT_BYTES

#endif  // include guard

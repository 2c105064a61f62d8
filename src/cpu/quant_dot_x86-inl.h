// The 8-bit products of quant_linear.cpp on x86 (Highway's AVX2 and AVX-512 targets): each
// block of a llama.cpp quantized weight (core/quant.hpp) times int8 levels of x, in the manner of
// llama.cpp's AVX2 kernels, since Highway 1.0.3 has no 8-bit multiply-add. Dimension legend: T
// rows of x, K input features, B elements per weight block (32 or 256).
//
// Weights are unpacked to bytes, 32 at a time, and multiplied by 32 levels of x with vpmaddubsw
// (u8 x s8, adjacent products summed into 16 int16 lanes); vpmaddwd then widens to int32,
// multiplying by the sub-block scales of the K-quants (by 1 for Q4_1 / Q5_1). On an AVX-512 CPU
// with VNNI (kVnni) vpdpbusd sums 4 byte products straight into int32 and vpdpwssd takes the
// scales' vpmaddwd + vpaddd: the same sums, one instruction fewer. vpmaddubsw saturates its
// int16 sums, so every bound below keeps |x's levels| <= 127:
// - Q4_1 and Q5_1 (unsigned levels, at most 31) multiply x as it is; their min m adds m times
//   the sum of the block's x levels. The signed formats Q8_0, Q4_0 and Q5_0 have their own
//   kernels (quant_columns_x86-inl.h); their levels are defined here.
// - The K-quants' levels are unsigned (Q4_K / Q5_K's q, Q6_K's q before its offset 32, at most
//   63). Q6_K, and Q4_K / Q5_K without VNNI: two chunks of 32 elements (two sub-blocks of Q4_K /
//   Q5_K, four of Q6_K) go in interleaved in 16-bit units, the pairs of sub-block A in the even
//   int16 lanes, B in the odd ones, and their two vpmaddubsw sums are added in int16 (at most
//   4 * 63 * 127 = 32004) before one vpmaddwd by (scale A, scale B): 3 multiplies per 64 weights
//   and row instead of 4; x's levels are stored in the same interleaved order (ArrangeLevels).
//   Q6_K's offset (32 sc_j S_j over its sub-blocks of 16) and Q4_K / Q5_K's mins (m_j S_j over
//   their sub-blocks of 32) come off per block with the sums of 16 levels of x kept with them, a
//   vpmaddwd each. With VNNI, Q4_K and Q5_K go lane-mapped (K4K5LaneMapped): every vector of a
//   block holds each sub-block in one fixed 32-bit lane, so a row's whole block sums into one
//   vector, a vpdpbusd per 32 weights, scaled once by the f32 d sc_l of its lanes; their mins
//   come off with x's scaled sums of levels over each sub-block of 32. A block's int32 sums stay
//   below 2^26 and are converted to f32 once.
//
// The vectors are 256 bits on AVX-512 too (a tile of 8 rows of x fits AVX2's 16 registers).
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
#include <type_traits>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "cpu/quant_linear.hpp"
#include "hwy/highway.h"

#undef SSMKIT_QUANT_DOT_BYTES
#undef SSMKIT_QUANT_DOT_VNNI
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define SSMKIT_QUANT_DOT_BYTES 1
#include <immintrin.h>
#else
#define SSMKIT_QUANT_DOT_BYTES 0
#endif
// The AVX-512 targets also have the VNNI kernels (kVnni), run where the CPU has VNNI.
#if SSMKIT_QUANT_DOT_BYTES && HWY_TARGET <= HWY_AVX3
#define SSMKIT_QUANT_DOT_VNNI 1
#else
#define SSMKIT_QUANT_DOT_VNNI 0
#endif

#if SSMKIT_QUANT_DOT_BYTES
HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace {
namespace i8 {

using Level = int8_t;  // QuantizedRows::q8

// Rows of x per tile: one int32 accumulator per row while a block is multiplied, beside a pair
// of weight chunks and their scales; the rows' f32 accumulators are touched once per block.
// Tuned for speed only.
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

// 64 elements as the K-quant kernels multiply them: for a = elements [0, 32) and b = [32, 64),
// 16-bit units a0 b0 a1 b1 a2 b2 a3 b3 a8 b8 .. a11 b11 (bytes 0-31: vpunpcklwd, which works
// within 128-bit halves) then a4 b4 .. a7 b7 a12 b12 .. a15 b15 (bytes 32-63: vpunpckhwd).
struct Interleaved {
  __m256i low, high;
};
HWY_INLINE Interleaved Interleave(__m256i a, __m256i b) {
  return {_mm256_unpacklo_epi16(a, b), _mm256_unpackhi_epi16(a, b)};
}

// x's levels of one row (K, a multiple of 256) in the K-quants' order: each 64 Interleaved.
HWY_INLINE void ArrangeLevels(int8_t* row, int64_t K) {
  for (int64_t k = 0; k < K; k += 64) {
    const Interleaved v = Interleave(Load32(row + k), Load32(row + k + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + k), v.low);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + k + 32), v.high);
  }
}

// x's levels of one row (K, a multiple of 256) in the order of a lane-mapped block's levels
// (K4K5LaneMapped::Levels): vector r = 2q + p of each block, lane l, the 4 levels of sub-block l
// from element 4 (2q + (l % 2 ^ p)).
HWY_INLINE void ArrangeLaneMapped(int8_t* row, int64_t K) {
  for (int64_t k = 0; k < K; k += 256) {
    int8_t natural[256];
    std::memcpy(natural, row + k, sizeof natural);
    for (int r = 0; r < 8; ++r) {
      for (int l = 0; l < 8; ++l) {
        const int word = 2 * (r / 2) + ((l % 2) ^ (r % 2));
        std::memcpy(row + k + 32 * r + 4 * l, natural + 32 * l + 4 * word, 4);
      }
    }
  }
}

// A weight format. Prepare reads a block's scales once; BlockValue turns a row's int32 sums over
// the block into 8 f32 lanes whose total times x's block scale is the block's contribution, the
// offset or mins taken off with the block's sums of 16 x levels (kSums).
//
// The formats of 32 elements (kPaired false): Levels gives the block's 32 levels as bytes,
// signed (Q8_0, Q4_0, Q5_0: their products are quant_columns_x86-inl.h's) or unsigned (Q4_1,
// Q5_1, whose min m adds m times the sum of x's levels over the block).
template <class Block, bool kMin>
struct Format32 {
  static constexpr int kElements = 32, kBytes = sizeof(Block);
  static constexpr bool kPaired = false, kLaneMapped = false, kSums = kMin;
  static constexpr size_t kScaleOffset = offsetof(Block, d);  // the block's f16 d
  struct Scales {
    __m256 d;
    float m;
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    Scales s{BroadcastF16(b + kScaleOffset), 0.0f};
    if constexpr (kMin) {
      uint16_t bits;
      std::memcpy(&bits, b + offsetof(Block, m), sizeof bits);
      s.m = F16ToF32(bits);
    }
    return s;
  }
  // The formats with a min (kSums).
  static HWY_INLINE __m256 BlockValue(const Scales& s, __m256i sum, const int16_t* sums) {
    const float min_term = s.m * static_cast<float>(sums[0] + sums[1]);  // m S in lane 0
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), s.d,
                           _mm256_setr_ps(min_term, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f));
  }
};

struct Q8_0 : Format32<quant::BlockQ8_0, false> {
  static HWY_INLINE __m256i Levels(const uint8_t* b) {
    return Load32(b + offsetof(quant::BlockQ8_0, qs));
  }
  // The levels plus kUnsignedOffset as unsigned bytes (the VNNI kernels, UnsignedLevelOffset).
  static constexpr int32_t kUnsignedOffset = 128;
  static constexpr bool kPairedRow = false;  // PairedLoneRows
  static HWY_INLINE __m256i UnsignedLevels(const uint8_t* b) {
    return _mm256_xor_si256(Levels(b), Bytes(-128));
  }
};

// Bytes 0-15 the low nibbles of qs (elements 0-15), bytes 16-31 the high ones.
HWY_INLINE __m256i Nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), Bytes(0xF));
}

// The nibbles (bytes < 16) with 0x10 added where their fifth bit is set: byte j is set when
// bit j % 8 of byte byte_of[j] of `words` (within its 128-bit lane) is. On AVX-512 a bit test
// into a mask and a masked add, elsewhere and, compare, and, or.
HWY_INLINE __m256i AddFifthBits(__m256i nibbles, __m256i words, __m256i byte_of) {
  const __m256i bytes = _mm256_shuffle_epi8(words, byte_of);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
#if HWY_TARGET <= HWY_AVX3
  return _mm256_mask_add_epi8(nibbles, _mm256_test_epi8_mask(bytes, bit), nibbles, Bytes(0x10));
#else
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_or_si256(nibbles, _mm256_and_si256(set, Bytes(0x10)));
#endif
}

HWY_INLINE uint32_t LoadWord(const uint8_t* p) {
  uint32_t word;
  std::memcpy(&word, p, sizeof word);
  return word;
}

// Q4_0, Q4_1, Q5_0 and Q5_1: the nibbles, the fifth bits from qh, minus kOffset.
template <class Block, bool kFifthBit, int kOffset, bool kMin>
struct Q32 : Format32<Block, kMin> {
  static HWY_INLINE __m256i Levels(const uint8_t* b) {
    const __m256i q = UnsignedLevels(b);
    return kOffset != 0 ? _mm256_sub_epi8(q, Bytes(kOffset)) : q;
  }
  // The levels as stored, before the offset: the levels plus kUnsignedOffset.
  static constexpr int32_t kUnsignedOffset = kOffset;
  static HWY_INLINE __m256i UnsignedLevels(const uint8_t* b) {
    const __m256i q = Nibbles(b + offsetof(Block, qs));
    if constexpr (kFifthBit) {
      // Elements 0-15 take qh's bytes 0 and 1, elements 16-31 bytes 2 and 3.
      const uint32_t qh = LoadWord(b + offsetof(Block, qh));
      return AddFifthBits(
          q, _mm256_set1_epi32(static_cast<int32_t>(qh)),
          _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    } else {
      return q;
    }
  }
  // Two blocks a, b as PairedLoneRows orders them: low a 0-15, b 0-15, high a 16-31, b 16-31.
  static constexpr bool kPairedRow = !kMin;
  static HWY_INLINE Interleaved UnsignedPair(const uint8_t* a, const uint8_t* b) {
    const __m256i qs =
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(b + offsetof(Block, qs)),
                            reinterpret_cast<const __m128i*>(a + offsetof(Block, qs)));
    const __m256i low = _mm256_and_si256(qs, Bytes(0xF));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qs, 4), Bytes(0xF));
    if constexpr (kFifthBit) {
      // One broadcast of both qh words (bytes 0-3 of each qword a's, 4-7 b's): the low half's
      // lanes take a's then b's bytes 0 and 1, the high half's their bytes 2 and 3.
      const uint64_t qh = LoadWord(a + offsetof(Block, qh)) |
                          static_cast<uint64_t>(LoadWord(b + offsetof(Block, qh))) << 32;
      const __m256i words = _mm256_set1_epi64x(static_cast<int64_t>(qh));
      return {AddFifthBits(low, words,
                           _mm256_setr_epi64x(0, 0x0101010101010101, 0x0404040404040404,
                                              0x0505050505050505)),
              AddFifthBits(high, words,
                           _mm256_setr_epi64x(0x0202020202020202, 0x0303030303030303,
                                              0x0606060606060606, 0x0707070707070707))};
    } else {
      return {low, high};
    }
  }
};
using Q4_0 = Q32<quant::BlockQ4_0, false, 8, false>;
using Q4_1 = Q32<quant::BlockQ4_1, false, 0, true>;
using Q5_0 = Q32<quant::BlockQ5_0, true, 16, false>;
using Q5_1 = Q32<quant::BlockQ5_1, true, 0, true>;
static_assert(Q8_0::kUnsignedOffset == UnsignedLevelOffset(DType::kQ8_0) &&
              Q4_0::kUnsignedOffset == UnsignedLevelOffset(DType::kQ4_0) &&
              Q5_0::kUnsignedOffset == UnsignedLevelOffset(DType::kQ5_0));
static_assert(Q8_0::kPairedRow == PairedLoneRows(DType::kQ8_0) &&
              Q4_0::kPairedRow == PairedLoneRows(DType::kQ4_0) &&
              Q5_0::kPairedRow == PairedLoneRows(DType::kQ5_0));

// Q6_K: a block of 256 is read in groups of kGroup elements, GroupOf loading group g's
// bytes once for all the nibbles and bits they hold; PairOf gives the group's elements
// [c, c + 64) Interleaved as unsigned bytes, with the int16 multipliers of the summed pairs.
struct Pair {
  Interleaved levels;
  __m256i scales;
};

// The 6-bit scales and mins of a Q4_K / Q5_K block from its 12 scale bytes s (at p, the 4 bytes
// after them in the block read too and dropped): bytes 0-7 sc_j, 8-15 m_j, as
// quant::ScalesMinsK4 unpacks them (j < 4: s[j] & 63, s[j + 4] & 63; j >= 4: the nibbles of
// s[j + 4] below the top two bits of s[j - 4], s[j]), in vector registers: a dozen operations
// per block instead of the scalar unpacking's two dozen and the moves into vectors.
HWY_INLINE __m128i ScalesMinsK4Bytes(const uint8_t* p) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  // s[0..3], s[8..11], s[4..7], s[8..11]: the low six bits, or the nibble, of each output byte.
  const __m128i a =
      _mm_shuffle_epi8(s, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i low6 =
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 0, 0, 0, 0, 63, 63, 63, 63, 0, 0, 0, 0));
  const __m128i nibbles = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(0, 0, 0, 0, 15, 15, 15, 15, 0, 0, 0, 0, 0, 0, 0, 0)),
      _mm_and_si128(_mm_srli_epi16(a, 4),
                    _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
  // The top two bits of s[0..3] (s[4..7]) at bits 4-5 of bytes 4-7 (12-15); the 16-bit shift
  // moves bits across bytes only into the bits the mask drops.
  const __m128i tops =
      _mm_shuffle_epi8(s, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i high2 = _mm_and_si128(_mm_srli_epi16(tops, 2), _mm_set1_epi8(0x30));
  return _mm_or_si128(low6, _mm_or_si128(nibbles, high2));
}

// Q4_K and Q5_K for the VNNI kernels: 8 sub-blocks of 32, 6-bit scales sc and mins m
// (ScalesMinsK4Bytes), read lane-mapped (kLaneMapped): Levels gives the block's 256 levels as 8
// vectors of unsigned bytes whose 32-bit lane l always holds 4 levels of sub-block l, so that each
// row's 8 products of a block go into one vector of int32 sums, lane l that of sub-block l, scaled
// once per block by d sc_l in f32 (AddBlock) instead of by sc_j per pair of sub-blocks in int16.
// x's levels are stored in the same order (ArrangeLaneMapped), and the mins multiply x's scale
// times its sum of levels over each sub-block, formed once per row when x is quantized
// (QuantizedRows::scaled_sums): one multiply-add per row and block.
template <class Block, bool kFifthBit>
struct K4K5LaneMapped {
  using BlockLayout = Block;  // quant_amx_x86-inl.h reads its qs and qh
  static constexpr bool kHasFifthBit = kFifthBit;
  static constexpr int kElements = quant::kSuperBlock, kBytes = sizeof(Block);
  static constexpr bool kPaired = false, kLaneMapped = true, kSums = true;
  struct Scales {
    // Lane l: d sc_l and dmin m_l, both exact (11 by 6 significant bits).
    __m256 dsc, dmin_m;
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    const __m128i sc_m = ScalesMinsK4Bytes(b + offsetof(Block, scales));
    Scales s;  // not value-initialized: that zeroed the whole struct per block (rep stos)
    s.dsc = _mm256_mul_ps(BroadcastF16(b + offsetof(Block, d)),
                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc_m)));
    s.dmin_m = _mm256_mul_ps(BroadcastF16(b + offsetof(Block, dmin)),
                             _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sc_m, 8))));
    return s;
  }
  // acc plus the block's value for one row: its sums (lane l: sub-block l's) times d sc_l times
  // x's scale, less dmin m_l times scaled_sums (8: x's scale times its sum of levels over
  // sub-block l).
  static HWY_INLINE __m256 AddBlock(const Scales& s, __m256i sum, float x_scale,
                                    const float* scaled_sums, __m256 acc) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(s.dsc, _mm256_set1_ps(x_scale)),
                          acc);
    return _mm256_fnmadd_ps(s.dmin_m, _mm256_loadu_ps(scaled_sums), acc);
  }
  // r[2q + p], lane l = 2c + h (chunk c = l / 2 of qs, 32 bytes: sub-blocks 2c and 2c + 1 in its
  // low and high nibbles; h = l % 2): nibble h of the 4 bytes of chunk c's 32-bit word
  // 2q + (h ^ p), so sub-block l's elements 4 (2q + (h ^ p)) .. + 3. Q5_K's fifth bit of element
  // i of sub-block l is bit l of qh[i].
  static HWY_INLINE void Levels(const uint8_t* b, __m256i* r) {
    const uint8_t* qs = b + offsetof(Block, qs);
    const __m256i c0 = Load32(qs), c1 = Load32(qs + 32), c2 = Load32(qs + 64), c3 = Load32(qs + 96);
    const __m256i low01 = _mm256_unpacklo_epi64(c0, c1), high01 = _mm256_unpackhi_epi64(c0, c1);
    const __m256i low23 = _mm256_unpacklo_epi64(c2, c3), high23 = _mm256_unpackhi_epi64(c2, c3);
    // words[q], lane 2c + h: chunk c's word 2q + h.
    const __m256i words[4] = {_mm256_permute2x128_si256(low01, low23, 0x20),
                              _mm256_permute2x128_si256(high01, high23, 0x20),
                              _mm256_permute2x128_si256(low01, low23, 0x31),
                              _mm256_permute2x128_si256(high01, high23, 0x31)};
    const __m256i nibble_shift = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256i swapped = _mm256_shuffle_epi32(words[q], 0xB1);  // words 1 0 3 2 ...
      r[2 * q] = _mm256_and_si256(_mm256_srlv_epi32(words[q], nibble_shift), Bytes(0xF));
      r[2 * q + 1] = _mm256_and_si256(_mm256_srlv_epi32(swapped, nibble_shift), Bytes(0xF));
      if constexpr (kFifthBit) {
        // qh's words 2q, 2q + 1 in every pair of lanes (p = 0), swapped (p = 1).
        uint64_t pair;
        std::memcpy(&pair, b + offsetof(Block, qh) + 8 * q, sizeof pair);
        const __m256i qh = _mm256_set1_epi64x(static_cast<int64_t>(pair));
        r[2 * q] = AddLaneBit(r[2 * q], qh);
        r[2 * q + 1] = AddLaneBit(r[2 * q + 1], _mm256_shuffle_epi32(qh, 0xB1));
      }
    }
  }

 private:
  // levels plus 0x10 in the bytes of lane l whose qh byte has bit l set (a VNNI kernel's: an
  // AVX-512 target).
  static HWY_INLINE __m256i AddLaneBit(__m256i levels, __m256i qh) {
    static_assert(kFifthBit && HWY_TARGET <= HWY_AVX3);
    const __m256i bit_of_lane =
        _mm256_setr_epi32(0x01010101, 0x02020202, 0x04040404, 0x08080808, 0x10101010, 0x20202020,
                          0x40404040, static_cast<int32_t>(0x80808080));
    return _mm256_mask_add_epi8(levels, _mm256_test_epi8_mask(qh, bit_of_lane), levels,
                                Bytes(0x10));
  }
};

// Q4_K and Q5_K for the kernels without VNNI, in pairs of sub-blocks (kPaired). (Lane-mapped,
// AVX2's one-row products ran 7-10% slower: AVX2 has no byte bit test for Q5_K's fifth bits,
// and vpmaddubsw's products were not the bound there.)
template <class Block, bool kFifthBit>
struct K4K5Paired {
  static constexpr int kElements = quant::kSuperBlock, kGroup = 64, kBytes = sizeof(Block);
  static constexpr bool kPaired = true, kLaneMapped = false, kSums = true;
  struct Scales {
    __m256 d, dmin;
    __m256i mins;      // int16 lanes 2j, 2j + 1: m_j, for the sums of 16 of sub-block j
    __m128i sc_pairs;  // int32 lane k: sc_2k, sc_2k+1 as int16
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    const __m128i sc_m = ScalesMinsK4Bytes(b + offsetof(Block, scales));
    const __m128i m_twice = _mm_shuffle_epi8(
        sc_m, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
    Scales s;  // not value-initialized: that zeroed the whole struct per block (rep stos)
    s.d = BroadcastF16(b + offsetof(Block, d));
    s.dmin = BroadcastF16(b + offsetof(Block, dmin));
    s.mins = _mm256_cvtepu8_epi16(m_twice);
    s.sc_pairs = _mm_cvtepu8_epi16(sc_m);
    return s;
  }
  // Group k: sub-blocks 2k and 2k + 1, the low and high nibbles of qs[32 k + l], their fifth
  // bits bits 2k and 2k + 1 of qh[l] (Q5_K).
  using Group = Pair;
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales& s, int g) {
    const int k = g / 64;
    const __m256i qs = Load32(b + offsetof(Block, qs) + 32 * k);
    __m256i low = _mm256_and_si256(qs, Bytes(0xF));
    __m256i high = _mm256_and_si256(_mm256_srli_epi16(qs, 4), Bytes(0xF));
    if constexpr (kFifthBit) {
      // Bits 2k and 2k + 1 of each byte of qh as bit 4 of the low and high levels. The 16-bit
      // shifts carry bits across the bytes of a lane only into the bits the masks drop.
      const __m256i bits =
          _mm256_srl_epi16(Load32(b + offsetof(Block, qh)), _mm_cvtsi32_si128(2 * k));
      low = _mm256_or_si256(low, _mm256_and_si256(_mm256_slli_epi16(bits, 4), Bytes(0x10)));
      high = _mm256_or_si256(high, _mm256_and_si256(_mm256_slli_epi16(bits, 3), Bytes(0x10)));
    }
    return {Interleave(low, high),
            _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(s.sc_pairs), _mm256_set1_epi32(k))};
  }
  static HWY_INLINE Pair PairOf(const Group& g, int) { return g; }
  static HWY_INLINE __m256 BlockValue(const Scales& s, __m256i sum, const int16_t* sums) {
    const __m256i min_sum = _mm256_madd_epi16(s.mins, Load32(sums));
    return _mm256_fmsub_ps(_mm256_cvtepi32_ps(sum), s.d,
                           _mm256_mul_ps(_mm256_cvtepi32_ps(min_sum), s.dmin));
  }
};
// The K-quants' formats of the kernels with VNNI (kVnni) or without.
template <bool kVnni>
using Q4_K = std::conditional_t<kVnni, K4K5LaneMapped<quant::BlockQ4_K, false>,
                                K4K5Paired<quant::BlockQ4_K, false>>;
template <bool kVnni>
using Q5_K = std::conditional_t<kVnni, K4K5LaneMapped<quant::BlockQ5_K, true>,
                                K4K5Paired<quant::BlockQ5_K, true>>;

// Q6_K: 16 sub-blocks of 16, int8 scales, q in [0, 63] multiplied as it is stored; the offset
// 32 comes off in BlockValue: 32 sc_j times the sum of x's levels over sub-block j.
struct Q6_K {
  static constexpr int kElements = quant::kSuperBlock, kGroup = 128,
                       kBytes = sizeof(quant::BlockQ6_K);
  static constexpr bool kPaired = true, kLaneMapped = false, kSums = true;
  struct Scales {
    __m256 d;
    __m256i offset;       // int16 lane j: 32 sc_j
    int64_t sc_quads[4];  // p: sc_4p, sc_4p+2, sc_4p+1, sc_4p+3 as int16
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    const __m128i sc =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(quant::BlockQ6_K, scales)));
    Scales s;  // not value-initialized: that zeroed the whole struct per block (rep stos)
    s.d = BroadcastF16(b + offsetof(quant::BlockQ6_K, d));
    s.offset = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5);
    const __m128i order = _mm_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(s.sc_quads),
                        _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, order)));
    return s;
  }
  // Group h: elements 128 h + 32 r + l, r < 4, l < 32: the low (r < 2) or high nibble of
  // ql[64 h + 32 (r % 2) + l], bits 2r, 2r + 1 of qh[32 h + l] above it.
  struct Group {
    __m256i ql[2];  // ql[64 h + 32 i ...]
    __m256i qh;
    const int64_t* sc_quads;  // (2): the group's
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales& s, int g) {
    const int h = g / 128;
    const uint8_t* ql = b + offsetof(quant::BlockQ6_K, ql) + 64 * h;
    return {{Load32(ql), Load32(ql + 32)},
            Load32(b + offsetof(quant::BlockQ6_K, qh) + 32 * h),
            s.sc_quads + 2 * h};
  }
  // Chunks r = c / 32 and r + 1: sub-blocks 2r and 2r + 2 of the group in the low 128 bits,
  // 2r + 1 and 2r + 3 in the high 128 bits.
  static HWY_INLINE Pair PairOf(const Group& g, int c) {
    const int r = c / 32;
    const __m256i half_index = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    return {Interleave(Chunk(g, r), Chunk(g, r + 1)),
            _mm256_permutevar8x32_epi32(_mm256_set1_epi64x(g.sc_quads[r / 2]), half_index)};
  }
  static HWY_INLINE __m256 BlockValue(const Scales& s, __m256i sum, const int16_t* sums) {
    const __m256i offset = _mm256_madd_epi16(s.offset, Load32(sums));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum, offset)), s.d);
  }

 private:
  static HWY_INLINE __m256i Chunk(const Group& g, int r) {
    const __m256i low = g.ql[r % 2];
    const __m256i nibble = _mm256_and_si256(r < 2 ? low : _mm256_srli_epi16(low, 4), Bytes(0xF));
    return _mm256_or_si256(nibble, _mm256_and_si256(HighPairAtBit4(g.qh, r), Bytes(0x30)));
  }
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

#if SSMKIT_QUANT_DOT_VNNI
// VNNI, as inline assembly: the target's attributes (Highway's AVX3) do not enable the
// intrinsics, and the CPU is checked at run time (QuantDotVnni). {evex}: the AVX-512 encoding,
// not AVX-VNNI's. acc plus the sums of 4 adjacent products of unsigned bytes u and signed
// bytes v (vpdpbusd), or of 2 adjacent int16 products a * b (vpdpwssd), in int32 lanes.
HWY_INLINE __m256i AddQuadProducts(__m256i acc, __m256i u, __m256i v) {
  __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(v));
  return acc;
}
// The same with v read from memory (32 bytes at v), the load folded into the instruction.
HWY_INLINE __m256i AddQuadProductsAt(__m256i acc, __m256i u, const int8_t* v) {
  __asm__("%{evex%} vpdpbusd %2, %1, %0"
          : "+v"(acc)
          : "v"(u), "m"(*reinterpret_cast<const __m256i*>(v)));
  return acc;
}
HWY_INLINE __m256i AddPairProducts(__m256i acc, __m256i a, __m256i b) {
  __asm__("%{evex%} vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif

// The int32 sums of 4 adjacent products of unsigned bytes u and signed bytes v, at most
// 2 * 32512 in magnitude here and in quant_columns_x86-inl.h. Without VNNI: vpmaddubsw (pairs,
// in int16: the bounds above keep them from saturating) then vpmaddwd by 1; with VNNI (kVnni),
// vpdpbusd, the same sums.
template <bool kVnni>
HWY_INLINE __m256i QuadSums(__m256i u, __m256i v) {
#if SSMKIT_QUANT_DOT_VNNI
  if constexpr (kVnni) return AddQuadProducts(_mm256_setzero_si256(), u, v);
#endif
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1));
}

// acc plus the int32 sums of adjacent pairs of int16 products a * b: vpmaddwd and vpaddd, or
// with VNNI vpdpwssd.
template <bool kVnni>
HWY_INLINE __m256i AddPairSums(__m256i acc, __m256i a, __m256i b) {
#if SSMKIT_QUANT_DOT_VNNI
  if constexpr (kVnni) return AddPairProducts(acc, a, b);
#endif
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

// sum[t] = the block's int32 sums with row t of x (x: (kT, kElements) levels), the unsigned
// formats of 32.
template <class F, int kT, bool kVnni>
HWY_INLINE void Block32Sums(const uint8_t* block, const int8_t* x, __m256i* sum) {
  const __m256i u = F::Levels(block);
  for (int t = 0; t < kT; ++t) sum[t] = QuadSums<kVnni>(u, Load32(x + 32 * t));
}

// sum[t] = a lane-mapped block's int32 sums with row t of x (x: (kT, kElements) levels in the
// block's order), lane l that of sub-block l: the 8 vectors of levels into one sum per row by
// vpdpbusd, vector by vector and row by row, so that consecutive products belong to different
// rows (each row's chain of dependent products interleaved with the others'), in two chains per
// row (even and odd vectors: half as long; 2-8% faster at one row). AVX-512 (VNNI): 32
// registers hold the 16 sums.
template <class F, int kT>
HWY_INLINE void LaneMappedSums(const uint8_t* block, const int8_t* x, __m256i* sum) {
#if SSMKIT_QUANT_DOT_VNNI
  __m256i levels[8], odd[kT];
  F::Levels(block, levels);
  for (int t = 0; t < kT; ++t) sum[t] = odd[t] = _mm256_setzero_si256();
  for (int i = 0; i < 8; i += 2) {
    for (int t = 0; t < kT; ++t) {
      sum[t] = AddQuadProductsAt(sum[t], levels[i], x + t * F::kElements + 32 * i);
      odd[t] = AddQuadProductsAt(odd[t], levels[i + 1], x + t * F::kElements + 32 * i + 32);
    }
  }
  for (int t = 0; t < kT; ++t) sum[t] = _mm256_add_epi32(sum[t], odd[t]);
#else
  static_assert(!F::kLaneMapped, "the lane-mapped formats are the VNNI kernels'");
#endif
}

// Group g of a Q6_K block times kT rows of x ((kT, kElements) levels), pair by pair of
// chunks, added into sum.
template <class F, int kT, bool kVnni>
HWY_INLINE void GroupSums(const uint8_t* block, const typename F::Scales& s, const int8_t* x, int g,
                          __m256i* sum) {
  const typename F::Group group = F::GroupOf(block, s, g);
#pragma GCC unroll 2
  for (int c = 0; c < F::kGroup; c += 64) {
    const Pair pair = F::PairOf(group, c);
    for (int t = 0; t < kT; ++t) {
      const int8_t* xt = x + t * F::kElements + g + c;
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(pair.levels.low, Load32(xt)),
                                         _mm256_maddubs_epi16(pair.levels.high, Load32(xt + 32)));
      sum[t] = AddPairSums<kVnni>(sum[t], p, pair.scales);
    }
  }
}

// The same for Q6_K, group by group.
template <class F, int kT, bool kVnni>
HWY_INLINE void PairedBlockSums(const uint8_t* block, const typename F::Scales& s, const int8_t* x,
                                __m256i* sum) {
  for (int t = 0; t < kT; ++t) sum[t] = _mm256_setzero_si256();
  if constexpr (kT <= 2) {
    // Unrolled: the groups' offsets and scale lanes become constants, a few registers each.
#pragma GCC unroll 4
    for (int g = 0; g < F::kElements; g += F::kGroup) GroupSums<F, kT, kVnni>(block, s, x, g, sum);
  } else {
    // Not unrolled: unrolled, the compiler reassociated the rows' sums over the block into
    // trees of partial products that spilled.
#pragma GCC unroll 1
    for (int g = 0; g < F::kElements; g += F::kGroup) GroupSums<F, kT, kVnni>(block, s, x, g, sum);
  }
}

// The tile of rows [t0, t0 + kT) of x (QuantizedRows' layout: block b's levels of the kT rows
// together, so each row is a constant offset from one pointer) times weight row w's blocks
// [b0, b1), added into acc (kT, 8): the f32 accumulators of those rows for this weight row,
// kept in memory between spans. The mins and offsets are in acc too: min_total (the 16-bit
// kernels') stays as it is. (Forming the 8 rows' scale products in one vector multiply, stored
// and broadcast back per row, was 7-15% slower than a multiply per row: the reloads wait on the
// store.)
template <class F, int kT, bool kVnni>
HWY_INLINE void DotSpan(const QuantizedRows& xq, const uint8_t* HWY_RESTRICT w, int64_t b0,
                        int64_t b1, int64_t t0, float* HWY_RESTRICT acc, float* /*min_total*/) {
  constexpr int64_t B = F::kElements;
  const int64_t K = xq.cols;
  const int8_t* x = xq.q8.data() + t0 * K;           // (blocks, kT, B)
  const float* xs = xq.scale.data() + t0 * (K / B);  // (blocks, kT)
  static_assert(F::kSums, "the signed formats of 32 go by quant_columns_x86-inl.h");
  const int16_t* xsum = xq.sums.data() + t0 * (K / 16);  // (blocks, kT, B / 16)
  const float* scaled_sums =
      F::kLaneMapped ? xq.scaled_sums.data() + t0 * (K / 32) : nullptr;  // (blocks, kT, B / 32)
  __m256 a[kT];
  for (int t = 0; t < kT; ++t) a[t] = _mm256_loadu_ps(acc + 8 * t);
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* block = w + b * F::kBytes;
    const typename F::Scales s = F::Prepare(block);
    const int8_t* xb = x + b * kT * B;  // (kT, B)
    __m256i sum[kT];
    if constexpr (F::kLaneMapped) {
      LaneMappedSums<F, kT>(block, xb, sum);
    } else if constexpr (!F::kPaired) {
      Block32Sums<F, kT, kVnni>(block, xb, sum);
    } else {
      PairedBlockSums<F, kT, kVnni>(block, s, xb, sum);
    }
    for (int t = 0; t < kT; ++t) {
      if constexpr (F::kLaneMapped) {
        a[t] = F::AddBlock(s, sum[t], xs[b * kT + t], scaled_sums + (b * kT + t) * 8, a[t]);
      } else {
        const int16_t* block_sums = xsum + (b * kT + t) * (B / 16);
        a[t] = _mm256_fmadd_ps(F::BlockValue(s, sum[t], block_sums),
                               _mm256_broadcast_ss(xs + b * kT + t), a[t]);
      }
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

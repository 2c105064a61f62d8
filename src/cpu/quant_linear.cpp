// CPU linear layer with a quantized weight (llama.cpp's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K; core/quant.hpp) for T <= kLinearGemvMaxRows rows of x:
// out[t, m] = sum_k x[t, k] W[m, k] + bias[m]. Dimension legend: T rows of x, K input features,
// M output features, B elements per weight block (32 or 256), N 16-bit lanes per vector (16 on
// AVX2 and AVX-512, 8 on EMU128).
//
// As GGML does, x is quantized once per call to 8-bit levels with one f32 scale per block of
// B (QuantizedRows), so each block's product is an exact integer sum:
//   out[t, m] = sum over blocks b of  d_w(b) * s_x(t, b) * sum_i w_i q_i   (-+ the min term)
// with w_i the block's integer weights, q_i the x levels. Two kernels compute the sums:
//
// - On x86 with AVX2 (Highway's AVX2 and AVX-512 targets), 8-bit products with raw intrinsics
//   (quant_dot_x86-inl.h, namespace i8): x's levels stored as int8, the weight's unpacked to
//   bytes, vpmaddubsw then vpmaddwd, 32 weights per instruction pair; the sub-block scales,
//   Q6_K's offset and the Q4_K / Q5_K mins applied per block as in llama.cpp's AVX2 kernels;
//   on an AVX-512 CPU with VNNI, vpdpbusd and vpdpwssd in their place (QuantDotVnni). The
//   signed formats of 32 (Q8_0, Q4_0, Q5_0) take the kernels by columns of
//   quant_columns_x86-inl.h instead, which share a block's f32 work among a tile's 8 rows and
//   sum every row in one order, with VNNI or without. On a CPU with AMX, Q8_0 at 2 rows or
//   more and Q4_K and Q5_K at kAmxMinRowsKQuant or more take its tile multiplies
//   (quant_amx_x86-inl.h), with the same bits.
// - Elsewhere (namespace i16, below), 16-bit products with Highway: x's levels stored as int16,
//   the weights (for the K-quants already multiplied by their 6- or 8-bit sub-block scale, which
//   fits 16 bits: at most 63 * 31 or 128 * 32) unpacked to 16-bit lanes, ReorderWidenMulAccumulate
//   (16 products summed in pairs into 8 int32 lanes), below 2^31 over a block (at most
//   256 * 4096 * 127 for Q6_K). Q4_K and Q5_K subtract dmin * s_x * sum_j m_j * (sum of the x
//   levels of sub-block j), Q4_1 and Q5_1 add m * s_x * (sum of the block's x levels), the sums
//   kept with x (as llama.cpp's Q8_1 activations keep them for Q4_1 / Q5_1).
//
// Either way each block's integer sum is converted to f32 and added into the row's f32
// accumulator with the product of the two scales. The weight streams from memory once per call.
// Each weight block is unpacked in registers, a group of elements sharing a sub-block scale at a
// time (each qs / qh byte loaded once for all the nibbles and bits it holds), and multiplied by a
// tile of rows of x (kTileRows) with one int32 accumulator per row; a block's sums then go into
// the rows' f32 accumulators. With one row of x (or any x that fits L1) a thread reads its
// weight rows front to back, one stream; with more, blocks of 8 weight rows take K span by span
// so that the span of x stays in L1 (RowsOf). At T = 1 the work per weight byte is small enough
// to approach the memory bandwidth on 2 cores (docs/benchmarks.md, "Quantized linear"); each
// further row of x costs 3 or 4 8-bit operations per 32 weights (16-bit kernel: 4 per 32).
//
// Each output is summed by one thread in one fixed order whatever T, the tile and the thread
// count: a row's result does not depend on the other rows of the batch or on the threads.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "cpu/amx.hpp"
#include "cpu/quant_linear.hpp"
#include "cpu/stream_prefetch.hpp"
#include "cpu/thread_scratch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/quant_linear.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h: the 8-bit kernels (namespace i8) on x86 with AVX2, SSMKIT_QUANT_DOT_BYTES,
// and those of the signed formats of 32 by columns (i8::ColumnsOf).
#include "cpu/quant_dot_x86-inl.h"
#include "cpu/quant_columns_x86-inl.h"
#include "cpu/quant_amx_x86-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Internal linkage: every kernel file defines its helpers in this same per-target namespace.
namespace {

// At most 16 lanes of 16 bits (256-bit vectors, also on AVX-512, whose 512-bit integer
// multiplies gain little here): N divides 16, so a chunk of N weights never straddles a
// sub-block (16 or 32 elements) or a nibble half. DF: the f32 accumulators of both kernels
// (8 lanes on AVX2 and AVX-512, as the 8-bit kernels' __m256).
using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DF = hn::Repartition<float, D16>;
using DU8 = hn::Rebind<uint8_t, D16>;
using DI8 = hn::Rebind<int8_t, D16>;
using V16 = hn::Vec<D16>;
using V32 = hn::Vec<D32>;
using VF = hn::Vec<DF>;

#if SSMKIT_QUANT_DOT_BYTES
namespace formats = i8;
#else
// The 16-bit kernels, for the targets without the 8-bit ones.
namespace i16 {

using Level = int16_t;  // QuantizedRows::q

HWY_INLINE float LoadF16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return F16ToF32(bits);
}

// N bytes from p, zero-extended to 16-bit lanes.
HWY_INLINE V16 LoadBytes(const uint8_t* p) { return hn::PromoteTo(D16(), hn::LoadU(DU8(), p)); }

HWY_INLINE V16 LowNibbles(V16 v) { return hn::And(v, hn::Set(D16(), 0xF)); }
HWY_INLINE V16 HighNibbles(V16 v) { return hn::ShiftRight<4>(v); }
// The nibble at bit `shift` (0 or 4, known only at run time) of each lane.
HWY_INLINE V16 NibbleAt(V16 v, int shift) {
  return hn::And(hn::ShiftRightSame(v, shift), hn::Set(D16(), 0xF));
}
// Bits [bit, bit + width) of each lane of v (bytes, < 256) moved to [4, 4 + width): the high
// bits of a 5- or 6-bit level above its low nibble; mask keeps those bits (0x10 or 0x30).
HWY_INLINE V16 HighBits(V16 v, int bit, int16_t mask) {
  return hn::And(hn::ShiftRightSame(hn::ShiftLeft<4>(v), bit), hn::Set(D16(), mask));
}

// A weight format. A block of kElements is read in groups of kGroup elements that share one
// sub-block scale: Prepare reads the block's scales once, GroupOf locates group g (offsets and
// shifts computed at run time, once per group), and Chunk gives the group's elements
// [c, c + N) as integer weights in 16-bit lanes (for the K-quants times their sub-block
// scale); c is a constant of the unrolled loop over the group's chunks. The block's value is
// d * sum(w q) (- dmin * sum_j m_j * the sum of x over sub-block j, for the formats with mins).
struct Q8_0 {
  static constexpr int kElements = 32, kGroup = 32, kBytes = sizeof(quant::BlockQ8_0);
  static constexpr bool kHasMin = false;
  struct Scales {
    float d, dmin;
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    return {LoadF16(b + offsetof(quant::BlockQ8_0, d)), 0.0f};
  }
  struct Group {
    const int8_t* qs;  // (32)
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales&, int) {
    return {reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ8_0, qs))};
  }
  static HWY_INLINE V16 Chunk(const Group& g, int c) {
    return hn::PromoteTo(D16(), hn::LoadU(DI8(), g.qs + c));
  }
};

// Lane l: bit l of a 16-bit word (the fifth bits of Q5_0 / Q5_1, 16 elements per word).
alignas(32) constexpr int16_t kBitOfLane[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                256, 512, 1024, 2048, 4096, 8192, 16384, INT16_MIN};

// Q4_0, Q4_1, Q5_0 and Q5_1: 32 elements, q the nibbles of qs (elements 16-31 the high ones)
// with, for the 5-bit ones, the fifth bit of element i bit i of qh (little-endian), minus
// kOffset. The formats with a min m add m * (the sum of the block's x levels): dmin = -m.
template <class Block, bool kFifthBit, int kOffset, bool kMin>
struct Q32 {
  static constexpr int kElements = 32, kGroup = 32, kBytes = sizeof(Block);
  static constexpr bool kHasMin = kMin;
  using Scales = Q8_0::Scales;
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    Scales s{LoadF16(b + offsetof(Block, d)), 0.0f};
    if constexpr (kMin) s.dmin = -LoadF16(b + offsetof(Block, m));
    return s;
  }
  // The sum of x's levels over the block: its two sums of 16.
  static HWY_INLINE int32_t MinSum(const Scales&, const int16_t* sums) { return sums[0] + sums[1]; }
  struct Group {
    const uint8_t* qs;  // (16)
    int16_t qh[2];      // elements 0-15, 16-31
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales&, int) {
    Group g{b + offsetof(Block, qs), {0, 0}};
    if constexpr (kFifthBit) std::memcpy(g.qh, b + offsetof(Block, qh), sizeof g.qh);
    return g;
  }
  static HWY_INLINE V16 Chunk(const Group& g, int c) {
    const D16 d16;
    const V16 bytes = LoadBytes(g.qs + c % 16);
    V16 q = c < 16 ? LowNibbles(bytes) : HighNibbles(bytes);
    if constexpr (kFifthBit) {
      const auto set = hn::TestBit(hn::Set(d16, g.qh[c / 16]), hn::LoadU(d16, kBitOfLane + c % 16));
      q = hn::Or(q, hn::IfThenElseZero(set, hn::Set(d16, 16)));
    }
    if constexpr (kOffset != 0) q = hn::Sub(q, hn::Set(d16, kOffset));
    return q;
  }
};
using Q4_0 = Q32<quant::BlockQ4_0, false, 8, false>;
using Q4_1 = Q32<quant::BlockQ4_1, false, 0, true>;
using Q5_0 = Q32<quant::BlockQ5_0, true, 16, false>;
using Q5_1 = Q32<quant::BlockQ5_1, true, 0, true>;

// The eight 6-bit mins of a Q4_K / Q5_K block in 16-bit lanes, each twice (for the two sums of
// 16 of its sub-block), for sum_j m_j * (the x levels' sum over sub-block j), once per block for
// every row.
class MinWeights {
 public:
  using D = hn::CappedTag<int16_t, 8>;
  MinWeights() = default;
  HWY_INLINE explicit MinWeights(uint64_t bytes) {  // byte j: m_j
    for (int j = 0; j < 8; ++j) {
      bytes_[2 * j] = bytes_[2 * j + 1] = static_cast<uint8_t>(bytes >> (8 * j));
    }
  }
  // sums: (16) int16, two per sub-block.
  HWY_INLINE int32_t Dot(const int16_t* sums) const {
    const D d;
    const hn::Repartition<int32_t, D> d32;
    const hn::Rebind<uint8_t, D> d8;
    auto total = hn::Zero(d32), odd = hn::Zero(d32);
    for (size_t i = 0; i < 16; i += hn::Lanes(d)) {
      const auto m = hn::PromoteTo(d, hn::LoadU(d8, bytes_ + i));
      total = hn::ReorderWidenMulAccumulate(d32, m, hn::LoadU(d, sums + i), total, odd);
    }
    return hn::GetLane(hn::SumOfLanes(d32, hn::RearrangeToOddPlusEven(total, odd)));
  }

 private:
  uint8_t bytes_[16] = {};
};

// Q4_K and Q5_K: 8 sub-blocks of 32, 6-bit scales sc and mins m (quant::ScaleMinK4).
template <class Block, bool kFifthBit>
struct K4K5 {
  static constexpr int kElements = quant::kSuperBlock, kGroup = 64, kBytes = sizeof(Block);
  static constexpr bool kHasMin = true;
  struct Scales {
    float d, dmin;
    uint64_t sc;  // byte j: sub-block j's 6-bit scale
    MinWeights m;
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    uint64_t sc, m;
    quant::ScalesMinsK4(b + offsetof(Block, scales), &sc, &m);
    return {LoadF16(b + offsetof(Block, d)), LoadF16(b + offsetof(Block, dmin)), sc, MinWeights(m)};
  }
  // sum_j m_j * (the sum of x's levels over sub-block j): sums (16), two per sub-block.
  static HWY_INLINE int32_t MinSum(const Scales& s, const int16_t* sums) { return s.m.Dot(sums); }
  // Group k: sub-blocks 2k and 2k + 1, the low and high nibbles of qs[32 k + l] (each byte
  // loaded once for both), their fifth bits bits 2k and 2k + 1 of qh[l] (Q5_K).
  struct Group {
    const uint8_t* qs;  // (32)
    const uint8_t* qh;  // (32)
    int bit;            // 2k
    int16_t sc_low, sc_high;
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales& s, int g) {
    const int k = g / 64;
    const uint8_t* qh = nullptr;
    if constexpr (kFifthBit) qh = b + offsetof(Block, qh);
    return {b + offsetof(Block, qs) + 32 * k, qh, 2 * k,
            static_cast<int16_t>((s.sc >> (16 * k)) & 0xff),
            static_cast<int16_t>((s.sc >> (16 * k + 8)) & 0xff)};
  }
  static HWY_INLINE V16 Chunk(const Group& g, int c) {
    const bool high = c >= 32;
    const V16 bytes = LoadBytes(g.qs + c % 32);
    V16 q = high ? HighNibbles(bytes) : LowNibbles(bytes);
    if constexpr (kFifthBit) {
      q = hn::Or(q, HighBits(LoadBytes(g.qh + c % 32), g.bit + (high ? 1 : 0), 0x10));
    }
    return hn::Mul(q, hn::Set(D16(), high ? g.sc_high : g.sc_low));
  }
};
// One format with VNNI or without (kVnni: the byte kernels' choice), as the byte kernels' are.
template <bool>
using Q4_K = K4K5<quant::BlockQ4_K, false>;
template <bool>
using Q5_K = K4K5<quant::BlockQ5_K, true>;

// Q6_K: 16 sub-blocks of 16, int8 scales; the offset 32 is taken off the levels here.
struct Q6_K {
  static constexpr int kElements = quant::kSuperBlock, kGroup = 128,
                       kBytes = sizeof(quant::BlockQ6_K);
  static constexpr bool kHasMin = false;
  struct Scales {
    float d, dmin;
    int16_t sc[16];
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    Scales s;
    s.d = LoadF16(b + offsetof(quant::BlockQ6_K, d));
    s.dmin = 0.0f;
    const auto* sc = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ6_K, scales));
    for (int j = 0; j < 16; ++j) s.sc[j] = sc[j];
    return s;
  }
  // Group h: elements 128 h + 32 r + l, r < 4, l < 32: the low (r < 2) or high nibble of
  // ql[64 h + 32 (r % 2) + l], bits 2r, 2r + 1 of qh[32 h + l] above it (each byte loaded once
  // per nibble or bit pair, shifts constant once unrolled).
  struct Group {
    const uint8_t* ql;  // (64)
    const uint8_t* qh;  // (32)
    const int16_t* sc;  // (8): one per 16 elements
  };
  static HWY_INLINE Group GroupOf(const uint8_t* b, const Scales& s, int g) {
    const int h = g / 128;
    return {b + offsetof(quant::BlockQ6_K, ql) + 64 * h,
            b + offsetof(quant::BlockQ6_K, qh) + 32 * h, s.sc + 8 * h};
  }
  static HWY_INLINE V16 Chunk(const Group& g, int c) {
    const int r = c / 32, l = c % 32;
    const V16 low = LoadBytes(g.ql + 32 * (r % 2) + l);
    const V16 q = hn::Or(r < 2 ? LowNibbles(low) : HighNibbles(low),
                         HighBits(LoadBytes(g.qh + l), 2 * r, 0x30));
    return hn::Mul(hn::Sub(q, hn::Set(D16(), 32)), hn::Set(D16(), g.sc[c / 16]));
  }
};

// Rows of x per tile: per row an int32 and an f32 accumulator, with a weight vector, an x
// vector and the group's constants: 4 rows fit 16 registers, 8 fit 32. Tuned for speed only,
// on AVX2 before the 8-bit kernels took it over (8 rows spilled and measured no faster).
constexpr int kTileRows = HWY_MAX_BYTES >= 64 ? 8 : 4;

// The tile of rows [t0, t0 + kT) of x (xq's layout) times weight row w's blocks [b0, b1), added
// into acc (kT, L) and min_total (kT): the f32 accumulators of those rows for this weight row,
// kept in memory between spans. (kVnni: the 8-bit kernels' choice, none here.)
template <class F, int kT, bool kVnni>
HWY_INLINE void DotSpan(const QuantizedRows& xq, const uint8_t* HWY_RESTRICT w, int64_t b0,
                        int64_t b1, int64_t t0, float* HWY_RESTRICT acc,
                        float* HWY_RESTRICT min_total) {
  const D16 d16;
  const D32 d32;
  const DF df;
  constexpr int64_t B = F::kElements;
  const int64_t K = xq.cols;
  const int N = static_cast<int>(hn::Lanes(d16));
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const int16_t* x = xq.q.data() + t0 * K;           // (blocks, kT, B)
  const float* xs = xq.scale.data() + t0 * (K / B);  // (blocks, kT)
  const int16_t* xsum =
      F::kHasMin ? xq.sums.data() + t0 * (K / 16) : nullptr;  // (blocks, kT, B / 16)
  VF a[kT];
  float mins[kT];
  for (int t = 0; t < kT; ++t) {
    a[t] = hn::LoadU(df, acc + t * L);
    mins[t] = min_total[t];
  }
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* block = w + b * F::kBytes;
    const typename F::Scales s = F::Prepare(block);
    V32 sum[kT], sum_odd[kT];  // sum_odd: the pairs some targets keep apart (zero on x86)
    for (int t = 0; t < kT; ++t) sum[t] = sum_odd[t] = hn::Zero(d32);
    for (int g = 0; g < F::kElements; g += F::kGroup) {
      const typename F::Group group = F::GroupOf(block, s, g);
      // Unrolled: each chunk's offset within the group is a constant. (Unrolling the groups
      // too let the compiler reorder 64 products into a tree of sums that spilled.)
#pragma GCC unroll 8
      for (int c = 0; c < F::kGroup; c += N) {
        const V16 wv = F::Chunk(group, c);
        for (int t = 0; t < kT; ++t) {
          const V16 xv = hn::LoadU(d16, x + (b * kT + t) * B + g + c);
          sum[t] = hn::ReorderWidenMulAccumulate(d32, wv, xv, sum[t], sum_odd[t]);
        }
      }
    }
    for (int t = 0; t < kT; ++t) {
      const float x_scale = xs[b * kT + t];
      const VF block_sum = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(sum[t], sum_odd[t]));
      a[t] = hn::MulAdd(block_sum, hn::Set(df, s.d * x_scale), a[t]);
      if constexpr (F::kHasMin) {
        const int16_t* block_sums = xsum + (b * kT + t) * (B / 16);
        mins[t] += s.dmin * x_scale * static_cast<float>(F::MinSum(s, block_sums));
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    hn::StoreU(a[t], df, acc + t * L);
    min_total[t] = mins[t];
  }
}

}  // namespace i16
namespace formats = i16;
#endif  // SSMKIT_QUANT_DOT_BYTES

// When x (T rows of K levels) is larger than this, past what L1 keeps beside the weights, the
// weight rows go in blocks of kBlockRows, span by span of K: each row of the block multiplies a
// span into every tile of x rows before the next row takes the same span, so that the span of
// x (T rows of kL1Bytes / (T * level bytes), at least kSpan) stays in L1 or close and x is read
// from L2 once per block of rows instead of once per row (at T = 8 and K = 4096, x is 32 KB of
// int8 levels, 64 KB of int16). The rows
// of a block are read interleaved, span by span: each row's next span is prefetched. Smaller x (T =
// 1 for any K up to 8192) reads one weight row at a time front to back, a single stream. Tuned for
// speed only: the order of each output's sum does not depend on them.
constexpr int64_t kL1Bytes = 16 * 1024;
constexpr int64_t kSpan = 256;
constexpr int64_t kBlockRows = 8;

// A tile of n <= kT rows: DotSpan<F, n, kVnni>.
template <class F, int kT, bool kVnni>
HWY_INLINE void DotSpanN(int n, const QuantizedRows& xq, const uint8_t* w, int64_t b0, int64_t b1,
                         int64_t t0, float* acc, float* min_total) {
  if constexpr (kT > 1) {
    if (n < kT) return DotSpanN<F, kT - 1, kVnni>(n, xq, w, b0, b1, t0, acc, min_total);
  }
  formats::DotSpan<F, kT, kVnni>(xq, w, b0, b1, t0, acc, min_total);
}

// RowsOf for one row of x (batch-1 decode): each weight row's accumulators on the stack, where
// the compiler keeps them in registers, rather than in the thread's buffer cleared by a call to
// memset per row; a row of 5 to 20 blocks (a 2.8B Mamba's dt_proj, in_proj) paid that per row.
template <class F, bool kVnni>
void OneRowOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
  const DF df;
  const int64_t blocks = p.in_features / F::kElements, row_bytes = blocks * F::kBytes;
  const uint8_t* weight = static_cast<const uint8_t*>(p.weight);  // (M, row_bytes)
  const int64_t ahead = StreamPrefetchBytes();
  for (int64_t m = m_begin; m < m_end; ++m) {
    if (ahead != 0) {
      PrefetchLines(weight + m * row_bytes + ahead, row_bytes);
    } else if (row_bytes >= kPrefetchNextRowBytes && m + kPrefetchRowsAhead < m_end) {
      PrefetchLines(weight + (m + kPrefetchRowsAhead) * row_bytes, row_bytes);
    }
    alignas(64) float acc[hn::MaxLanes(DF())];
    float min_total = 0.0f;
    hn::Store(hn::Zero(df), df, acc);
    formats::DotSpan<F, 1, kVnni>(xq, weight + m * row_bytes, 0, blocks, 0, acc, &min_total);
    float out = hn::GetLane(hn::SumOfLanes(df, hn::Load(df, acc))) - min_total;
    if (p.bias != nullptr) out += p.bias[m];
    p.out[m] = out;
  }
}

// Weight rows [m_begin, m_end), in blocks of block_rows (1 or kBlockRows); within a block,
// span by span of K, each row multiplies the span into every tile of x rows. The f32
// accumulators of a block (its rows times T rows of x) live in this thread's buffer (kept
// between calls). Each output's sum runs over the blocks of K in order, then its lanes: the
// same order whatever T, the tiles and the threads. May throw std::bad_alloc (the buffer).
template <class F, bool kVnni>
void RowsOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
  const DF df;
  const int64_t T = p.rows, L = static_cast<int64_t>(hn::Lanes(df));
  const int64_t blocks = p.in_features / F::kElements, row_bytes = blocks * F::kBytes;
  constexpr int64_t kLevelBytes = sizeof(formats::Level);
  const bool interleave = T * p.in_features * kLevelBytes > kL1Bytes;
  const int64_t block_rows = interleave ? kBlockRows : 1;
  // The longest span whose x (T rows) fits kL1Bytes, at least kSpan: fewer, longer calls.
  const int64_t span = std::max(kSpan, kL1Bytes / (kLevelBytes * T) / kSpan * kSpan);
  const int64_t span_blocks = interleave ? span / F::kElements : blocks;
  const uint8_t* weight = static_cast<const uint8_t*>(p.weight);  // (M, row_bytes)
  constexpr int kTile = formats::kTileRows;
  if (T == 1) return OneRowOf<F, kVnni>(p, xq, m_begin, m_end);
  const int64_t floats = block_rows * T * (L + 1);
  float* acc = ThreadScratch(ScratchSlot::kQuantLinearAcc, floats);  // (block_rows, T, L)
  float* min_total = acc + block_rows * T * L;                       // (block_rows, T)
  const int64_t ahead = interleave ? 0 : StreamPrefetchBytes();
  for (int64_t m0 = m_begin; m0 < m_end; m0 += block_rows) {
    const int64_t rows = std::min(block_rows, m_end - m0);
    if (ahead != 0) PrefetchLines(weight + m0 * row_bytes + ahead, row_bytes);
    std::fill(acc, acc + floats, 0.0f);
    for (int64_t b0 = 0; b0 < blocks; b0 += span_blocks) {
      const int64_t b1 = std::min(b0 + span_blocks, blocks);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* w = weight + (m0 + r) * row_bytes;
        if (interleave) {  // the row's next span, while the other rows take this one
          const uint8_t* next = w + b1 * F::kBytes;
          const uint8_t* end = w + std::min(b1 + span_blocks, blocks) * F::kBytes;
          for (; next < end; next += 64) __builtin_prefetch(next, /*rw=*/0, /*locality=*/3);
        }
        for (int64_t t = 0; t < T; t += kTile) {
          const int n = static_cast<int>(std::min<int64_t>(kTile, T - t));
          DotSpanN<F, kTile, kVnni>(n, xq, w, b0, b1, t, acc + (r * T + t) * L,
                                    min_total + r * T + t);
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < T; ++t) {
        const VF total = hn::LoadU(df, acc + (r * T + t) * L);
        float out = hn::GetLane(hn::SumOfLanes(df, total)) - min_total[r * T + t];
        if (p.bias != nullptr) out += p.bias[m0 + r];
        p.out[t * p.out_stride_row + m0 + r] = out;
      }
    }
  }
}

// Per block of B: s = max |x| / 127, q = round(x / s) (to nearest even, |q| <= 127: x / s is
// at most 127 times one plus a rounding) into levels (xq's layout), and for B = 256 the sums of
// each 16 levels.
template <typename Level>
void QuantizeRowsTo(const LinearParams& p, int64_t t_begin, int64_t t_end, QuantizedRows* xq,
                    Level* levels) {
  const DF df;
  const D32 d32;
  const hn::Rebind<Level, DF> dl;
  const int64_t K = p.in_features, B = xq->block, blocks = K / B;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* x = p.x + t * p.x_stride_row;  // (K)
    const bool by_columns = xq->InColumnTile(t);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + b * B;
      // A column tile's block goes through `own` (a signed format of 32: no sums).
      Level own[32];
      const int64_t offset = by_columns ? 0 : xq->BlockOffset(t, b);
      Level* q = by_columns ? own : levels + offset;  // (B)
      // A NaN makes the block's scale NaN, and so every output of the row: Max may drop it.
      VF vmax = hn::Zero(df);
      auto nan = hn::FirstN(df, 0);
      for (int64_t i = 0; i < B; i += W) {
        const VF v = hn::LoadU(df, xb + i);
        vmax = hn::Max(vmax, hn::Abs(v));
        nan = hn::Or(nan, hn::IsNaN(v));
      }
      const float scale = hn::AllFalse(df, nan) ? hn::GetLane(hn::MaxOfLanes(df, vmax)) / 127.0f
                                                : std::numeric_limits<float>::quiet_NaN();
      if (!by_columns) xq->scale[offset / B] = scale;
      const VF inverse = hn::Set(df, scale > 0.0f ? 1.0f / scale : 0.0f);
      V32 sum = hn::Zero(d32);
      for (int64_t i = 0; i < B; i += W) {
        const V32 level = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + i), inverse));
        hn::StoreU(hn::DemoteTo(dl, level), dl, q + i);
        if (!xq->with_sums) continue;
        sum = hn::Add(sum, level);
        if ((i + W) % 16 == 0) {
          xq->sums[(offset + i) / 16] = static_cast<int16_t>(hn::GetLane(hn::SumOfLanes(d32, sum)));
          sum = hn::Zero(d32);
        }
      }
      if (xq->columns) {  // a signed format of 32: the levels as stored (a NaN's saturated)
        int32_t level_sum = 0;
        for (int64_t i = 0; i < B; ++i) level_sum += q[i];
        const int32_t start = -xq->unsigned_offset * level_sum;
#if SSMKIT_QUANT_DOT_BYTES
        if (by_columns) i8::StoreColumnBlock(xq, t, b, own, scale, start);
#endif
        if (!by_columns) xq->start[offset / B] = start;
      }
      if (xq->paired && !by_columns && b % 2 == 1) {  // blocks b - 1, b: a 0-15, b 0-15, ...
        Level* pair = levels + offset - B;
        std::swap_ranges(pair + B / 2, pair + B, pair + B);
      }
    }
  }
}

// The signed formats of 32 (Q8_0, Q4_0, Q5_0): with the byte kernels, by columns (x stored so:
// QuantizedRows::columns is set for exactly these).
template <class F, bool kVnni>
void SignedRowsOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
#if SSMKIT_QUANT_DOT_BYTES
  return i8::ColumnsOf<F, kVnni>(p, xq, m_begin, m_end);
#else
  return RowsOf<F, kVnni>(p, xq, m_begin, m_end);
#endif
}

template <bool kVnni>
void RowsOfDType(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
  switch (p.weight_dtype) {
    case DType::kQ8_0:
      return SignedRowsOf<formats::Q8_0, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ4_0:
      return SignedRowsOf<formats::Q4_0, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ4_1:
      return RowsOf<formats::Q4_1, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ5_0:
      return SignedRowsOf<formats::Q5_0, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ5_1:
      return RowsOf<formats::Q5_1, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ4_K:
      return RowsOf<formats::Q4_K<kVnni>, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ5_K:
      return RowsOf<formats::Q5_K<kVnni>, kVnni>(p, xq, m_begin, m_end);
    case DType::kQ6_K:
      return RowsOf<formats::Q6_K, kVnni>(p, xq, m_begin, m_end);
    default:
      return;  // the ops layer admits only these
  }
}

}  // namespace

void QuantLinearRowsImpl(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin,
                         int64_t m_end) {
#if SSMKIT_QUANT_DOT_VNNI
  if (xq.amx) {
    switch (p.weight_dtype) {
      case DType::kQ8_0:
        return i8::AmxSignedRowsOf<formats::Q8_0>(p, xq, m_begin, m_end);
      case DType::kQ4_K:
        return i8::AmxRowsOf<formats::Q4_K<true>>(p, xq, m_begin, m_end);
      default:
        return i8::AmxRowsOf<formats::Q5_K<true>>(p, xq, m_begin, m_end);
    }
  }
  if (xq.vnni) return RowsOfDType<true>(p, xq, m_begin, m_end);
#endif
  RowsOfDType<false>(p, xq, m_begin, m_end);
}

void QuantizeRowsImpl(const LinearParams& p, int64_t t_begin, int64_t t_end, QuantizedRows* xq) {
#if SSMKIT_QUANT_DOT_BYTES
  QuantizeRowsTo(p, t_begin, t_end, xq, xq->q8.data());
#if SSMKIT_QUANT_DOT_VNNI
  // Q8_0's tiles take x's levels as quantized (row-major: not by columns), row by row.
  if (xq->amx && xq->block == 32) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      for (int64_t b = 0; b < xq->cols / 32; ++b) {
        const int64_t offset = xq->BlockOffset(t, b);
        i8::StoreAmxBlock32(xq, t, b, xq->q8.data() + offset, xq->scale[offset / 32]);
      }
    }
  }
#endif
  // The K-quants' blocks in the order their kernel reads them.
  if (xq->block == quant::kSuperBlock) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      for (int64_t b = 0; b < xq->cols / xq->block; ++b) {
        const int64_t offset = xq->BlockOffset(t, b);
        int8_t* levels = xq->q8.data() + offset;  // (B)
        if (xq->lane_mapped) {
          const float scale = xq->scale[offset / xq->block];
          float* scaled_sums = xq->scaled_sums.data() + offset / 32;  // (B / 32)
          for (int64_t j = 0; j < xq->block / 32; ++j) {
            const int32_t sum = xq->sums[offset / 16 + 2 * j] + xq->sums[offset / 16 + 2 * j + 1];
            scaled_sums[j] = scale * static_cast<float>(sum);
          }
#if SSMKIT_QUANT_DOT_VNNI
          if (xq->amx) {  // the tiles take x; the lane-mapped levels are for batch 1
            i8::StoreAmxBlock(xq, t, b, levels, scale, scaled_sums);
            continue;
          }
#endif
          i8::ArrangeLaneMapped(levels, xq->block);
        } else {
          i8::ArrangeLevels(levels, xq->block);
        }
      }
    }
  }
#else
  QuantizeRowsTo(p, t_begin, t_end, xq, xq->q.data());
#endif
}

// The bytes per level of x this target's kernel multiplies: QuantizedRows::level_bytes.
int64_t LevelBytesImpl() { return sizeof(formats::Level); }
// The rows of x per tile of this target's kernel: QuantizedRows::tile.
int64_t TileRowsImpl() { return formats::kTileRows; }
// Whether this target's kernels use VNNI now: QuantizedRows::vnni.
bool VnniKernelsImpl() { return SSMKIT_QUANT_DOT_VNNI && QuantDotVnni(); }

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(QuantLinearRowsImpl);
HWY_EXPORT(QuantizeRowsImpl);
HWY_EXPORT(LevelBytesImpl);
HWY_EXPORT(TileRowsImpl);
HWY_EXPORT(VnniKernelsImpl);

namespace {

bool CpuHasVnni() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

std::atomic<bool>& VnniInUse() {
  static std::atomic<bool> in_use{CpuHasVnni()};
  return in_use;
}

}  // namespace

bool SetQuantDotVnni(bool enable) {
  VnniInUse().store(enable && CpuHasVnni(), std::memory_order_relaxed);
  return QuantDotVnni();
}

bool QuantDotVnni() { return VnniInUse().load(std::memory_order_relaxed); }

void QuantizedRows::Reserve(int64_t T, int64_t K, DType weight_dtype) {
  rows = T;
  cols = K;
  block = DTypeBlockElements(weight_dtype);
  level_bytes = HWY_DYNAMIC_DISPATCH(LevelBytesImpl)();
  tile = HWY_DYNAMIC_DISPATCH(TileRowsImpl)();
  vnni = HWY_DYNAMIC_DISPATCH(VnniKernelsImpl)();
  lane_mapped = vnni && (weight_dtype == DType::kQ4_K || weight_dtype == DType::kQ5_K);
  // AMX's tiles (with the VNNI kernels, whose bits they keep) for Q8_0 from 2 rows of x, and
  // for Q4_K and Q5_K from kAmxMinRowsKQuant rows: those unpack every weight block into tiles
  // whatever T, which below 4 rows costs more than the lane-mapped kernel's T products.
  amx = ((lane_mapped && T >= kAmxMinRowsKQuant) ||
         (vnni && weight_dtype == DType::kQ8_0 && T >= 2)) &&
        AmxInt8();
  // The signed formats of 32 go by columns with the byte kernels, at every T (but Q8_0 with
  // AMX): each row's sum in one order. Without VNNI Q8_0 multiplies signed levels (no offset).
  columns = level_bytes == 1 && !amx &&
            (weight_dtype == DType::kQ8_0 || weight_dtype == DType::kQ4_0 ||
             weight_dtype == DType::kQ5_0);
  unsigned_offset =
      columns && (vnni || PairedLoneRows(weight_dtype)) ? UnsignedLevelOffset(weight_dtype) : 0;
  paired = columns && PairedLoneRows(weight_dtype);
  const auto grow = [](auto& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  // A last tile by columns is padded to whole 8 rows, zero: its lanes past T multiply nothing.
  const int64_t last = T % tile,
                padded = columns && last >= kColumnTileMinRows ? T - last + tile : T;
  if (level_bytes == 1) {
    grow(q8, padded * K);
  } else {
    grow(q, padded * K);
  }
  grow(scale, padded * (K / block));
  if (columns) {
    grow(start, padded * (K / block));
    if (padded > T) {
      const int64_t t0 = T - last;
      std::fill(q8.begin() + t0 * K, q8.begin() + padded * K, int8_t{0});
      std::fill(scale.begin() + t0 * (K / block), scale.begin() + padded * (K / block), 0.0f);
      std::fill(start.begin() + t0 * (K / block), start.begin() + padded * (K / block), 0);
    }
  }
  // The K-quants' mins and offsets, Q4_1 / Q5_1's mins.
  with_sums =
      block == quant::kSuperBlock || weight_dtype == DType::kQ4_1 || weight_dtype == DType::kQ5_1;
  if (with_sums) grow(sums, T * (K / 16));
  if (lane_mapped) grow(scaled_sums, T * (K / 32));
  if (amx) {
    // Per group of 8 rows and block: Q8_0's B tile of 256 bytes; the K-quants' 4 passes' B tiles
    // (4 KB) and scaled sums (64 floats). Each row writes its own columns: the K-quants' zeros
    // beside them, and a last group's missing rows, are zeroed here.
    const bool k_quant = block == quant::kSuperBlock;
    const int64_t groups = (T + 7) / 8, blocks = K / block;
    const int64_t tile_bytes = k_quant ? 4 * 16 * 64 : 256, sum_floats = k_quant ? 4 * 16 : 0;
    grow(amx_levels, groups * blocks * tile_bytes);
    grow(amx_scales, groups * blocks * 16);
    grow(amx_sums, groups * blocks * sum_floats);
    if (k_quant) std::fill_n(amx_levels.begin(), groups * blocks * tile_bytes, int8_t{0});
    if (T % 8 != 0) {
      const int64_t g = groups - 1;
      if (!k_quant)
        std::fill_n(amx_levels.begin() + g * blocks * tile_bytes, blocks * tile_bytes, int8_t{0});
      std::fill_n(amx_scales.begin() + g * blocks * 16, blocks * 16, 0.0f);
      std::fill_n(amx_sums.begin() + g * blocks * sum_floats, blocks * sum_floats, 0.0f);
    }
  }
}

void QuantizeLinearRows(const LinearParams& p, int64_t t_begin, int64_t t_end, QuantizedRows* xq) {
  HWY_DYNAMIC_DISPATCH(QuantizeRowsImpl)(p, t_begin, t_end, xq);
}

void QuantLinearRows(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin,
                     int64_t m_end) {
  HWY_DYNAMIC_DISPATCH(QuantLinearRowsImpl)(p, xq, m_begin, m_end);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

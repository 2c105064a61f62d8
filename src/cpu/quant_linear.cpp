// CPU linear layer with a quantized weight (llama.cpp's Q8_0, Q4_0, Q4_K, Q5_K, Q6_K;
// core/quant.hpp) for T <= kLinearGemvMaxRows rows of x: out[t, m] = sum_k x[t, k] W[m, k] +
// bias[m]. Dimension legend: T rows of x, K input features, M output features, B elements per
// weight block (32 or 256), N 16-bit lanes per vector (16 on AVX2 and AVX-512, 8 on EMU128).
//
// As GGML does, x is quantized once per call to 8-bit levels with one f32 scale per block of
// B (QuantizedRows), so each block's product is an exact integer sum:
//   out[t, m] = sum over blocks b of  d_w(b) * s_x(t, b) * sum_i w_i q_i   (- the min term)
// with w_i the block's integer weights (for the K-quants already multiplied by their 6- or
// 8-bit sub-block scale, which fits 16 bits: at most 63 * 31 or 128 * 32), q_i the x levels.
// The integer sums use ReorderWidenMulAccumulate on 16-bit lanes (AVX2's vpmaddwd: 16
// products, summed in pairs into 8 int32 lanes) and stay below 2^31 over a block (at most
// 256 * 4096 * 127 for Q6_K); each block's sum is converted to f32 and added into the row's
// f32 accumulator with the product of the two scales. Q4_K and Q5_K subtract
// dmin * s_x * sum_j m_j * (sum of the x levels of sub-block j), the sums kept with x.
//
// The weight streams from memory once per call: each weight block is unpacked to 16-bit lanes
// in registers and multiplied by a tile of up to kTileRows rows of x (4 on AVX2's 16 vector
// registers: per row one int32 and two f32 accumulators), the next tile of rows reading the
// same block again from L1. At T = 1 the kernel is bound by memory bandwidth on the weight
// bytes (0.56 to 1.06 bytes per element); at T = 8 the unpacking is shared by the rows.
//
// Each output is summed by one thread in one fixed order whatever T, the tile and the thread
// count: a row's result does not depend on the other rows of the batch or on the threads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "cpu/quant_linear.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/quant_linear.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Internal linkage: every kernel file defines its helpers in this same per-target namespace.
namespace {

// At most 16 lanes of 16 bits (256-bit vectors, also on AVX-512, whose 512-bit integer
// multiplies gain little here): N divides 16, so a chunk of N weights never straddles a
// sub-block (16 or 32 elements) or a nibble half.
using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DF = hn::Repartition<float, D16>;
using DU8 = hn::Rebind<uint8_t, D16>;
using DI8 = hn::Rebind<int8_t, D16>;
using V16 = hn::Vec<D16>;
using V32 = hn::Vec<D32>;
using VF = hn::Vec<DF>;

HWY_INLINE float LoadF16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return F16ToF32(bits);
}

// N bytes from p, zero-extended to 16-bit lanes.
HWY_INLINE V16 LoadBytes(const uint8_t* p) { return hn::PromoteTo(D16(), hn::LoadU(DU8(), p)); }

HWY_INLINE V16 LowNibbles(V16 v) { return hn::And(v, hn::Set(D16(), 0xF)); }
HWY_INLINE V16 HighNibbles(V16 v) { return hn::ShiftRight<4>(v); }

// Each lane shifted so that its bit `from` lands on bit `to`, then masked: the high bits of the
// 5- and 6-bit levels moved above their low nibble.
HWY_INLINE V16 MoveBits(V16 v, int from, int to, int16_t mask) {
  const V16 moved = from <= to ? hn::ShiftLeftSame(v, to - from) : hn::ShiftRightSame(v, from - to);
  return hn::And(moved, hn::Set(D16(), mask));
}

// A weight format: Prepare reads a block's scales once, Chunk gives its elements [e, e + N) as
// integer weights in 16-bit lanes (for the K-quants times their sub-block scale), and the
// block's value is d * sum(w q) (- dmin * MinDot for the formats with mins).
struct Q8_0 {
  static constexpr int kElements = 32, kBytes = sizeof(quant::BlockQ8_0);
  static constexpr bool kHasMin = false;
  struct Scales {
    float d, dmin;
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    return {LoadF16(b + offsetof(quant::BlockQ8_0, d)), 0.0f};
  }
  static HWY_INLINE V16 Chunk(const uint8_t* b, const Scales&, int e) {
    const auto* qs = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ8_0, qs));
    return hn::PromoteTo(D16(), hn::LoadU(DI8(), qs + e));
  }
};

struct Q4_0 {
  static constexpr int kElements = 32, kBytes = sizeof(quant::BlockQ4_0);
  static constexpr bool kHasMin = false;
  using Scales = Q8_0::Scales;
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    return {LoadF16(b + offsetof(quant::BlockQ4_0, d)), 0.0f};
  }
  static HWY_INLINE V16 Chunk(const uint8_t* b, const Scales&, int e) {
    const V16 bytes = LoadBytes(b + offsetof(quant::BlockQ4_0, qs) + e % 16);
    return hn::Sub(e < 16 ? LowNibbles(bytes) : HighNibbles(bytes), hn::Set(D16(), 8));
  }
};

// Q4_K and Q5_K: 8 sub-blocks of 32, 6-bit scales sc and mins m (quant::ScaleMinK4).
template <class Block, bool kFifthBit>
struct K4K5 {
  static constexpr int kElements = quant::kSuperBlock, kBytes = sizeof(Block);
  static constexpr bool kHasMin = true;
  struct Scales {
    float d, dmin;
    int16_t sc[8], m[8];
  };
  static HWY_INLINE Scales Prepare(const uint8_t* b) {
    Scales s;
    s.d = LoadF16(b + offsetof(Block, d));
    s.dmin = LoadF16(b + offsetof(Block, dmin));
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      quant::ScaleMinK4(j, b + offsetof(Block, scales), &sc, &m);
      s.sc[j] = sc;
      s.m[j] = m;
    }
    return s;
  }
  static HWY_INLINE V16 Chunk(const uint8_t* b, const Scales& s, int e) {
    const int j = e / 32;  // sub-block: nibble j % 2 of qs[32 * (j / 2) + e % 32]
    const V16 bytes = LoadBytes(b + offsetof(Block, qs) + 32 * (j / 2) + e % 32);
    V16 q = j % 2 == 0 ? LowNibbles(bytes) : HighNibbles(bytes);
    if constexpr (kFifthBit) {
      q = hn::Or(q, MoveBits(LoadBytes(b + offsetof(Block, qh) + e % 32), j, 4, 0x10));
    }
    return hn::Mul(q, hn::Set(D16(), s.sc[j]));
  }
  // sum_j m_j * (the x levels' sum over sub-block j); sums: (8).
  static HWY_INLINE int32_t MinDot(const Scales& s, const int16_t* sums) {
    int32_t total = 0;
    for (int j = 0; j < 8; ++j) total += s.m[j] * sums[j];
    return total;
  }
};
using Q4_K = K4K5<quant::BlockQ4_K, false>;
using Q5_K = K4K5<quant::BlockQ5_K, true>;

// Q6_K: 16 sub-blocks of 16, int8 scales; the offset 32 is taken off the levels here.
struct Q6_K {
  static constexpr int kElements = quant::kSuperBlock, kBytes = sizeof(quant::BlockQ6_K);
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
  static HWY_INLINE V16 Chunk(const uint8_t* b, const Scales& s, int e) {
    // Element e = 128 h + 32 r + l: the low nibble (r < 2) or high nibble of
    // ql[64 h + 32 (r % 2) + l], bits 2r, 2r + 1 of qh[32 h + l] on top.
    const int h = e / 128, r = e % 128 / 32, l = e % 32;
    const V16 low = LoadBytes(b + offsetof(quant::BlockQ6_K, ql) + 64 * h + 32 * (r % 2) + l);
    const V16 high = LoadBytes(b + offsetof(quant::BlockQ6_K, qh) + 32 * h + l);
    const V16 q =
        hn::Or(r < 2 ? LowNibbles(low) : HighNibbles(low), MoveBits(high, 2 * r, 4, 0x30));
    return hn::Mul(hn::Sub(q, hn::Set(D16(), 32)), hn::Set(D16(), s.sc[e / 16]));
  }
};

// Rows of x per tile: per row one int32 and two f32 accumulators, plus a weight and an x
// vector: 4 rows fill AVX2's 16 registers, 8 AVX-512's 32. Tuned for speed only.
constexpr int kTileRows = HWY_MAX_BYTES >= 64 ? 8 : 4;

// Output m for rows [t0, t0 + kT) of x: w is weight row m (K / B blocks of F).
template <class F, int kT>
HWY_INLINE void DotTile(const LinearParams& p, const QuantizedRows& xq,
                        const uint8_t* HWY_RESTRICT w, int64_t m, int64_t t0) {
  const D16 d16;
  const D32 d32;
  const DF df;
  const int64_t K = p.in_features, blocks = K / F::kElements;
  const int N = static_cast<int>(hn::Lanes(d16));
  // Blocks of 32 alternate between two f32 accumulators (two multiply-add chains at T = 1);
  // a block of 256 is long enough for one. Fixed per format, so the order of a row's sum does
  // not depend on kT.
  constexpr int kAcc = F::kElements == 32 ? 2 : 1;
  const int16_t* x[kT];  // (K) each
  const float* xs[kT];   // (blocks) each
  const int16_t* xsum[kT];
  VF acc[kT][kAcc];
  float min_total[kT];
  for (int t = 0; t < kT; ++t) {
    x[t] = xq.q.data() + (t0 + t) * K;
    xs[t] = xq.scale.data() + (t0 + t) * blocks;
    xsum[t] = F::kHasMin ? xq.sums.data() + (t0 + t) * (K / 32) : nullptr;
    for (int a = 0; a < kAcc; ++a) acc[t][a] = hn::Zero(df);
    min_total[t] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = w + b * F::kBytes;
    const typename F::Scales s = F::Prepare(block);
    V32 sum[kT], sum_odd[kT];  // sum_odd: the pairs some targets keep apart (zero on x86)
    for (int t = 0; t < kT; ++t) sum[t] = sum_odd[t] = hn::Zero(d32);
    for (int e = 0; e < F::kElements; e += N) {
      const V16 wv = F::Chunk(block, s, e);
      for (int t = 0; t < kT; ++t) {
        const V16 xv = hn::LoadU(d16, x[t] + b * F::kElements + e);
        sum[t] = hn::ReorderWidenMulAccumulate(d32, wv, xv, sum[t], sum_odd[t]);
      }
    }
    for (int t = 0; t < kT; ++t) {
      const VF block_sum = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(sum[t], sum_odd[t]));
      VF& a = acc[t][b % kAcc];
      a = hn::MulAdd(block_sum, hn::Set(df, s.d * xs[t][b]), a);
      if constexpr (F::kHasMin) {
        min_total[t] += s.dmin * xs[t][b] * static_cast<float>(F::MinDot(s, xsum[t] + 8 * b));
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    VF total = acc[t][0];
    for (int a = 1; a < kAcc; ++a) total = hn::Add(total, acc[t][a]);
    float out = hn::GetLane(hn::SumOfLanes(df, total)) - min_total[t];
    if (p.bias != nullptr) out += p.bias[m];
    p.out[(t0 + t) * p.out_stride_row + m] = out;
  }
}

template <class F>
HWY_INLINE void DotTileN(int n, const LinearParams& p, const QuantizedRows& xq, const uint8_t* w,
                         int64_t m, int64_t t0) {
  switch (n) {
    case 1:
      return DotTile<F, 1>(p, xq, w, m, t0);
    case 2:
      return DotTile<F, 2>(p, xq, w, m, t0);
    case 3:
      return DotTile<F, 3>(p, xq, w, m, t0);
#if HWY_MAX_BYTES >= 64
    case 4:
      return DotTile<F, 4>(p, xq, w, m, t0);
    case 5:
      return DotTile<F, 5>(p, xq, w, m, t0);
    case 6:
      return DotTile<F, 6>(p, xq, w, m, t0);
    case 7:
      return DotTile<F, 7>(p, xq, w, m, t0);
#endif
    default:
      return DotTile<F, kTileRows>(p, xq, w, m, t0);
  }
}

// Weight rows [m_begin, m_end), front to back: each row once for every tile of x rows (from
// memory for the first tile, from L1 for the others).
template <class F>
void RowsOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
  const int64_t T = p.rows;
  const int64_t row_bytes = p.in_features / F::kElements * F::kBytes;
  const uint8_t* weight = static_cast<const uint8_t*>(p.weight);  // (M, row_bytes)
  for (int64_t m = m_begin; m < m_end; ++m) {
    for (int64_t t = 0; t < T; t += kTileRows) {
      const int n = static_cast<int>(std::min<int64_t>(kTileRows, T - t));
      DotTileN<F>(n, p, xq, weight + m * row_bytes, m, t);
    }
  }
}

}  // namespace

void QuantLinearRowsImpl(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin,
                         int64_t m_end) {
  switch (p.weight_dtype) {
    case DType::kQ8_0:
      return RowsOf<Q8_0>(p, xq, m_begin, m_end);
    case DType::kQ4_0:
      return RowsOf<Q4_0>(p, xq, m_begin, m_end);
    case DType::kQ4_K:
      return RowsOf<Q4_K>(p, xq, m_begin, m_end);
    case DType::kQ5_K:
      return RowsOf<Q5_K>(p, xq, m_begin, m_end);
    case DType::kQ6_K:
      return RowsOf<Q6_K>(p, xq, m_begin, m_end);
    default:
      return;  // the ops layer admits only these
  }
}

// Per block of B: s = max |x| / 127, q = round(x / s) (to nearest even, |q| <= 127: x / s is
// at most 127 times one plus a rounding), and for B = 256 the sums of each 32 levels.
void QuantizeRowsImpl(const LinearParams& p, int64_t t_begin, int64_t t_end, QuantizedRows* xq) {
  const DF df;
  const D32 d32;
  const hn::Rebind<int16_t, DF> d16;
  const int64_t K = p.in_features, B = xq->block, blocks = K / B;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* x = p.x + t * p.x_stride_row;  // (K)
    int16_t* q = xq->q.data() + t * K;          // (K)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + b * B;
      VF vmax = hn::Zero(df);
      for (int64_t i = 0; i < B; i += W) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + i)));
      const float scale = hn::GetLane(hn::MaxOfLanes(df, vmax)) / 127.0f;
      xq->scale[t * blocks + b] = scale;
      const VF inverse = hn::Set(df, scale > 0.0f ? 1.0f / scale : 0.0f);
      V32 sum = hn::Zero(d32);
      for (int64_t i = 0; i < B; i += W) {
        const V32 level = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + i), inverse));
        hn::StoreU(hn::DemoteTo(d16, level), d16, q + b * B + i);
        sum = hn::Add(sum, level);
        if (B == quant::kSuperBlock && (i + W) % 32 == 0) {
          xq->sums[t * (K / 32) + (b * B + i) / 32] =
              static_cast<int16_t>(hn::GetLane(hn::SumOfLanes(d32, sum)));
          sum = hn::Zero(d32);
        }
      }
    }
  }
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(QuantLinearRowsImpl);
HWY_EXPORT(QuantizeRowsImpl);

void QuantizedRows::Reserve(int64_t T, int64_t K, DType weight_dtype) {
  rows = T;
  cols = K;
  block = DTypeBlockElements(weight_dtype);
  const auto grow = [](auto& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  grow(q, T * K);
  grow(scale, T * (K / block));
  if (block == quant::kSuperBlock) grow(sums, T * (K / 32));
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

// CPU linear layer, the few-rows kernel: out[t, m] = sum_k x[t, k] W[m, k] + bias[m] for
// T <= kLinearGemvMaxRows rows of x (decode batches), reading each weight row from memory once
// for all T rows.
// Dimension legend: T rows of x (the decode batch), K input features, M output features,
// W vector lanes, R weight rows per tile, Tt rows of x per tile.
//
// At decode the whole model's weights stream through here once per step. With one row of x
// (batch 1) the kernel is bound by memory bandwidth: each weight row is read front to back
// with 8 independent accumulators, a single sequential stream per thread. With more rows it is
// bound by multiply-add throughput, and is a small matrix product tiled for the registers: a
// tile of R weight rows by Tt rows of x keeps Tt * R accumulators (12 of AVX2's 16 registers,
// 24 of AVX-512's 32); each weight vector is loaded once for the Tt rows, each x vector once
// for the R weight rows. The tiles walk the rows of x for one block of R weight rows before
// moving on, so the block comes from memory once and from L1 for the other tiles (bf16/f16
// weights are widened into an f32 copy of the block first when more than one tile reads it,
// else in registers); x (T * K floats) stays in L2.
//
// Each output is reduced by one thread in a fixed order (vector partials along K, then lanes,
// then the scalar tail over K % W, then the bias), whatever T, the tile it falls in and the
// thread count: for T >= 2 a row's result does not depend on the other rows of the batch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "cpu/linear.hpp"
#include "cpu/spread_prefetch.hpp"
#include "cpu/stream_prefetch.hpp"
#include "cpu/thread_scratch.hpp"
#include "ssmkit/linear.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/linear_gemv.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Internal linkage: every kernel file defines its helpers in this same per-target namespace.
namespace {

int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

// An upper bound of Lanes() on every target, for buffers of one vector per row.
constexpr int64_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// One vector of weights, widened to f32.
HWY_INLINE VF LoadWeights(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadWeights(DF df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}
HWY_INLINE VF LoadWeights(DF df, const hwy::float16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}

// One weight as f32 (the K % W tail).
HWY_INLINE float WeightAt(const float* p, int64_t i) { return p[i]; }
HWY_INLINE float WeightAt(const hwy::bfloat16_t* p, int64_t i) {
  return Bf16ToF32(reinterpret_cast<const uint16_t*>(p)[i]);
}
HWY_INLINE float WeightAt(const hwy::float16_t* p, int64_t i) {
  return F16ToF32(reinterpret_cast<const uint16_t*>(p)[i]);
}

// dst[i] = src[i] widened to f32, i < n.
template <class WT>
HWY_INLINE void WidenBlock(const WT* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT dst) {
  const DF df;
  const int64_t W = Lanes();
  int64_t i = 0;
  for (; i + W <= n; i += W) hn::StoreU(LoadWeights(df, src + i), df, dst + i);
  for (; i < n; ++i) dst[i] = WeightAt(src, i);
}

// Makes the compiler hold v in a register: given the choice, GCC 12 folded the load of each x
// vector of the AVX-512 8 x 3 tile into all 3 of its multiply-adds as a memory operand, 27
// loads per 24 multiply-adds where 11 do (Zen 4 loads one 512-bit vector per cycle and
// multiply-adds one: the loads were the bound). Nothing on targets without vector registers
// for the constraint.
template <class V>
HWY_INLINE void KeepInRegister(V& v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  asm("" : "+v"(v.raw));
#else
  (void)v;
#endif
}

// Output rows [m, m + kR) for the kT rows of x at x (rows x_stride apart), into out (rows
// out_stride apart); w: the tile's kR weight rows, K apart. Not inlined: inlined into the
// block loop, GCC kept a zero vector live across it in one of AVX2's 16 registers, and the
// 4 x 3 tile (12 accumulators, 3 weight vectors, one x vector) then re-read a weight row from
// L1 for every row of x (10 loads per 12 multiply-adds instead of 7): 62 -> 78 GFLOP/s on one
// Zen 3 core at T = 32, K = 768 (docs/benchmarks.md).
template <int kT, int kR, class WT>
HWY_NOINLINE void Tile(const LinearParams& p, const WT* HWY_RESTRICT w, const float* HWY_RESTRICT x,
                       float* HWY_RESTRICT out, int64_t m, SpreadPrefetch& prefetch) {
  const DF df;
  const int64_t K = p.in_features, W = Lanes();
  const int64_t xs = p.x_stride_row;
  VF acc[kT][kR];
  for (int t = 0; t < kT; ++t) {
    for (int r = 0; r < kR; ++r) acc[t][r] = hn::Zero(df);
  }
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    prefetch.Step();
    VF wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = LoadWeights(df, w + r * K + k);
    for (int t = 0; t < kT; ++t) {
      VF xv = hn::LoadU(df, x + t * xs + k);
      KeepInRegister(xv);
      for (int r = 0; r < kR; ++r) acc[t][r] = hn::MulAdd(wv[r], xv, acc[t][r]);
    }
  }
  if (k < K) {
    // K's tail as one more vector step over zero-padded copies: a scalar tail after the lanes'
    // sum was a chain of K % W dependent multiply-adds per output (at K = 287 on AVX-512 it
    // took more time than the 17 vector steps).
    HWY_ALIGN float x_tail[kT * kMaxLanes] = {};
    HWY_ALIGN float w_tail[kR * kMaxLanes] = {};
    for (int t = 0; t < kT; ++t) {
      for (int64_t j = k; j < K; ++j) x_tail[t * W + j - k] = x[t * xs + j];
    }
    for (int r = 0; r < kR; ++r) {
      for (int64_t j = k; j < K; ++j) w_tail[r * W + j - k] = WeightAt(w + r * K, j);
    }
    for (int t = 0; t < kT; ++t) {
      const VF xv = hn::Load(df, x_tail + t * W);
      for (int r = 0; r < kR; ++r)
        acc[t][r] = hn::MulAdd(hn::Load(df, w_tail + r * W), xv, acc[t][r]);
    }
  }
  for (int t = 0; t < kT; ++t) {
    for (int r = 0; r < kR; ++r) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[t][r]));
      if (p.bias != nullptr) sum += p.bias[m + r];
      out[t * p.out_stride_row + (m + r) * p.out_stride_feature] = sum;
    }
  }
}

// Tile rows of x and weight rows: 4 x 3 fits AVX2's 16 vector registers (12 accumulators, 3
// weight vectors, one x vector); 8 x 3 AVX-512's 32. Tuned for speed only: the order of each
// output's sum does not depend on them.
constexpr int kTileWeightRows = 3;
constexpr int kTileXRows = HWY_MAX_BYTES >= 64 ? 8 : 4;

// A tile of n <= kTileXRows rows of x by r <= kTileWeightRows weight rows.
template <int kR, class WT>
HWY_INLINE void TileN(int n, const LinearParams& p, const WT* w, const float* x, float* out,
                      int64_t m, SpreadPrefetch& pf) {
  switch (n) {
    case 1:
      return Tile<1, kR, WT>(p, w, x, out, m, pf);
    case 2:
      return Tile<2, kR, WT>(p, w, x, out, m, pf);
    case 3:
      return Tile<3, kR, WT>(p, w, x, out, m, pf);
#if HWY_MAX_BYTES >= 64
    case 4:
      return Tile<4, kR, WT>(p, w, x, out, m, pf);
    case 5:
      return Tile<5, kR, WT>(p, w, x, out, m, pf);
    case 6:
      return Tile<6, kR, WT>(p, w, x, out, m, pf);
    case 7:
      return Tile<7, kR, WT>(p, w, x, out, m, pf);
#endif
    default:
      return Tile<kTileXRows, kR, WT>(p, w, x, out, m, pf);
  }
}

template <class WT>
HWY_INLINE void TileNR(int n, int r, const LinearParams& p, const WT* w, const float* x, float* out,
                       int64_t m, SpreadPrefetch& pf) {
  static_assert(kTileWeightRows == 3, "a case per weight-row count");
  if (r == 3) return TileN<3, WT>(n, p, w, x, out, m, pf);
  if (r == 2) return TileN<2, WT>(n, p, w, x, out, m, pf);
  return TileN<1, WT>(n, p, w, x, out, m, pf);
}

// Weight rows per block: the block (kBlockWeightRows * K weights) stays in L2 while every tile
// of x rows passes over it, each x tile in L1. Tuned for speed only.
constexpr int64_t kBlockWeightRows = 8 * kTileWeightRows;

// Output rows [m_begin, m_end) for all T >= 2 rows of x: block by block of weight rows, each
// block read from memory once and multiplied by every tile of x rows.
template <class WT>
void TiledRows(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  const int64_t K = p.in_features, T = p.rows;
  const WT* weight = static_cast<const WT*>(p.weight);  // (M, K)
  // Widen a block only when more than one tile of x reads it; each thread's copy is kept
  // between calls (no allocation once warm).
  const bool widen = !std::is_same_v<WT, float> && T > 2 * kTileXRows;
  float* block =  // (kBlockWeightRows, K)
      widen ? ThreadScratch(ScratchSlot::kLinearGemvBlock, kBlockWeightRows * K) : nullptr;
  for (int64_t m0 = m_begin; m0 < m_end; m0 += kBlockWeightRows) {
    const int64_t m1 = std::min(m0 + kBlockWeightRows, m_end);
    if (widen) WidenBlock(weight + m0 * K, (m1 - m0) * K, block);
    const int64_t m2 = std::min(m1 + kBlockWeightRows, m_end);
    const int64_t tiles =
        (T + kTileXRows - 1) / kTileXRows * ((m1 - m0 + kTileWeightRows - 1) / kTileWeightRows);
    SpreadPrefetch pf(weight + m1 * K, weight + m2 * K, tiles * std::max<int64_t>(1, K / Lanes()));
    for (int64_t t = 0; t < T; t += kTileXRows) {
      const int n = static_cast<int>(std::min<int64_t>(kTileXRows, T - t));
      const float* x = p.x + t * p.x_stride_row;
      float* out = p.out + t * p.out_stride_row;
      for (int64_t m = m0; m < m1; m += kTileWeightRows) {
        const int r = static_cast<int>(std::min<int64_t>(kTileWeightRows, m1 - m));
        if (widen) {
          TileNR<float>(n, r, p, block + (m - m0) * K, x, out, m, pf);
        } else {
          TileNR<WT>(n, r, p, weight + m * K, x, out, m, pf);
        }
      }
    }
  }
}

// One output row m for all kT rows of x, K unrolled by kU vectors: kT * kU independent
// accumulators. The weight row is read front to back, so a thread streams through its block of
// W in address order (one sequential stream for the prefetchers), each step prefetching the
// lines kAhead bytes ahead of its loads unless kAhead is 0 (stream_prefetch.hpp). The distance
// is a template argument and the prefetch written out here: as a run-time argument the bf16
// decode of m1-130m ran 80 tokens/s against 90-94 (Intel Xeon, alternated), and through
// PrefetchLines GCC 12 emitted no prefetch in the bf16 loop (the f32 one kept them).
template <int kT, int kU, class WT, int64_t kAhead>
HWY_INLINE void DotRow(const LinearParams& p, const WT* HWY_RESTRICT weight, int64_t m) {
  const DF df;
  const int64_t K = p.in_features, W = Lanes();
  const float* HWY_RESTRICT x = p.x;          // (T, K), row stride x_stride_row
  const WT* HWY_RESTRICT w = weight + m * K;  // (K)
  VF acc[kT][kU];
  for (int t = 0; t < kT; ++t) {
    for (int u = 0; u < kU; ++u) acc[t][u] = hn::Zero(df);
  }
  int64_t k = 0;
  for (; k + kU * W <= K; k += kU * W) {
    if constexpr (kAhead != 0) {
      const char* ahead = reinterpret_cast<const char*>(w + k) + kAhead;
      for (int64_t b = 0; b < kU * W * static_cast<int64_t>(sizeof(WT)); b += 64) {
        __builtin_prefetch(ahead + b, /*rw=*/0, /*locality=*/2);
      }
    }
    VF wv[kU];
    for (int u = 0; u < kU; ++u) wv[u] = LoadWeights(df, w + k + u * W);
    for (int t = 0; t < kT; ++t) {
      for (int u = 0; u < kU; ++u) {
        acc[t][u] = hn::MulAdd(wv[u], hn::LoadU(df, x + t * p.x_stride_row + k + u * W), acc[t][u]);
      }
    }
  }
  for (; k + W <= K; k += W) {
    const VF wv = LoadWeights(df, w + k);
    for (int t = 0; t < kT; ++t)
      acc[t][0] = hn::MulAdd(wv, hn::LoadU(df, x + t * p.x_stride_row + k), acc[t][0]);
  }
  for (int t = 0; t < kT; ++t) {
    VF total = acc[t][0];
    for (int u = 1; u < kU; ++u) total = hn::Add(total, acc[t][u]);
    float sum = hn::GetLane(hn::SumOfLanes(df, total));
    for (int64_t j = k; j < K; ++j) sum += x[t * p.x_stride_row + j] * WeightAt(w, j);
    if (p.bias != nullptr) sum += p.bias[m];
    p.out[t * p.out_stride_row + m * p.out_stride_feature] = sum;
  }
}

// bf16 weights at one row of x on AVX2 read as pairs: one 256-bit load of 16 bf16 gives the
// even elements (each u32 shifted left 16) and the odd ones (its high half masked) as two f32
// vectors, against x rearranged once per call into blocks of its 8 even then 8 odd elements
// (PairX). Per 16 weights one load, a shift and an and, where widening 8 at a time takes two
// loads and two shuffles (vpmovzxwd) and two shifts; fewer instructions per weight byte leave
// more of the stream in flight: m1-130m bf16 decode 2-5% faster on an Intel Xeon (AVX2 target,
// docs/benchmarks.md), where the rows also prefetch 4 KiB ahead (stream_prefetch.hpp); the AMD
// CPUs, not measured with it, keep DotRow. The products are summed in another order than
// DotRow's: a T = 1 row's bits may differ from the same row in a batch (the kernels promise
// T-independence from T = 2).
constexpr bool kPairedBf16Rows = HWY_TARGET == HWY_AVX2;

// xp (K rounded down to blocks of 2W): per block x's W even elements, then its W odd ones.
HWY_INLINE void PairX(const float* HWY_RESTRICT x, int64_t K, float* HWY_RESTRICT xp) {
  const int64_t W = Lanes(), B = 2 * W;
  for (int64_t k = 0; k + B <= K; k += B) {
    for (int64_t i = 0; i < W; ++i) {
      xp[k + i] = x[k + 2 * i];
      xp[k + W + i] = x[k + 2 * i + 1];
    }
  }
}

HWY_INLINE void DotRowPairedBf16(const LinearParams& p, const float* HWY_RESTRICT xp,
                                 const hwy::bfloat16_t* HWY_RESTRICT weight, int64_t m) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  constexpr int kU = 4;  // blocks of 2W weights per step: 2 kU accumulators
  const int64_t K = p.in_features, W = Lanes(), B = 2 * W;
  const hwy::bfloat16_t* HWY_RESTRICT w = weight + m * K;  // (K)
  const auto high = hn::Set(du, 0xFFFF0000u);
  VF acc[2 * kU];
  for (auto& a : acc) a = hn::Zero(df);
  // The block of 2W weights at `at` into the accumulators of its even and odd elements.
  const auto block = [&](int64_t at, VF& even, VF& odd) {
    const auto v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(w + at));
    even = hn::MulAdd(hn::BitCast(df, hn::ShiftLeft<16>(v)), hn::LoadU(df, xp + at), even);
    odd = hn::MulAdd(hn::BitCast(df, hn::And(v, high)), hn::LoadU(df, xp + at + W), odd);
  };
  int64_t k = 0;
  for (; k + kU * B <= K; k += kU * B) {
    const char* ahead = reinterpret_cast<const char*>(w + k) + kIntelStreamPrefetchBytes;
    for (int64_t b = 0; b < kU * B * 2; b += 64) __builtin_prefetch(ahead + b, 0, 2);
    for (int u = 0; u < kU; ++u) block(k + u * B, acc[2 * u], acc[2 * u + 1]);
  }
  for (; k + B <= K; k += B) block(k, acc[0], acc[1]);
  VF total = acc[0];
  for (int u = 1; u < 2 * kU; ++u) total = hn::Add(total, acc[u]);
  float sum = hn::GetLane(hn::SumOfLanes(df, total));
  for (int64_t j = k; j < K; ++j) sum += p.x[j] * WeightAt(w, j);
  if (p.bias != nullptr) sum += p.bias[m];
  p.out[m * p.out_stride_feature] = sum;
}

// Up to this many input features, T >= 2 rows take the outer-product kernel (OuterRows): with
// so few multiply-adds per output the tiles' sum of each output's lanes costs more than its
// products (K = 16, the policy network's dt_proj: 7.7 GMAC/s on two AVX-512 cores, against
// 44 this way at T = 60). Its transposed copy of W costs about one lane-sum per weight row, so
// a larger K loses at T = 2-4 (K = 48: 11.8 against 21.7 GMAC/s at T = 2); at K = 32 it lost
// only at T <= 4, at K <= 24 nowhere. The choice depends on K alone, so a row's bits still do
// not depend on T. Tuned for speed only.
constexpr int64_t kOuterMaxK = 32;
// Output vectors per block (the columns of a transposed block of W) and rows of x per pass:
// 3 x 4 accumulators.
constexpr int kOuterVectors = 4;
constexpr int kOuterRows = 3;

// out[t0 + i, m0 + c] = sum_k x[t0 + i, k] wt[k, c] (+ bias[m0 + c]) for i < kT and the n <= C
// columns of the transposed block wt (K, C): each output summed over k in order.
template <int kT>
HWY_INLINE void OuterTile(const LinearParams& p, const float* HWY_RESTRICT wt, int64_t C,
                          int64_t m0, int64_t n, int64_t t0) {
  const DF df;
  const int64_t K = p.in_features, W = Lanes();
  const float* HWY_RESTRICT x = p.x + t0 * p.x_stride_row;
  VF acc[kT][kOuterVectors];
  for (int t = 0; t < kT; ++t) {
    for (int v = 0; v < kOuterVectors; ++v) acc[t][v] = hn::Zero(df);
  }
  for (int64_t k = 0; k < K; ++k) {
    VF wv[kOuterVectors];
    for (int v = 0; v < kOuterVectors; ++v) wv[v] = hn::Load(df, wt + k * C + v * W);
    for (int t = 0; t < kT; ++t) {
      const VF xv = hn::Set(df, x[t * p.x_stride_row + k]);
      for (int v = 0; v < kOuterVectors; ++v) acc[t][v] = hn::MulAdd(xv, wv[v], acc[t][v]);
    }
  }
  // A row-major out takes whole vectors; a partial block or a feature-major out (its outputs
  // T apart) goes through a buffer.
  const bool direct = n == C && p.out_row_major();
  HWY_ALIGN float partial[kOuterVectors * kMaxLanes];
  for (int t = 0; t < kT; ++t) {
    float* out = p.out + (t0 + t) * p.out_stride_row + m0 * p.out_stride_feature;
    for (int v = 0; v < kOuterVectors; ++v) {
      VF sum = acc[t][v];
      if (p.bias != nullptr) sum = hn::Add(sum, hn::LoadU(df, p.bias + m0 + v * W));
      if (direct) {
        hn::StoreU(sum, df, out + v * W);
      } else {
        hn::Store(sum, df, partial + v * W);
      }
    }
    if (!direct) {
      for (int64_t c = 0; c < n; ++c) out[c * p.out_stride_feature] = partial[c];
    }
  }
}

// Output rows [m_begin, m_end) for T >= 2 rows and K <= kOuterMaxK: blocks of C weight rows
// transposed (and widened) into (K, C), each output column a vector lane, x's elements
// broadcast. The block's bias is read whole: past m_end it feeds only discarded lanes, so the
// last block reads the bias through a padded copy.
template <class WT>
void OuterRows(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  const int64_t K = p.in_features, T = p.rows, C = kOuterVectors * Lanes();
  const WT* weight = static_cast<const WT*>(p.weight);                  // (M, K)
  float* wt = ThreadScratch(ScratchSlot::kLinearGemvBlock, K * C + C);  // (K, C), then a bias
  for (int64_t m0 = m_begin; m0 < m_end; m0 += C) {
    const int64_t n = std::min(C, m_end - m0);
    // Row by row of W (read in address order), into the columns of the block (in L1).
    for (int64_t c = 0; c < n; ++c) {
      const WT* w = weight + (m0 + c) * K;
      for (int64_t k = 0; k < K; ++k) wt[k * C + c] = WeightAt(w, k);
    }
    for (int64_t k = 0; n < C && k < K; ++k) std::fill(wt + k * C + n, wt + (k + 1) * C, 0.0f);
    LinearParams q = p;
    if (p.bias != nullptr && n < C) {  // the padded copy, so no lane reads past the bias
      float* bias = wt + K * C;
      std::copy(p.bias + m0, p.bias + m0 + n, bias);
      std::fill(bias + n, bias + C, 0.0f);
      q.bias = bias - m0;
    }
    int64_t t = 0;
    for (; t + kOuterRows <= T; t += kOuterRows) OuterTile<kOuterRows>(q, wt, C, m0, n, t);
    for (; t < T; ++t) OuterTile<1>(q, wt, C, m0, n, t);
  }
}

template <class WT>
void GemvRowsW(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  if (p.rows == 1) {
    // One row of x: memory-bound. One weight row at a time, K unrolled by 8 vectors (8 FMA
    // chains): the thread's block of W streams through in address order. Measured 2x faster
    // on bf16 weights than 8 interleaved rows. Tuned for speed only.
    const WT* weight = static_cast<const WT*>(p.weight);
    if constexpr (kPairedBf16Rows && std::is_same_v<WT, hwy::bfloat16_t>) {
      if (StreamPrefetchBytes() == kIntelStreamPrefetchBytes) {
        float* xp = ThreadScratch(ScratchSlot::kLinearGemvPairedX, p.in_features);
        PairX(p.x, p.in_features, xp);
        for (int64_t m = m_begin; m < m_end; ++m) DotRowPairedBf16(p, xp, weight, m);
        return;
      }
    }
    if (StreamPrefetchBytes() == kIntelStreamPrefetchBytes) {
      for (int64_t m = m_begin; m < m_end; ++m) {
        DotRow<1, 8, WT, kIntelStreamPrefetchBytes>(p, weight, m);
      }
    } else {
      for (int64_t m = m_begin; m < m_end; ++m) DotRow<1, 8, WT, 0>(p, weight, m);
    }
    return;
  }
  if (p.in_features <= kOuterMaxK) return OuterRows<WT>(p, m_begin, m_end);
  TiledRows<WT>(p, m_begin, m_end);
}

}  // namespace

void GemvRowsImpl(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  switch (p.weight_dtype) {
    case DType::kF32:
      return GemvRowsW<float>(p, m_begin, m_end);
    case DType::kBF16:
      return GemvRowsW<hwy::bfloat16_t>(p, m_begin, m_end);
    case DType::kF16:
      return GemvRowsW<hwy::float16_t>(p, m_begin, m_end);
    default:
      return;  // the ops layer admits only the three float dtypes
  }
}

void WidenImpl(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      return WidenBlock(static_cast<const float*>(src), n, dst);
    case DType::kBF16:
      return WidenBlock(static_cast<const hwy::bfloat16_t*>(src), n, dst);
    case DType::kF16:
      return WidenBlock(static_cast<const hwy::float16_t*>(src), n, dst);
    default:  // quantized: whole rows of blocks
      return quant::DequantizeRow(dtype, src, n, dst);
  }
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(GemvRowsImpl);
HWY_EXPORT(WidenImpl);

void LinearGemvRows(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  HWY_DYNAMIC_DISPATCH(GemvRowsImpl)(p, m_begin, m_end);
}

void WidenToF32(const void* src, DType dtype, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(WidenImpl)(src, dtype, n, dst);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

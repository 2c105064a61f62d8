// CPU linear layer, the few-rows kernel: out[t, m] = sum_k x[t, k] W[m, k] + bias[m] for
// T <= kLinearGemvMaxRows rows of x, reading each weight row once for all T rows.
// Dimension legend: T rows of x (the decode batch), K input features, M output features,
// W vector lanes, R weight rows per pass.
//
// At decode the whole model's weights stream through here once per token. With one row of x
// (batch 1) the kernel is bound by memory bandwidth: each weight row is read front to back
// with 8 independent accumulators, a single sequential stream per thread. With more rows it
// becomes bound by FMA throughput: R weight rows are loaded a vector at a time and each vector
// is multiplied into all T rows of x (L1-resident), T * R accumulators. bf16/f16 weights are
// widened to f32 in registers, never stored wider. Each output is reduced by one thread in a
// fixed order (vector partials, then lanes, then the scalar tail over K % W): deterministic.
#include <algorithm>
#include <cstdint>

#include "core/dtype.hpp"
#include "cpu/linear.hpp"
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

// Output rows [m, m + kR) for all kT rows of x.
template <int kT, int kR, class WT>
HWY_INLINE void DotRows(const LinearParams& p, const WT* HWY_RESTRICT weight, int64_t m) {
  const DF df;
  const int64_t K = p.in_features, W = Lanes();
  const float* HWY_RESTRICT x = p.x;          // (T, K), row stride x_stride_row
  const WT* HWY_RESTRICT w = weight + m * K;  // (kR, K)
  VF acc[kT][kR];
  for (int t = 0; t < kT; ++t) {
    for (int r = 0; r < kR; ++r) acc[t][r] = hn::Zero(df);
  }
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    VF wv[kR];
    for (int r = 0; r < kR; ++r) wv[r] = LoadWeights(df, w + r * K + k);
    for (int t = 0; t < kT; ++t) {
      const VF xv = hn::LoadU(df, x + t * p.x_stride_row + k);
      for (int r = 0; r < kR; ++r) acc[t][r] = hn::MulAdd(wv[r], xv, acc[t][r]);
    }
  }
  for (int t = 0; t < kT; ++t) {
    for (int r = 0; r < kR; ++r) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[t][r]));
      for (int64_t j = k; j < K; ++j) sum += x[t * p.x_stride_row + j] * WeightAt(w + r * K, j);
      if (p.bias != nullptr) sum += p.bias[m + r];
      p.out[t * p.out_stride_row + m + r] = sum;
    }
  }
}

// One output row m for all kT rows of x, K unrolled by kU vectors: kT * kU independent
// accumulators. The weight row is read front to back, so a thread streams through its block of
// W in address order (one sequential stream for the prefetchers).
template <int kT, int kU, class WT>
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
    p.out[t * p.out_stride_row + m] = sum;
  }
}

template <int kT, class WT>
void GemvRowsT(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  const WT* weight = static_cast<const WT*>(p.weight);
  if constexpr (kT == 1) {
    // One row of x: memory-bound. One weight row at a time, K unrolled by 8 vectors (8 FMA
    // chains): the thread's block of W streams through in address order. Measured 2x faster
    // on bf16 weights than 8 interleaved rows. Tuned for speed only.
    for (int64_t m = m_begin; m < m_end; ++m) DotRow<1, 8, WT>(p, weight, m);
  } else {
    // Several rows of x: FMA-bound. kR weight rows per pass, each vector loaded once for all
    // kT rows of x: kT * kR <= 16 accumulators plus kR weight vectors fit the 32 AVX-512
    // registers. Tuned for speed only.
    constexpr int kR = kT <= 2 ? 8 : (kT <= 4 ? 4 : 2);
    int64_t m = m_begin;
    for (; m + kR <= m_end; m += kR) DotRows<kT, kR, WT>(p, weight, m);
    for (; m < m_end; ++m) DotRows<kT, 1, WT>(p, weight, m);
  }
}

template <class WT>
void GemvRowsW(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  switch (p.rows) {
    case 1:
      return GemvRowsT<1, WT>(p, m_begin, m_end);
    case 2:
      return GemvRowsT<2, WT>(p, m_begin, m_end);
    case 3:
      return GemvRowsT<3, WT>(p, m_begin, m_end);
    case 4:
      return GemvRowsT<4, WT>(p, m_begin, m_end);
    case 5:
      return GemvRowsT<5, WT>(p, m_begin, m_end);
    case 6:
      return GemvRowsT<6, WT>(p, m_begin, m_end);
    case 7:
      return GemvRowsT<7, WT>(p, m_begin, m_end);
    case 8:
      return GemvRowsT<8, WT>(p, m_begin, m_end);
    default:
      return;  // the ops layer only sends 1..kLinearGemvMaxRows rows here
  }
}
static_assert(kLinearGemvMaxRows == 8, "GemvRowsW has a case per row count");

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

template <class WT>
void WidenT(const WT* src, int64_t n, float* dst) {
  const DF df;
  const int64_t W = Lanes();
  int64_t i = 0;
  for (; i + W <= n; i += W) hn::StoreU(LoadWeights(df, src + i), df, dst + i);
  for (; i < n; ++i) dst[i] = WeightAt(src, i);
}

void WidenImpl(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      return WidenT(static_cast<const float*>(src), n, dst);
    case DType::kBF16:
      return WidenT(static_cast<const hwy::bfloat16_t*>(src), n, dst);
    case DType::kF16:
      return WidenT(static_cast<const hwy::float16_t*>(src), n, dst);
    default:
      return;
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

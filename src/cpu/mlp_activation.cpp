// The MLP's elementwise passes over a block of hidden values, vectorised along the row (the
// hidden features are contiguous). Dimension legend: R rows, C columns of the block, W lanes.
// The activation is a template parameter: one switch per call, none in the loops. A row's
// last C % W columns go through one vector held in a zero-padded stack buffer, so every
// column takes the same arithmetic.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/mlp_activation.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/mlp_activation.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format off
#include "cpu/simd_math-inl.h"
#include "cpu/mlp_activation-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

namespace {

constexpr int64_t kMaxLanes = 64;  // the stack buffer for a row's tail: any vector width

// Runs fn(offset, n) over [0, cols) a vector at a time, n = W but for a last partial vector,
// which LoadPart and StorePart take through a zero-padded stack buffer.
template <class Fn>
HWY_INLINE void ForEachVector(int64_t cols, Fn&& fn) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  int64_t c = 0;
  for (; c + W <= cols; c += W) fn(c, W);
  if (c < cols) fn(c, cols - c);
}

// A vector of `n` <= W floats from p (the rest zero).
HWY_INLINE VF LoadPart(DF df, const float* p, int64_t n, int64_t W) {
  if (n == W) return hn::LoadU(df, p);
  HWY_ALIGN float buf[kMaxLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
  return hn::Load(df, buf);
}

HWY_INLINE void StorePart(DF df, VF v, float* p, int64_t n, int64_t W) {
  if (n == W) return hn::StoreU(v, df, p);
  HWY_ALIGN float buf[kMaxLanes];
  hn::Store(v, df, buf);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
}

template <MlpActivation kAct>
void ForwardRows(const HiddenBlock& b, float gm, float* h, int64_t h_stride, bool keep_pre) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  const VF gmv = hn::Set(df, gm);
  for (int64_t r = 0; r < b.rows; ++r) {
    float* g = b.gate ? b.gate + r * b.gate_stride : nullptr;
    const float* ga = b.gate_add ? b.gate_add + r * b.gate_add_stride : nullptr;
    float* u = b.up + r * b.up_stride;
    const float* ua = b.up_add ? b.up_add + r * b.up_add_stride : nullptr;
    float* hr = h + r * h_stride;
    ForEachVector(b.cols, [&](int64_t c, int64_t n) {
      VF uv = LoadPart(df, u + c, n, W);
      if (ua) uv = hn::Add(uv, LoadPart(df, ua + c, n, W));
      VF hv;
      if (g != nullptr) {
        VF av = LoadPart(df, g + c, n, W);
        if (ga) av = hn::Add(av, LoadPart(df, ga + c, n, W));
        av = hn::Mul(av, gmv);
        hv = hn::Mul(Activate(df, kAct, av), uv);
        if (keep_pre) StorePart(df, av, g + c, n, W);
      } else {
        hv = Activate(df, kAct, uv);
      }
      if (keep_pre) StorePart(df, uv, u + c, n, W);
      StorePart(df, hv, hr + c, n, W);
    });
  }
}

template <MlpActivation kAct>
void BackwardRows(const HiddenBlock& b, float gm, const float* dh, int64_t dh_stride) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  const VF gmv = hn::Set(df, gm);
  for (int64_t r = 0; r < b.rows; ++r) {
    float* a = b.gate ? b.gate + r * b.gate_stride : nullptr;
    float* u = b.up + r * b.up_stride;
    const float* dhr = dh + r * dh_stride;
    ForEachVector(b.cols, [&](int64_t c, int64_t n) {
      const VF dhv = LoadPart(df, dhr + c, n, W);
      const VF uv = LoadPart(df, u + c, n, W);
      if (a != nullptr) {
        const VF av = LoadPart(df, a + c, n, W);
        const VF du = hn::Mul(dhv, Activate(df, kAct, av));
        const VF dg = hn::Mul(hn::Mul(hn::Mul(dhv, uv), ActivateGrad(df, kAct, av)), gmv);
        StorePart(df, du, u + c, n, W);
        StorePart(df, dg, a + c, n, W);
      } else {
        StorePart(df, hn::Mul(dhv, ActivateGrad(df, kAct, uv)), u + c, n, W);
      }
    });
  }
}

}  // namespace

void ActivateForwardImpl(const HiddenBlock& b, const MlpOptions& options, float* h,
                         int64_t h_stride, bool keep_pre) {
  const float gm = options.gate_multiplier;
  switch (options.activation) {
    case MlpActivation::kSilu:
      return ForwardRows<MlpActivation::kSilu>(b, gm, h, h_stride, keep_pre);
    case MlpActivation::kGeluErf:
      return ForwardRows<MlpActivation::kGeluErf>(b, gm, h, h_stride, keep_pre);
    case MlpActivation::kGeluTanh:
      return ForwardRows<MlpActivation::kGeluTanh>(b, gm, h, h_stride, keep_pre);
    case MlpActivation::kRelu:
      return ForwardRows<MlpActivation::kRelu>(b, gm, h, h_stride, keep_pre);
    case MlpActivation::kRelu2:
      return ForwardRows<MlpActivation::kRelu2>(b, gm, h, h_stride, keep_pre);
  }
}

void ActivateBackwardImpl(const HiddenBlock& b, const MlpOptions& options, const float* dh,
                          int64_t dh_stride) {
  const float gm = options.gate_multiplier;
  switch (options.activation) {
    case MlpActivation::kSilu:
      return BackwardRows<MlpActivation::kSilu>(b, gm, dh, dh_stride);
    case MlpActivation::kGeluErf:
      return BackwardRows<MlpActivation::kGeluErf>(b, gm, dh, dh_stride);
    case MlpActivation::kGeluTanh:
      return BackwardRows<MlpActivation::kGeluTanh>(b, gm, dh, dh_stride);
    case MlpActivation::kRelu:
      return BackwardRows<MlpActivation::kRelu>(b, gm, dh, dh_stride);
    case MlpActivation::kRelu2:
      return BackwardRows<MlpActivation::kRelu2>(b, gm, dh, dh_stride);
  }
}

void DotAndScaleRowsImpl(int64_t rows, int64_t cols, float* h, int64_t h_stride, float* dh,
                         int64_t dh_stride, const float* rw, float* drw) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    float* hr = h + r * h_stride;
    float* dhr = dh + r * dh_stride;
    const VF scale = hn::Set(df, rw[r]);
    VF acc = hn::Zero(df);
    ForEachVector(cols, [&](int64_t c, int64_t n) {
      const VF hv = LoadPart(df, hr + c, n, W);
      const VF dhv = LoadPart(df, dhr + c, n, W);
      acc = hn::MulAdd(hv, dhv, acc);
      StorePart(df, hn::Mul(hv, scale), hr + c, n, W);
      StorePart(df, hn::Mul(dhv, scale), dhr + c, n, W);
    });
    drw[r] += hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(ActivateForwardImpl);
HWY_EXPORT(ActivateBackwardImpl);
HWY_EXPORT(DotAndScaleRowsImpl);

void ActivateForward(const HiddenBlock& b, const MlpOptions& options, float* h, int64_t h_stride,
                     bool keep_pre) {
  HWY_DYNAMIC_DISPATCH(ActivateForwardImpl)(b, options, h, h_stride, keep_pre);
}

void ActivateBackward(const HiddenBlock& b, const MlpOptions& options, const float* dh,
                      int64_t dh_stride) {
  HWY_DYNAMIC_DISPATCH(ActivateBackwardImpl)(b, options, dh, dh_stride);
}

void DotAndScaleRows(int64_t rows, int64_t cols, float* h, int64_t h_stride, float* dh,
                     int64_t dh_stride, const float* rw, float* drw) {
  HWY_DYNAMIC_DISPATCH(DotAndScaleRowsImpl)(rows, cols, h, h_stride, dh, dh_stride, rw, drw);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

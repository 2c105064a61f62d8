// Row-level vector math shared by the CPU SSD kernels: the per-head dt row (bias, softplus,
// clamp, decay), the gated output row, and scaled x rows.
// Dimension legend: B batch, L length, H heads, P head dim.
#include <algorithm>

#include "core/dtype.hpp"
#include "cpu/ssd_common.hpp"
#include "cpu/thread_scratch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/ssd_prep.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

constexpr int64_t kMaxLanes = 64;  // upper bound on Lanes(DF) for the scratch below

// dt = clamp(softplus(dt_in + bias)), grad = d dt / d dt_in (0 outside [dt_min, dt_max],
// as mamba_ssm: the clamp passes no gradient), decay = exp(dt * A). One vector of positions
// at a time; the scalar gather covers dt's stride over L.
void SsdDtRowImpl(const SsdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count, float* dt,
                  float* dt_grad, float* decay) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto bias = hn::Set(df, p.dt_bias.data ? p.dt_bias.data[h * p.dt_bias.stride_head] : 0.0f);
  const auto A = hn::Set(df, p.A.data[h * p.A.stride_head]);
  const auto lo = hn::Set(df, p.dt_min), hi = hn::Set(df, p.dt_max);
  const int64_t base = b * p.dt.stride_batch + h;
  HWY_ALIGN float tmp[kMaxLanes];
  for (int64_t i = 0; i < count; i += lanes) {
    const int64_t n = std::min(lanes, count - i);
    for (int64_t j = 0; j < lanes; ++j) {
      tmp[j] =
          j < n ? LoadAsF32(p.dt.data, p.dt.dtype, base + (l0 + i + j) * p.dt.stride_seq) : 0.0f;
    }
    const auto raw = hn::Add(hn::Load(df, tmp), bias);
    const auto unclamped = p.dt_softplus ? Softplus(df, raw) : raw;
    const auto v = hn::Min(hn::Max(unclamped, lo), hi);
    hn::Store(v, df, tmp);
    std::copy(tmp, tmp + n, dt + i);
    if (dt_grad) {  // the forward asks for none: its softplus' derivative is not computed
      const auto grad = p.dt_softplus ? SoftplusGrad(df, raw) : hn::Set(df, 1.0f);
      const auto inside = hn::And(hn::Ge(unclamped, lo), hn::Le(unclamped, hi));
      hn::Store(hn::IfThenElseZero(inside, grad), df, tmp);
      std::copy(tmp, tmp + n, dt_grad + i);
    }
    if (decay) {
      hn::Store(FastExp(df, hn::Mul(v, A)), df, tmp);
      std::copy(tmp, tmp + n, decay + i);
    }
  }
}

// Row `offset` of a (.., P) operand as f32: the data itself when it is f32, else converted
// into scratch (P floats).
const float* RowAsF32(const void* data, DType dtype, int64_t offset, int64_t P, float* scratch) {
  if (dtype == DType::kF32) return static_cast<const float*>(data) + offset;
  RowToF32(data, dtype, offset, P, scratch);
  return scratch;
}

// Calls fn(in, j, out) for each vector of a row of P: fn reads lanes [j, j + lanes) of each
// in[k] and writes one vector at out. The last partial vector goes through scratch copies
// (rows are exactly P long), so fn always sees whole vectors. The input rows go to fn as they
// are with an index, not as pointers advanced per vector: an array of pointers rebuilt every
// vector went through the stack, and its loads were half of the gated output's time (perf,
// SSD forward on AVX2).
template <int kInputs, class Fn>
void ForEachVector(int64_t P, int64_t lanes, const float* const (&rows)[kInputs], float* out,
                   Fn&& fn) {
  int64_t i = 0;
  for (; i + lanes <= P; i += lanes) fn(rows, i, out + i);
  if (i == P) return;
  HWY_ALIGN float tail_in[kInputs][kMaxLanes] = {};
  HWY_ALIGN float tail_out[kMaxLanes];
  const float* in[kInputs];
  for (int k = 0; k < kInputs; ++k) {
    std::copy(rows[k] + i, rows[k] + P, tail_in[k]);
    in[k] = tail_in[k];
  }
  fn(in, 0, tail_out);
  std::copy(tail_out, tail_out + (P - i), out + i);
}

// out[b, l0 + t, h, :] = (y_scale[t] * y[t] + D * x) * silu(z), in out's dtype.
void SsdStoreOutputImpl(const SsdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count,
                        const float* y, int64_t ld_y, const float* y_scale) {
  const DF df;
  const int64_t P = p.headdim, lanes = static_cast<int64_t>(hn::Lanes(df));
  float* scratch = ThreadScratch(ScratchSlot::kSsdPrepRow, 4 * P);
  float* skip = scratch;  // (P)
  std::fill(skip, skip + P, 0.0f);
  if (p.D.data) {
    for (int64_t i = 0; i < P; ++i) {
      skip[i] = p.D.data[h * p.D.stride_head + (p.d_per_channel ? i * p.D.stride_p : 0)];
    }
  }
  const bool out_f32 = p.out.dtype == DType::kF32;
  for (int64_t t = 0; t < count; ++t) {
    const float* xr = RowAsF32(p.x.data, p.x.dtype, p.x.Offset(b, l0 + t, h), P, scratch + P);
    const float* zr =
        p.z.data ? RowAsF32(p.z.data, p.z.dtype, p.z.Offset(b, l0 + t, h), P, scratch + 2 * P) : xr;
    const int64_t out_off = p.out.Offset(b, l0 + t, h);
    float* res = out_f32 ? static_cast<float*>(p.out.data) + out_off : scratch + 3 * P;
    const float* const rows[4] = {y + t * ld_y, xr, zr, skip};
    const auto ys = hn::Set(df, y_scale ? y_scale[t] : 1.0f);
    ForEachVector<4>(P, lanes, rows, res, [&](const float* const* in, int64_t j, float* o) {
      auto v = hn::MulAdd(hn::LoadU(df, in[3] + j), hn::LoadU(df, in[1] + j),
                          hn::Mul(ys, hn::LoadU(df, in[0] + j)));
      if (p.z.data) v = hn::Mul(v, Silu(df, hn::LoadU(df, in[2] + j)));
      hn::StoreU(v, df, o);
    });
    if (!out_f32) RowFromF32(res, P, p.out.data, p.out.dtype, out_off);
  }
}

// dst[t] = v[b, l0 + t, h, :] * scale[t] (1 without scale) * silu(gate[b, l0 + t, h, :]) (1
// without gate); zeros from P up to width. x rows (no gate) and dy = dout * silu(z) rows.
void SsdLoadScaledRowsImpl(const SsdSeqView& v, const SsdSeqView& gate, int64_t P, int64_t b,
                           int64_t h, int64_t l0, int64_t count, const float* scale, float* dst,
                           int64_t ld_dst, int64_t width) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  float* scratch = ThreadScratch(ScratchSlot::kSsdPrepRow, 2 * P);
  for (int64_t t = 0; t < count; ++t) {
    float* row = dst + t * ld_dst;
    const float* vr = RowAsF32(v.data, v.dtype, v.Offset(b, l0 + t, h), P, scratch);
    const float* gr =
        gate.data ? RowAsF32(gate.data, gate.dtype, gate.Offset(b, l0 + t, h), P, scratch + P) : vr;
    const auto sv = hn::Set(df, scale ? scale[t] : 1.0f);
    const float* const rows[2] = {vr, gr};
    ForEachVector<2>(P, lanes, rows, row, [&](const float* const* in, int64_t j, float* o) {
      auto r = hn::Mul(hn::LoadU(df, in[0] + j), sv);
      if (gate.data) r = hn::Mul(r, Silu(df, hn::LoadU(df, in[1] + j)));
      hn::StoreU(r, df, o);
    });
    std::fill(row + P, row + width, 0.0f);
  }
}

// dz = dout * y * silu'(z).
void SsdStoreDzImpl(const SsdBwdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count,
                    const float* y, int64_t ld_y) {
  const DF df;
  const int64_t P = p.headdim, lanes = static_cast<int64_t>(hn::Lanes(df));
  float* scratch = ThreadScratch(ScratchSlot::kSsdPrepRow, 3 * P);
  const bool dz_f32 = p.dz.dtype == DType::kF32;
  for (int64_t t = 0; t < count; ++t) {
    const float* dr = RowAsF32(p.dout.data, p.dout.dtype, p.dout.Offset(b, l0 + t, h), P, scratch);
    const float* zr = RowAsF32(p.z.data, p.z.dtype, p.z.Offset(b, l0 + t, h), P, scratch + P);
    const int64_t off = p.dz.Offset(b, l0 + t, h);
    float* res = dz_f32 ? static_cast<float*>(p.dz.data) + off : scratch + 2 * P;
    const float* const rows[3] = {dr, y + t * ld_y, zr};
    ForEachVector<3>(P, lanes, rows, res, [&](const float* const* in, int64_t j, float* o) {
      const auto v = hn::Mul(hn::Mul(hn::LoadU(df, in[0] + j), hn::LoadU(df, in[1] + j)),
                             SiluGrad(df, hn::LoadU(df, in[2] + j)));
      hn::StoreU(v, df, o);
    });
    if (!dz_f32) RowFromF32(res, P, p.dz.data, p.dz.dtype, off);
  }
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu::ssd {

HWY_EXPORT(SsdDtRowImpl);
HWY_EXPORT(SsdStoreOutputImpl);
HWY_EXPORT(SsdLoadScaledRowsImpl);
HWY_EXPORT(SsdStoreDzImpl);

void LoadDy(const SsdBwdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count,
            const float* scale, float* dst, int64_t ld_dst, int64_t width) {
  HWY_DYNAMIC_DISPATCH(SsdLoadScaledRowsImpl)
  (p.dout, p.z, p.headdim, b, h, l0, count, scale, dst, ld_dst, width);
}

void StoreDz(const SsdBwdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count, const float* y,
             int64_t ld_y) {
  HWY_DYNAMIC_DISPATCH(SsdStoreDzImpl)(p, b, h, l0, count, y, ld_y);
}

void DtRow(const SsdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count, float* dt,
           float* dt_grad, float* decay) {
  HWY_DYNAMIC_DISPATCH(SsdDtRowImpl)(p, b, h, l0, count, dt, dt_grad, decay);
}

void StoreOutput(const SsdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count,
                 const float* y, int64_t ld_y, const float* y_scale) {
  HWY_DYNAMIC_DISPATCH(SsdStoreOutputImpl)(p, b, h, l0, count, y, ld_y, y_scale);
}

void LoadScaledX(const SsdSeqView& x, int64_t headdim, int64_t b, int64_t h, int64_t l0,
                 int64_t count, const float* scale, float* dst, int64_t ld_dst, int64_t width) {
  HWY_DYNAMIC_DISPATCH(SsdLoadScaledRowsImpl)
  (x, SsdSeqView{}, headdim, b, h, l0, count, scale, dst, ld_dst, width);
}

}  // namespace ssmkit::cpu::ssd
#endif  // HWY_ONCE

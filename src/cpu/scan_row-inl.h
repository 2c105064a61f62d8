// Per-row preparation shared by the selective-scan forward and backward: the row's u and
// delta converted to f32, then dt = softplus(delta + delta_bias) and dt * u computed for the
// whole row at once with vector math (one softplus per (b, d, l), not per state element).
#if defined(SSMKIT_CPU_SCAN_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SCAN_ROW_INL_H_
#undef SSMKIT_CPU_SCAN_ROW_INL_H_
#else
#define SSMKIT_CPU_SCAN_ROW_INL_H_
#endif

#include "core/dtype.hpp"
#include "cpu/scan_packing.hpp"
#include "cpu/simd_math-inl.h"
#include "hwy/highway.h"
#include "params/selective_scan_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Fills rb.u, rb.dt, rb.dtu (and rb.ddt_ddelta = d dt / d delta when want_grad) for row
// (b, d); lanes past L hold zeros. Loads z into rb.z when z is present.
template <class DF>
HWY_INLINE void PrepareRow(DF df, const SelectiveScanParams& p, int64_t b, int64_t d,
                           RowBuffers& rb, bool want_grad) {
  const int64_t L = p.seqlen, lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(rb.u.size());
  RowToF32(p.u.data, p.u.dtype, b * p.u.stride_batch + d * p.u.stride_dim, L, rb.u.data());
  RowToF32(p.delta.data, p.delta.dtype, b * p.delta.stride_batch + d * p.delta.stride_dim, L,
           rb.delta_in.data());
  if (p.z.data)
    RowToF32(p.z.data, p.z.dtype, b * p.z.stride_batch + d * p.z.stride_dim, L, rb.z.data());
  for (int64_t l = L; l < padded; ++l) rb.u[l] = rb.delta_in[l] = rb.z[l] = 0.0f;
  const auto bias =
      hn::Set(df, p.delta_bias.data ? p.delta_bias.data[d * p.delta_bias.stride_dim] : 0.0f);
  for (int64_t l = 0; l < padded; l += lanes) {
    const auto x = hn::Add(hn::LoadU(df, rb.delta_in.data() + l), bias);
    auto dt = x;
    if (p.delta_softplus) {
      dt = Softplus(df, x);
      if (want_grad) hn::StoreU(SoftplusGrad(df, x), df, rb.ddt_ddelta.data() + l);
    } else if (want_grad) {
      hn::StoreU(hn::Set(df, 1.0f), df, rb.ddt_ddelta.data() + l);
    }
    hn::StoreU(dt, df, rb.dt.data() + l);
    hn::StoreU(hn::Mul(dt, hn::LoadU(df, rb.u.data() + l)), df, rb.dtu.data() + l);
  }
}

// out = (y + D * u) * silu(z) over the row, written in out's dtype; also leaves y + D*u in
// rb.y (the pre-gate output the backward needs).
template <class DF>
HWY_INLINE void FinishRow(DF df, const SelectiveScanParams& p, int64_t b, int64_t d, RowBuffers& rb,
                          float* gated /* (Lp) scratch */) {
  const int64_t L = p.seqlen, lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(rb.u.size());
  const auto skip = hn::Set(df, p.D.data ? p.D.data[d * p.D.stride_dim] : 0.0f);
  for (int64_t l = 0; l < padded; l += lanes) {
    const auto y = hn::MulAdd(skip, hn::LoadU(df, rb.u.data() + l), hn::LoadU(df, rb.y.data() + l));
    hn::StoreU(y, df, rb.y.data() + l);
    hn::StoreU(p.z.data ? hn::Mul(y, Silu(df, hn::LoadU(df, rb.z.data() + l))) : y, df, gated + l);
  }
  RowFromF32(gated, L, p.out.data, p.out.dtype, b * p.out.stride_batch + d * p.out.stride_dim);
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SCAN_ROW_INL_H_

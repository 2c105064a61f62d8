// Vector math shared by the CPU kernels: softplus, sigmoid, silu on Highway vectors, and
// bf16 <-> f32 conversion of vectors and rows.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
#if defined(SSMKIT_CPU_SIMD_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SIMD_MATH_INL_H_
#undef SSMKIT_CPU_SIMD_MATH_INL_H_
#else
#define SSMKIT_CPU_SIMD_MATH_INL_H_
#endif

#include <cstring>

#include "core/dtype.hpp"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e^x for x in [-87, 88] (clamped outside), relative error < 3e-7: the scans' hot loop.
// Highway's Exp is ~2x slower here; this one drops its special cases, which a clamp covers.
// x = k ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 split in two so k*ln2 is exact);
// e^r by a degree-5 polynomial evaluated in Estrin form (short dependency chains, since the
// scan loop is latency bound); 2^k built in the exponent bits.
template <class D, class V>
HWY_INLINE V FastExp(D d, V x) {
  const hn::RebindToSigned<D> di;
  x = hn::Min(hn::Max(x, hn::Set(d, -87.0f)), hn::Set(d, 88.0f));
  const auto k = hn::NearestInt(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  const V kf = hn::ConvertTo(d, k);
  V r = hn::MulAdd(kf, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(kf, hn::Set(d, -1.428606765330187e-06f), r);
  // e^r = 1 + r + r^2 Q(r),  Q(r) = (1/2 + r/6) + r^2 (1/24 + r/120) + r^4 / 720 (minimax-tuned)
  const V r2 = hn::Mul(r, r);
  const V q01 = hn::MulAdd(hn::Set(d, 1.6666665459e-1f), r, hn::Set(d, 5.0000001201e-1f));
  const V q23 = hn::MulAdd(hn::Set(d, 8.3334519073e-3f), r, hn::Set(d, 4.1665795894e-2f));
  const V q = hn::MulAdd(hn::MulAdd(hn::Set(d, 1.3981999507e-3f), r2, q23), r2, q01);
  const V p = hn::MulAdd(q, r2, hn::Add(r, hn::Set(d, 1.0f)));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(k, hn::Set(di, 127))));
  return hn::Mul(p, scale);
}

// 2^x for the selective scan's decays exp(dt A) = 2^(dt A log2 e), one per state element, in
// the fewest instructions that keep the recurrence accurate. x = k + f, k = round(x),
// |f| <= 1/2 (exact), and 2^f = 1 + f q(f) with q a degree-5 polynomial whose constant term is
// ln 2 (minimax relative error 2e-8 on [-1/2, 1/2]). Writing it as 1 + f q keeps a - 1
// relatively accurate as x -> 0: a slow decay (a near 1) is applied over ~1 / |x| steps, so
// the recurrence accumulates the relative error of a - 1, not of a. Result within 1e-7
// relative. AVX-512 gets f in one instruction (VREDUCEPS) and multiplies by 2^k in one
// (VSCALEFPS, with IEEE overflow to inf and underflow to 0): 9 ops in all. Elsewhere x is
// clamped to [-126, 127] and k added to 2^f's exponent bits: above 2^127 the result saturates
// there, and below 2^-125 it is some value in [0, 2^-125] (2^-126 for x <= -126), never
// negative or NaN.
//
// Exp2Fast<true> is for callers whose x is never above 127 (a decay's exponent, e^-|x|, an
// input already clamped): it skips the upper clamp, one instruction of ~11 off AVX2, with the
// same result.
template <bool kAtMost127 = false, class D, class V>
HWY_INLINE V Exp2Fast(D d, V x) {
  const auto poly = [d](V f) {  // 1 + f q(f)
    V q = hn::MulAdd(hn::Set(d, 1.3378662e-3f), f, hn::Set(d, 9.6653188e-3f));
    q = hn::MulAdd(q, f, hn::Set(d, 5.5503841e-2f));
    q = hn::MulAdd(q, f, hn::Set(d, 2.4022368e-1f));
    q = hn::MulAdd(q, f, hn::Set(d, 6.9314718e-1f));
    return hn::MulAdd(q, f, hn::Set(d, 1.0f));
  };
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (sizeof(V) == 64) {
    const V f{_mm512_reduce_ps(x.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
    return V{_mm512_scalef_ps(poly(f).raw, hn::Sub(x, f).raw)};
  }
#endif
  const hn::RebindToSigned<D> di;
  x = hn::Max(x, hn::Set(d, -126.0f));
  if constexpr (!kAtMost127) x = hn::Min(x, hn::Set(d, 127.0f));
  // k = round(x) without a rounding or a conversion instruction (on AVX2 those are 2 ops plus
  // 3 that fix up the conversion's overflow): t = x + 1.5 * 2^23 lies in [2^23, 2^24), where
  // floats are the integers, so the add rounds x to nearest even as Round does, and t's bits
  // are 0x4B400000 + k. Shifted left by 23 the constant's bits leave the word: k << 23, which
  // an integer add puts into 2^f's exponent field (2^f in [2^-0.5, 2^0.5] has field 126 or
  // 127, so k >= -126 never takes it below 0).
  const V shifter = hn::Set(d, 12582912.0f);
  const V t = hn::Add(x, shifter);
  const V k = hn::Sub(t, shifter);
  const auto exponent = hn::ShiftLeft<23>(hn::BitCast(di, t));
  return hn::BitCast(d, hn::Add(hn::BitCast(di, poly(hn::Sub(x, k))), exponent));
}

// log(1 + e^x), and x itself above 20 (mamba_ssm's threshold: there the two differ by
// < 2e-9 relative). Exp's input is clamped so that the discarded branch never overflows.
template <class D, class V>
HWY_INLINE V Softplus(D d, V x) {
  const V threshold = hn::Set(d, 20.0f);
  const V smooth = hn::Log1p(d, FastExp(d, hn::Min(x, threshold)));
  return hn::IfThenElse(hn::Gt(x, threshold), x, smooth);
}

// 1 / (1 + e^-x); FastExp clamps e^-x below overflow (the result is ~0 there anyway).
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  const V e = FastExp(d, hn::Neg(x));
  return hn::Div(one, hn::Add(one, e));
}

// 1 / x from the hardware estimate and Newton steps, r' = r (2 - x r), each squaring the
// relative error: below 3e-7 for finite x != 0 (a vector divide issues one per ~10 cycles, the
// bottleneck of a row-wise sigmoid otherwise). One step after x86's estimate (14 bits on
// AVX-512, 12 on AVX2); two after ARM's FRECPE (NEON, SVE), which has 8 bits: one step leaves
// 2^-16 = 1.5e-5 there, which broke the MLP and SSD backward tolerances on aarch64.
template <class D, class V>
HWY_INLINE V ReciprocalNewton(D d, V x) {
  const V two = hn::Set(d, 2.0f);
  V r = hn::ApproximateReciprocal(x);
#if HWY_ARCH_ARM
  r = hn::Mul(r, hn::NegMulAdd(x, r, two));
#endif
  return hn::Mul(r, hn::NegMulAdd(x, r, two));
}

// Sigmoid without the divider, for streaming kernels: within ~3e-7 relative of Sigmoid.
// 1 + e^-x lies in [1, 1.7e38] (FastExp clamps), so the reciprocal is finite; below
// x = -87 it may come out 0 instead of a subnormal, where sigmoid underflows anyway.
template <class D, class V>
HWY_INLINE V SigmoidNoDiv(D d, V x) {
  return ReciprocalNewton(d, hn::Add(hn::Set(d, 1.0f), FastExp(d, hn::Neg(x))));
}

// Softplus and Sigmoid for streaming kernels, on Exp2Fast and a reciprocal estimate (no divide;
// Highway's Log1p divides twice). Within 2e-7 relative of the exact functions.
//   softplus(x) = max(x, 0) + log1p(e),  e = e^-|x| in (0, 1], and x itself above 20;
//   log1p(e) = 2 atanh(s) = s P(s^2),  s = e / (2 + e) in (0, 1/3],
// P a degree-4 minimax polynomial (relative error 4e-9): log1p stays relatively accurate as
// e -> 0, so softplus of a very negative x keeps its digits.
template <class D, class V>
HWY_INLINE V SoftplusFast(D d, V x) {
  const V e = Exp2Fast<true>(d, hn::Mul(hn::Abs(x), hn::Set(d, -1.44269504088896341f)));
  const V s = hn::Mul(e, ReciprocalNewton(d, hn::Add(e, hn::Set(d, 2.0f))));
  const V w = hn::Mul(s, s);
  V poly = hn::MulAdd(hn::Set(d, 0.28178334f), w, hn::Set(d, 0.27960601f));
  poly = hn::MulAdd(poly, w, hn::Set(d, 0.40024909f));
  poly = hn::MulAdd(poly, w, hn::Set(d, 0.66666317f));
  poly = hn::MulAdd(poly, w, hn::Set(d, 2.0f));
  const V smooth = hn::MulAdd(s, poly, hn::Max(x, hn::Zero(d)));
  return hn::IfThenElse(hn::Gt(x, hn::Set(d, 20.0f)), x, smooth);
}

// 1 / (1 + e^-x). The exponent is clamped to [-126, 126] so that 1 + e^-x stays a normal
// finite number (the reciprocal's Newton step needs that): below x = -87 the result is
// ~1e-38 rather than smaller. NaN in, NaN out is not guaranteed: callers multiply by x.
template <class D, class V>
HWY_INLINE V SigmoidFast(D d, V x) {
  const V t = hn::Mul(x, hn::Set(d, -1.44269504088896341f));
  const V e = Exp2Fast<true>(d, hn::Min(hn::Max(t, hn::Set(d, -126.0f)), hn::Set(d, 126.0f)));
  return ReciprocalNewton(d, hn::Add(e, hn::Set(d, 1.0f)));
}

// The derivative of Softplus with respect to x: sigmoid(x), and 1 above 20.
template <class D, class V>
HWY_INLINE V SoftplusGrad(D d, V x) {
  return hn::IfThenElse(hn::Gt(x, hn::Set(d, 20.0f)), hn::Set(d, 1.0f), Sigmoid(d, x));
}

// x * sigmoid(x), on SigmoidFast: the gates stream over every (l, d) of a sequence, and a
// vector divide (one per ~10 cycles) made Sigmoid the cost of SSD's output pass. A NaN x
// still gives NaN through the multiply.
template <class D, class V>
HWY_INLINE V Silu(D d, V x) {
  return hn::Mul(x, SigmoidFast(d, x));
}

// d silu / dx = s * (1 + x * (1 - s)), s = sigmoid(x)
template <class D, class V>
HWY_INLINE V SiluGrad(D d, V x) {
  const V s = SigmoidFast(d, x);
  const V one = hn::Set(d, 1.0f);
  return hn::Mul(s, hn::MulAdd(x, hn::Sub(one, s), one));
}

// bf16 <-> f32 on vectors. A bf16 is the top half of an f32, so widening is a shift;
// narrowing rounds to nearest even and keeps NaN quiet, bit for bit as F32ToBf16 in
// core/dtype.hpp (Highway 1.0.3's DemoteTo to bf16 truncates instead).
template <class D>
HWY_INLINE hn::Vec<D> LoadBf16AsF32(D d, const uint16_t* p) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::RebindToUnsigned<D> du32;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
}

template <class D>
HWY_INLINE void StoreF32AsBf16(D d, hn::Vec<D> v, uint16_t* p) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::RebindToUnsigned<D> du32;
  const hn::RebindToSigned<D> di32;
  const auto bits = hn::BitCast(du32, v);
  const auto high = hn::ShiftRight<16>(bits);
  const auto round = hn::Add(hn::Set(du32, 0x7fffu), hn::And(high, hn::Set(du32, 1u)));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, round));
  const auto quiet_nan = hn::Or(high, hn::Set(du32, 0x40u));
  const auto narrow = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet_nan, rounded);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, narrow)), du16, p);
}

// RowToF32 / RowFromF32 of core/dtype.hpp with vector bf16 conversion: n consecutive
// elements from element `offset` of `src`; the same bits as the scalar versions.
// n floats from src to dst (not overlapping) in vectors, a partial last vector as the whole
// vector ending at n (its first lanes written twice, with the same values); rows shorter than
// a vector by memcpy. Short rows (the policy window's 60 steps) paid for a libc call per row.
template <class D>
HWY_INLINE void CopyF32Simd(D d, const float* HWY_RESTRICT src, int64_t n,
                            float* HWY_RESTRICT dst) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (n < lanes) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::LoadU(d, src + i), d, dst + i);
  if (i < n) hn::StoreU(hn::LoadU(d, src + n - lanes), d, dst + n - lanes);
}

template <class D>
HWY_INLINE void RowToF32Simd(D d, const void* src, DType dtype, int64_t offset, int64_t n,
                             float* dst) {
  if (dtype == DType::kF32) return CopyF32Simd(d, static_cast<const float*>(src) + offset, n, dst);
  if (dtype != DType::kBF16) return RowToF32(src, dtype, offset, n, dst);
  const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(LoadBf16AsF32(d, s + i), d, dst + i);
  for (; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
}

template <class D>
HWY_INLINE void RowFromF32Simd(D d, const float* src, int64_t n, void* dst, DType dtype,
                               int64_t offset) {
  if (dtype == DType::kF32) return CopyF32Simd(d, src, n, static_cast<float*>(dst) + offset);
  if (dtype != DType::kBF16) return RowFromF32(src, n, dst, dtype, offset);
  uint16_t* t = static_cast<uint16_t*>(dst) + offset;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) StoreF32AsBf16(d, hn::LoadU(d, src + i), t + i);
  for (; i < n; ++i) t[i] = F32ToBf16(src[i]);
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SIMD_MATH_INL_H_

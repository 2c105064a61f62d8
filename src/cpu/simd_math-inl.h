// Vector math shared by the CPU kernels: softplus, sigmoid, silu on Highway vectors.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
#if defined(SSMKIT_CPU_SIMD_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SIMD_MATH_INL_H_
#undef SSMKIT_CPU_SIMD_MATH_INL_H_
#else
#define SSMKIT_CPU_SIMD_MATH_INL_H_
#endif

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

// The derivative of Softplus with respect to x: sigmoid(x), and 1 above 20.
template <class D, class V>
HWY_INLINE V SoftplusGrad(D d, V x) {
  return hn::IfThenElse(hn::Gt(x, hn::Set(d, 20.0f)), hn::Set(d, 1.0f), Sigmoid(d, x));
}

// x * sigmoid(x)
template <class D, class V>
HWY_INLINE V Silu(D d, V x) {
  return hn::Mul(x, Sigmoid(d, x));
}

// d silu / dx = s * (1 + x * (1 - s)), s = sigmoid(x)
template <class D, class V>
HWY_INLINE V SiluGrad(D d, V x) {
  const V s = Sigmoid(d, x);
  const V one = hn::Set(d, 1.0f);
  return hn::Mul(s, hn::MulAdd(x, hn::Sub(one, s), one));
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SIMD_MATH_INL_H_

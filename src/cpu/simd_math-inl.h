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

// log(1 + e^x), and x itself above 20 (mamba_ssm's threshold: there the two differ by
// < 2e-9 relative, and e^x would only cost precision). Exp's input is clamped so that the
// discarded branch never overflows.
template <class D, class V>
HWY_INLINE V Softplus(D d, V x) {
  const V threshold = hn::Set(d, 20.0f);
  const V smooth = hn::Log1p(d, hn::Exp(d, hn::Min(x, threshold)));
  return hn::IfThenElse(hn::Gt(x, threshold), x, smooth);
}

// 1 / (1 + e^-x); e^-x clamped below overflow (the result is 0 there anyway).
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  const V e = hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, 88.0f)));
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

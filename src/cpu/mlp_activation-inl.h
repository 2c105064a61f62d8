// The MLP activations and their derivatives on Highway vectors (include/ssmkit/mlp.hpp's
// MlpActivation), each within ~1e-6 relative of the exact function.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
#if defined(SSMKIT_CPU_MLP_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_MLP_ACTIVATION_INL_H_
#undef SSMKIT_CPU_MLP_ACTIVATION_INL_H_
#else
#define SSMKIT_CPU_MLP_ACTIVATION_INL_H_
#endif

#include "cpu/simd_math-inl.h"
#include "hwy/highway.h"
#include "ssmkit/mlp.hpp"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max(x, 0) that keeps a NaN (hn::Max may return either operand for NaN).
template <class D, class V>
HWY_INLINE V ReluKeepNaN(D d, V x) {
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Max(x, hn::Zero(d)));
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, relatively accurate in both tails.
// erfc(z) for z = |x| / sqrt 2 >= 0 is the Chebyshev fit erfc(z) = t exp(-z^2 + P(t)),
// t = 1 / (1 + z/2), P of degree 9 (fractional error < 1.2e-7 for every z >= 0; Numerical
// Recipes' erfcc). Phi(x) = erfc(z) / 2 for x < 0 and 1 - erfc(z) / 2 otherwise, so a very
// negative x keeps its digits (GELU's 0.5 x (1 + erf) would cancel there).
template <class D, class V>
HWY_INLINE V NormalCdf(D d, V x) {
  const V z = hn::Mul(hn::Abs(x), hn::Set(d, 0.70710678118654752f));
  const V t = ReciprocalNewton(d, hn::MulAdd(z, hn::Set(d, 0.5f), hn::Set(d, 1.0f)));
  V p = hn::Set(d, 0.17087277f);
  p = hn::MulAdd(p, t, hn::Set(d, -0.82215223f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.48851587f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.13520398f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.27886807f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.18628806f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.09678418f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.37409196f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.00002368f));
  p = hn::MulAdd(p, t, hn::Set(d, -1.26551223f));
  const V half_erfc = hn::Mul(hn::Mul(t, FastExp(d, hn::NegMulAdd(z, z, p))), hn::Set(d, 0.5f));
  const V upper = hn::Sub(hn::Set(d, 1.0f), half_erfc);
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), half_erfc, upper);
}

// sigmoid(2 u), u = sqrt(2/pi) (x + 0.044715 x^3): GELU's tanh form is x (1 + tanh u) / 2
// = x sigmoid(2 u).
template <class D, class V>
HWY_INLINE V GeluTanhGate(D d, V x) {
  const V x2 = hn::Mul(x, x);
  const V inner = hn::Mul(x, hn::MulAdd(x2, hn::Set(d, 0.044715f), hn::Set(d, 1.0f)));
  return SigmoidFast(d, hn::Mul(inner, hn::Set(d, 2.0f * 0.79788456080286536f)));
}

template <class D, class V>
HWY_INLINE V Activate(D d, MlpActivation act, V x) {
  switch (act) {
    case MlpActivation::kSilu:
      return Silu(d, x);
    case MlpActivation::kGeluErf:
      return hn::Mul(x, NormalCdf(d, x));
    case MlpActivation::kGeluTanh:
      return hn::Mul(x, GeluTanhGate(d, x));
    case MlpActivation::kRelu:
      return ReluKeepNaN(d, x);
    case MlpActivation::kRelu2: {
      const V r = ReluKeepNaN(d, x);
      return hn::Mul(r, r);
    }
  }
  return x;
}

// d act / dx. At 0, relu's derivative is 0 (as torch's).
template <class D, class V>
HWY_INLINE V ActivateGrad(D d, MlpActivation act, V x) {
  switch (act) {
    case MlpActivation::kSilu:
      return SiluGrad(d, x);
    case MlpActivation::kGeluErf: {
      // Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
      const V pdf = hn::Mul(FastExp(d, hn::Mul(hn::Mul(x, x), hn::Set(d, -0.5f))),
                            hn::Set(d, 0.39894228040143268f));
      return hn::MulAdd(x, pdf, NormalCdf(d, x));
    }
    case MlpActivation::kGeluTanh: {
      // s + x s (1 - s) 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2), s = sigmoid(2u)
      const V s = GeluTanhGate(d, x);
      const V du =
          hn::Mul(hn::MulAdd(hn::Mul(x, x), hn::Set(d, 3.0f * 0.044715f), hn::Set(d, 1.0f)),
                  hn::Set(d, 2.0f * 0.79788456080286536f));
      const V ds = hn::Mul(s, hn::Sub(hn::Set(d, 1.0f), s));
      return hn::MulAdd(hn::Mul(x, ds), du, s);
    }
    case MlpActivation::kRelu:
      return hn::IfThenElse(hn::IsNaN(x), x,
                            hn::IfThenElseZero(hn::Gt(x, hn::Zero(d)), hn::Set(d, 1.0f)));
    case MlpActivation::kRelu2:
      return hn::Mul(ReluKeepNaN(d, x), hn::Set(d, 2.0f));
  }
  return x;
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_MLP_ACTIVATION_INL_H_

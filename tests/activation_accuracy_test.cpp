// silu's vector form (mlp_activation-inl.h on simd_math-inl.h's SigmoidFast, the sigmoid that
// norm, conv1d, the scans and the state update use too) against its fp64 definition on a dense
// grid, on every SIMD target: a bound on the worst element, which the op tests' random inputs
// reach only by chance. Its reciprocal (ReciprocalNewton) once left 1.5e-5 on ARM, whose
// estimate has 8 bits where x86's has 12 or 14.
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/mlp_activation.hpp"
#include "ref/mlp_ref.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// 2^20 points of [-5, 5], each within 1e-6 relative: FastExp's 3e-7 and the reciprocal's 3e-7,
// then rounding (5.5e-7 at worst on x86's AVX2 and SCALAR and on NEON).
TEST(ActivationAccuracy, SiluWithinBoundOnEverySimdTarget) {
  constexpr int64_t kPoints = int64_t{1} << 20;
  std::vector<float> x(kPoints);
  for (int64_t i = 0; i < kPoints; ++i) x[i] = -5.0f + 10.0f * static_cast<float>(i) / kPoints;
  ForEachSimdTarget([&] {
    std::vector<float> up = x, h(kPoints);
    cpu::HiddenBlock block;
    block.rows = 1;
    block.cols = kPoints;
    block.up = up.data();
    block.up_stride = kPoints;
    cpu::ActivateForward(block, MlpOptions{}, h.data(), kPoints, /*keep_pre=*/false);
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int64_t i = 0; i < kPoints; ++i) {
      const double want = ref::Activation(MlpActivation::kSilu, x[i]);
      if (want == 0.0) continue;
      const double err = std::abs(h[i] - want) / std::abs(want);
      if (!(err <= worst)) worst = err, worst_x = x[i];
    }
    std::printf("  worst relative error %.2e at x = %.7g\n", worst, worst_x);
    EXPECT_LE(worst, 1e-6) << "at x = " << worst_x;
  });
}

}  // namespace
}  // namespace ssmkit::testing

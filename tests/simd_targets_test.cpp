// Forcing a SIMD target (ForEachSimdTarget, `ssmkit bench --target`) really moves the kernels'
// run-time dispatch there: each compiled target the CPU supports, the baseline included, is the
// one DispatchedSimdTarget reports while forced.
#include "core/simd_targets.hpp"

#include <hwy/targets.h>

#include <gtest/gtest.h>

namespace ssmkit::testing {
namespace {

TEST(SimdTargets, ForcingEachCompiledTargetDispatchesToIt) {
  const std::vector<int64_t> targets = CompiledSimdTargets();
  ASSERT_FALSE(targets.empty());
  // The baseline, what the compiler's flags guarantee, is always built and runnable, and is the
  // last. On x86-64 it is the portable fallback: HWY_SCALAR or HWY_EMU128, depending on the
  // Highway release and compiler (Debian 12's Highway 1.0.3 with GCC 12 builds SCALAR). On
  // aarch64 it is NEON, beneath which Highway builds nothing.
  EXPECT_EQ(targets.back(), HWY_STATIC_TARGET) << SimdTargetName(targets.back());
  for (int64_t target : targets) {
    ForceSimdTarget(target);
    EXPECT_EQ(DispatchedSimdTarget(), target) << SimdTargetName(target);
  }
  ForceSimdTarget(0);
  EXPECT_EQ(DispatchedSimdTarget(), targets.front());  // the best again
}

}  // namespace
}  // namespace ssmkit::testing

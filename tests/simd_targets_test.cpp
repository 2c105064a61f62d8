// Forcing a SIMD target (ForEachSimdTarget, `ssmkit bench --target`) really moves the kernels'
// run-time dispatch there: each compiled target the CPU supports, the portable scalar fallback
// included, is the one DispatchedSimdTarget reports while forced.
#include "core/simd_targets.hpp"

#include <hwy/targets.h>

#include <gtest/gtest.h>

namespace ssmkit::testing {
namespace {

TEST(SimdTargets, ForcingEachCompiledTargetDispatchesToIt) {
  const std::vector<int64_t> targets = CompiledSimdTargets();
  ASSERT_FALSE(targets.empty());
  // The portable fallback is always built and runnable: HWY_SCALAR or HWY_EMU128, depending on
  // the Highway release and compiler (Debian 12's Highway 1.0.3 with GCC 12 builds SCALAR).
  EXPECT_TRUE(targets.back() == HWY_SCALAR || targets.back() == HWY_EMU128)
      << SimdTargetName(targets.back());
  for (int64_t target : targets) {
    ForceSimdTarget(target);
    EXPECT_EQ(DispatchedSimdTarget(), target) << SimdTargetName(target);
  }
  ForceSimdTarget(0);
  EXPECT_EQ(DispatchedSimdTarget(), targets.front());  // the best again
}

}  // namespace
}  // namespace ssmkit::testing

// Compiled with the library's Highway defines, so HWY_TARGETS here is the set the kernels were
// built for, which a test or tool translation unit (without those defines) would not see. One
// function per target, DispatchedTarget, reports which one run-time dispatch picks.
#include "core/simd_targets.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/simd_targets.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::HWY_NAMESPACE {

int64_t DispatchedTarget() { return HWY_TARGET; }

}  // namespace ssmkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit {

HWY_EXPORT(DispatchedTarget);

std::vector<int64_t> CompiledSimdTargets() { return hwy::SupportedAndGeneratedTargets(); }

void ForceSimdTarget(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  hwy::GetChosenTarget().DeInit();  // the next dispatch chooses again, from the forced set
}

int64_t DispatchedSimdTarget() { return HWY_DYNAMIC_DISPATCH(DispatchedTarget)(); }

std::string SimdTargetName(int64_t target) { return hwy::TargetName(target); }

}  // namespace ssmkit
#endif  // HWY_ONCE

// The Highway targets libssmkit was compiled for (CMakeLists.txt: SSMKIT_HWY_DEFINES) that this
// CPU can run, best first; and forcing dispatch to one of them (tests run every op on each;
// `ssmkit bench --target` measures each on one machine).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ssmkit {

// Highway target bits (HWY_AVX3, HWY_AVX2, HWY_SCALAR, ...), best first.
std::vector<int64_t> CompiledSimdTargets();

// Makes every dispatch from now on choose `target` (one of CompiledSimdTargets()); 0 restores
// the best the CPU supports.
void ForceSimdTarget(int64_t target);

// The target the library's kernels dispatch to now.
int64_t DispatchedSimdTarget();

// "AVX3", "AVX2", "SCALAR", ...: Highway's names.
std::string SimdTargetName(int64_t target);

}  // namespace ssmkit

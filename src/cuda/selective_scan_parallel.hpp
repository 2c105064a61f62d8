// The "parallel" variant of the Mamba-1 selective scan on CUDA (SSMKIT_CUDA_SCAN=parallel):
// entry points called by selective_scan.cu's dispatch when the variant is picked and applies.
#pragma once

#include "ops/selective_scan_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// Whether the variant's forward handles these arguments (variable B and C, no packed
// sequences, N <= 256, u / delta / z / out of one dtype with 16-byte aligned rows); the
// verified kernel runs the rest.
bool ScanForwardParallelApplies(const SelectiveScanParams& p);
// states_per_lane: 16 (variant "parallel") or 8 ("parallel8").
Status ScanForwardParallel(const SelectiveScanParams& p, int states_per_lane);

}  // namespace ssmkit::cuda

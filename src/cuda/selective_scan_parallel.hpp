// The "parallel" variant of the Mamba-1 selective scan forward on CUDA (the default since the
// H200 run of 2026-11-28; SSMKIT_CUDA_SCAN=original picks the first kernel): entry points called
// by selective_scan.cu's dispatch when the variant is picked and applies.
#pragma once

#include "params/selective_scan_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// Whether the variant's forward handles these arguments (variable B and C, no packed
// sequences, N <= 256, u / delta / z / out of one dtype with 16-byte aligned rows); the
// verified kernel runs the rest.
bool ScanForwardParallelApplies(const SelectiveScanParams& p);
Status ScanForwardParallel(const SelectiveScanParams& p);

}  // namespace ssmkit::cuda

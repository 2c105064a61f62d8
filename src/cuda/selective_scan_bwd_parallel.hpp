// The "parallel" variant of the Mamba-1 selective scan backward on CUDA
// (SSMKIT_CUDA_SCAN_BWD=parallel, cuda/variant.hpp; not the default until a GPU run shows it
// correct and faster): entry points called by selective_scan.cu's dispatch when the variant is
// picked and applies.
#pragma once

#include "params/selective_scan_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// Whether the variant's backward handles these arguments (N <= 16, variable B and C, one
// storage dtype for u, delta, z, B, C, no packed sequences, batch <= 65535); the verified
// kernels run the rest.
bool ScanBackwardParallelApplies(const SelectiveScanBwdParams& p);
Status ScanBackwardParallel(const SelectiveScanBwdParams& p);

}  // namespace ssmkit::cuda

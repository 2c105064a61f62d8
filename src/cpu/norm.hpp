// CPU RMS norms (gated, and residual add + norm): SIMD (Highway, run-time dispatch) within a
// row, rows split over threads (ParallelFor).
#pragma once

#include "params/norm_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status RmsNormForward(const NormParams& p);
Status RmsNormBackward(const NormBwdParams& p);

}  // namespace ssmkit::cpu

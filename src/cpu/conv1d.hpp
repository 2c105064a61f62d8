// CPU causal conv1d: forward, backward and the decode update. SIMD over time (Highway, run-time
// dispatch), rows or channels split over threads (ParallelFor); one thread for small calls.
#pragma once

#include "params/conv1d_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status CausalConv1dForward(const CausalConv1dParams& p);
Status CausalConv1dBackward(const CausalConv1dBwdParams& p);
Status CausalConv1dUpdate(const CausalConv1dUpdateParams& p);

}  // namespace ssmkit::cpu

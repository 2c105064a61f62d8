// CPU selective_state_update (one decode step, both forms): SIMD over the state dimension N
// (Highway, run-time dispatch), heads split over threads when the step is large enough.
#pragma once

#include "params/state_update_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status SelectiveStateUpdate(const StateUpdateParams& p);

}  // namespace ssmkit::cpu

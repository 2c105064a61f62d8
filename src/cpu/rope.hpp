// CPU rotary position embeddings: per token, cos and sin of its R/2 angles once, then every
// head of q and k rotated with SIMD. Tokens split over threads (ParallelFor).
#pragma once

#include "params/rope_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status Rope(const RopeParams& p);

}  // namespace ssmkit::cpu

// CPU MLP and MoE ops (include/ssmkit/mlp.hpp) on checked arguments (src/ops/).
// Dimension legend: T rows, d model width, F hidden width, E experts, k per token.
#pragma once

#include "params/mlp_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status MlpForward(const MlpParams& p);
Status MlpBackward(const MlpBackwardParams& p);
Status MoeForward(const MoeParams& p);
Status MoeBackward(const MoeBackwardParams& p);

}  // namespace ssmkit::cpu

// MoE routing of one token, in f32: the top-k experts and their weights from the router
// logits, and the backward of the weights. Dimension legend: E experts, k selected.
#pragma once

#include <cstdint>

#include "ssmkit/mlp.hpp"

namespace ssmkit::cpu {

// Floats of scratch that RouteToken and RouteTokenBackward take: 3E + k.
int64_t RouteScratchFloats(int64_t E, int64_t k);

// index (k): the selected experts, best first (ties to the lower index, NaN first); weight
// (k): their routing weights. score_bias (E): kSigmoidGroupTopK's correction bias, else null.
void RouteToken(const MoeOptions& options, int64_t E, const float* logits, const float* score_bias,
                int32_t* index, float* weight, float* scratch);

// dlogits (E), overwritten, from dweight (k), the gradient of the token's routing weights.
// The selection passes no gradient.
void RouteTokenBackward(const MoeOptions& options, int64_t E, const float* logits,
                        const int32_t* index, const float* weight, const float* dweight,
                        float* dlogits, float* scratch);

}  // namespace ssmkit::cpu

// The feed-forward blocks: an MLP (with Zamba2's low-rank adapter on its gate/up projection)
// and a mixture of experts with an optional shared expert (Nemotron-H's routed experts
// optionally at a latent width between two projections), on include/ssmkit/mlp.hpp's ops.
// Dimension legend: T tokens, d d_model, F hidden width, r adapter rank, d_x the latent width.
#pragma once

#include <cstdint>

#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

struct MlpActs {
  float* low;      // (T, r): the adapter's low-rank activations (Zamba2)
  float* gate_up;  // (T, 2F): the adapter's output, [gate (F), up (F)] per token
};
int64_t MlpFloats(const ModelConfig& c, int64_t T);
MlpActs CarveMlp(const ModelConfig& c, int64_t T, float* base);

// A MoE with latent experts' activations (none without: MoeFloats is 0).
struct MoeActs {
  float* latent;  // (T, d_x): fc1_latent_proj(x), what the routed experts read
  float* routed;  // (T, d_x): the routed experts' weighted sum, before fc2_latent_proj
  float* shared;  // (T, d): the shared expert's output
};
int64_t MoeFloats(const ModelConfig& c, int64_t T);
MoeActs CarveMoe(const ModelConfig& c, int64_t T, float* base);

// x (T, d) -> out (T, d).
Status MlpBlockForward(const ModelConfig& c, const FeedForwardWeights& w, int64_t T, const float* x,
                       const MlpActs& a, float* out);
Status MoeBlockForward(const ModelConfig& c, const FeedForwardWeights& w, int64_t T, const float* x,
                       const MoeActs& a, float* out);

}  // namespace ssmkit::model

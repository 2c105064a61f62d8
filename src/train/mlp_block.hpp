// The MLP block for training: GraniteMoeHybrid's shared_mlp, a gated MLP whose gate and up
// projections are one fused matrix (input_linear (2F, d), chunked [gate, up]) and whose down
// projection is output_linear (d, F); forward and backward are include/ssmkit/mlp.hpp's ops.
//
// Dimension legend: M = Bt * L tokens, d d_model, F hidden width (ffn.intermediate).
//
//   out = (act(normed W_gate^T) * (normed W_up^T)) W_down^T      act: ffn.activation (silu)
#pragma once

#include <vector>

#include "ssmkit/status.hpp"
#include "train/block.hpp"

namespace ssmkit::train {

struct MlpSaved {};  // MlpBackward recomputes the hidden activations from the input

struct MlpScratch {             // shared by the MLP blocks
  std::vector<float> dgate_up;  // (2F, d)
  std::vector<float> ddown;     // (d, F)
};

// normed: (M, d) the block's input; out: (M, d).
Status MlpBlockForward(const BlockArgs& args, const float* normed, MlpSaved* saved,
                       MlpScratch* scratch, float* out);

// dout: (M, d). Adds the parameter gradients into args.grads and writes dnormed (M, d).
Status MlpBlockBackward(const BlockArgs& args, const float* normed, const MlpSaved& saved,
                        const float* dout, MlpScratch* scratch, float* dnormed);

}  // namespace ssmkit::train

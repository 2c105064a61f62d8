// What a block (a Mamba-1 or Mamba-2 mixer, attention, an MLP) sees of the model during
// training: the sizes of the micro-batch, the block's parameters and the gradient buffer it
// accumulates into; and the one interface the model drives every block through.
//
// Dimension legend: Bt batch, L sequence length, M = Bt * L tokens, d d_model.
#pragma once

#include <cstdint>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "train/param_table.hpp"

namespace ssmkit::train {

struct BlockArgs {
  const ModelConfig* config = nullptr;
  int64_t batch = 0;              // Bt
  int64_t seqlen = 0;             // L
  const float* params = nullptr;  // the flat parameter buffer
  float* grads = nullptr;         // the flat gradient buffer (accumulated into)
  LayerOffsets layer;             // this block's tensors

  int64_t tokens() const { return batch * seqlen; }
  const float* P(int64_t offset) const { return params + offset; }
  float* G(int64_t offset) const { return grads + offset; }
};

// A block of the residual stream: out = block(normed). Forward keeps what Backward needs
// (each block object holds its own layer's activations); Backward adds the parameter
// gradients into args.grads and writes the gradient of its input.
class TrainBlock {
 public:
  virtual ~TrainBlock() = default;
  // normed: (M, d) the block's input; out: (M, d).
  virtual Status Forward(const BlockArgs& args, const float* normed, float* out) = 0;
  // dout: (M, d); dnormed: (M, d), overwritten. `normed` is the forward's input.
  virtual Status Backward(const BlockArgs& args, const float* normed, const float* dout,
                          float* dnormed) = 0;
};

}  // namespace ssmkit::train

// What a mixer block (Mamba-1 or Mamba-2) sees of the model during training: the sizes of the
// micro-batch, the layer's parameters and the gradient buffer it accumulates into.
//
// Dimension legend: Bt batch, L sequence length, M = Bt * L tokens, d d_model.
#pragma once

#include <cstdint>

#include "ssmkit/model.hpp"
#include "train/param_table.hpp"

namespace ssmkit::train {

struct BlockArgs {
  const ModelConfig* config = nullptr;
  int64_t batch = 0;              // Bt
  int64_t seqlen = 0;             // L
  const float* params = nullptr;  // the flat parameter buffer
  float* grads = nullptr;         // the flat gradient buffer (accumulated into)
  LayerOffsets layer;

  int64_t tokens() const { return batch * seqlen; }
  const float* P(int64_t offset) const { return params + offset; }
  float* G(int64_t offset) const { return grads + offset; }
};

}  // namespace ssmkit::train

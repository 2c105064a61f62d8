// The parameters of a Mamba-1 or Mamba-2 language model, one struct per layer, as tensor views.
// Dimension legend: d d_model, V vocab, D d_inner, N state size, K conv width, R dt_rank,
// H heads, P head dim, G groups, C conv channels (Mamba-1: D; Mamba-2: D + 2 G N).
//
// The matrices (embedding, projections, LM head) are views into the memory-mapped checkpoint,
// in its dtype. The small vectors (norm weights, conv weights and biases, A, D, dt_bias) are
// f32 copies owned by ModelWeights, since the ops take them in f32; A = -exp(A_log) is computed
// once at load. The raw A_log view is kept beside A for a later training pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

struct Mamba1Layer {
  Tensor norm;           // (d) f32
  Tensor in_proj;        // (2D, d)
  Tensor in_proj_bias;   // optional (2D) f32
  Tensor conv_weight;    // (D, K) f32
  Tensor conv_bias;      // optional (D) f32
  Tensor x_proj;         // (R + 2N, D)
  Tensor dt_proj;        // (D, R)
  Tensor dt_bias;        // (D) f32: dt_proj's bias, added inside the scan before softplus
  Tensor A_log;          // (D, N) as stored
  Tensor A;              // (D, N) f32, -exp(A_log)
  Tensor D;              // (D) f32
  Tensor out_proj;       // (d, D)
  Tensor out_proj_bias;  // optional (d) f32
};

struct Mamba2Layer {
  Tensor norm;           // (d) f32
  Tensor in_proj;        // (2D + 2GN + H, d): rows [z (D), x (D), B (GN), C (GN), dt (H)]
  Tensor in_proj_bias;   // optional (2D + 2GN + H) f32
  Tensor conv_weight;    // (C, K) f32
  Tensor conv_bias;      // optional (C) f32
  Tensor dt_bias;        // (H) f32
  Tensor A_log;          // (H) as stored
  Tensor A;              // (H) f32, -exp(A_log)
  Tensor D;              // (H) or (H, P) f32
  Tensor gated_norm;     // (D) f32
  Tensor out_proj;       // (d, D)
  Tensor out_proj_bias;  // optional (d) f32
};

struct ModelWeights {
  Tensor embedding;                 // (V, d)
  std::vector<Mamba1Layer> mamba1;  // n_layer entries for a Mamba-1 model
  std::vector<Mamba2Layer> mamba2;  // n_layer entries for a Mamba-2 model
  Tensor norm_f;                    // (d) f32
  Tensor lm_head;                   // (V, d): the embedding when tied

  // Storage of the f32 copies and of random weights; views above point into it.
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  int64_t parameter_count = 0;
};

// Binds every tensor the config calls for, checking name, dtype (f32, bf16, f16) and shape;
// a missing tensor, an unexpected one, or a wrong shape is an error naming the file and the
// tensor. `embedding_name` is "backbone.embeddings.weight" (Hugging Face) or
// "backbone.embedding.weight" (state-spaces).
Status BindWeights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                   ModelWeights* weights);

// Random weights of `dtype` for the matrices (uniform, std 0.02), and a fresh model's vectors:
// norms 1, D 1, A_log = log(1..N) (Mamba-1) or log(1..H) (Mamba-2), dt_bias = softplus^-1 of a
// log-uniform dt in [1e-3, 1e-1], conv weights uniform in +-1/sqrt(K).
Status RandomWeights(const ModelConfig& config, DType dtype, uint64_t seed, ModelWeights* weights);

// Bytes of weights one decode step reads: every matrix and per-layer vector once, the LM head,
// and one embedding row.
int64_t DecodeWeightBytes(const ModelConfig& config, const ModelWeights& weights);

}  // namespace ssmkit::model

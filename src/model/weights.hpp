// The parameters of a model, one struct per block, as tensor views.
// Dimension legend: d d_model, V vocab, D d_inner, N state size, K conv width, R dt_rank,
// H heads, P head dim, G groups, C conv channels (Mamba-1: D; Mamba-2: D + 2 G N),
// I in_proj outputs, Ha / Hk attention query / key-value heads, E attention head dim, X the
// width attention reads (d; Zamba2: 2 d), F MLP hidden width, Ex experts, r adapter rank.
//
// The matrices (embedding, projections, experts, LM head) are views into the weight source
// (memory-mapped checkpoint), in its dtype. The small vectors (norm weights, conv weights and
// biases, A, D, dt_bias, biases) are f32 copies owned by ModelWeights, since the ops take them
// in f32; A = -exp(A_log) is computed once at load. The raw A_log view is kept beside A for a
// later training pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/weight_source.hpp"
#include "ssmkit/mlp.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

struct Mamba1Weights {
  Tensor in_proj;        // (2D, d)
  Tensor in_proj_bias;   // optional (2D) f32
  Tensor conv_weight;    // (D, K) f32
  Tensor conv_bias;      // optional (D) f32
  Tensor x_proj;         // (R + 2N, D)
  Tensor dt_norm;        // optional (R) f32: Jamba's RMSNorms on dt_in, B and C
  Tensor b_norm;         // optional (N) f32
  Tensor c_norm;         // optional (N) f32
  Tensor dt_proj;        // (D, R)
  Tensor dt_bias;        // (D) f32: dt_proj's bias, added inside the scan before softplus
  Tensor A_log;          // (D, N) as stored
  Tensor A;              // (D, N) f32, -exp(A_log)
  Tensor D;              // (D) f32
  Tensor out_proj;       // (d, D)
  Tensor out_proj_bias;  // optional (d) f32
};

struct Mamba2Weights {
  Tensor in_proj;        // (I, d): rows [z (D), x (D), B (GN), C (GN), dt (H)]
  Tensor in_proj_bias;   // optional (I) f32
  Tensor in_proj_scale;  // optional (I) f32: multiplies in_proj's output (Falcon-H1's muP vector)
  Tensor conv_weight;    // (C, K) f32
  Tensor conv_bias;      // optional (C) f32
  Tensor dt_bias;        // (H) f32
  Tensor A_log;          // (H) as stored
  Tensor A;              // (H) f32, -exp(A_log)
  Tensor D;              // (H) or (H, P) f32
  Tensor gated_norm;     // (D) f32; absent when the model gates without a norm
  Tensor out_proj;       // (d, D)
  Tensor out_proj_bias;  // optional (d) f32
};

// A low-rank adapter out += b(a(x)) (Zamba2's LoRA on shared weights).
struct Adapter {
  Tensor a;  // (r, in)
  Tensor b;  // (out, r)
  bool defined() const { return a.defined(); }
};

struct AttentionWeights {
  Tensor q, k, v;                           // (Ha E, X), (Hk E, X), (Hk E, X)
  Tensor q_bias, k_bias, v_bias;            // optional f32
  Tensor o;                                 // (d, Ha E)
  Tensor o_bias;                            // optional (d) f32
  Adapter q_adapter, k_adapter, v_adapter;  // optional (Zamba2)
};

struct FeedForwardWeights {
  MlpWeights mlp;                   // an MLP block, or a Zamba2 shared block's MLP
  Adapter gate_up_adapter;          // optional (Zamba2): (2F) outputs chunked [gate, up]
  Tensor router;                    // MoE: (Ex, d)
  std::vector<MlpWeights> experts;  // MoE: Ex experts (views into the fused tensors below)
  MlpWeights shared_expert;         // MoE: optional
  Tensor score_correction_bias;     // MoE with sigmoid group routing: (Ex) f32
  // MoE with latent experts (FeedForwardConfig::latent, d_x): fc1_latent_proj (d_x, d) and
  // fc2_latent_proj (d, d_x), their biases (d_x) / (d) optional.
  Tensor latent_down, latent_down_bias;
  Tensor latent_up, latent_up_bias;
  // Stored fused layouts the views above come from: a (2F, d) [gate, up] matrix, and the
  // experts' (Ex, 2F, d) / (Ex, d, F) tensors, or (GGUF files) gate and up stacked apart, each
  // (Ex, F, d).
  Tensor fused_gate_up;
  Tensor experts_gate_up, experts_down;
  Tensor experts_gate, experts_up;
};

struct Block {
  BlockSpec spec;
  Tensor norm;        // (d) f32 RMSNorm of the block's input (Zamba2's shared block: (2d))
  Tensor ffn_norm;    // Zamba2's shared block: (d) f32, before its MLP
  Tensor out_linear;  // Zamba2's shared block: (d, d), after its MLP
  Mamba1Weights mamba1;
  Mamba2Weights mamba2;
  AttentionWeights attention;
  FeedForwardWeights ffn;
  int64_t ssm_cache = -1;  // index of this block's conv + SSM state, if it has one
  int64_t kv_cache = -1;   // index of this block's KV cache, if it has one
};

struct ModelWeights {
  Tensor embedding;           // (V, d)
  std::vector<Block> blocks;  // ModelConfig::block_list(), in order
  Tensor norm_f;              // (d) f32
  Tensor lm_head;             // (V, d): the embedding when tied
  int64_t ssm_caches = 0;     // blocks with a conv + SSM state
  int64_t kv_caches = 0;      // blocks with a KV cache

  // Storage of the f32 copies and of random weights; views above point into it.
  std::vector<std::unique_ptr<uint8_t[]>> owned;
  int64_t parameter_count = 0;
};

// Binds every tensor the config calls for, checking name, dtype (f32, bf16, f16) and shape;
// a missing tensor, an unexpected one, or a wrong shape is an error naming the file and the
// tensor. The names are the family's (model/tensor_names.hpp), in either of the spellings
// checkpoints use where transformers renamed them.
Status BindWeights(const ModelConfig& config, const WeightSource& source, ModelWeights* weights);

// Random weights of `dtype` for the matrices (uniform, std 0.02), and a fresh model's vectors:
// norms 1, D 1, A_log = log(1..N) (Mamba-1) or log(1..H) (Mamba-2), dt_bias = softplus^-1 of a
// log-uniform dt in [1e-3, 1e-1], conv weights uniform in +-1/sqrt(K), biases 0.
Status RandomWeights(const ModelConfig& config, DType dtype, uint64_t seed, ModelWeights* weights);

// Bytes of weights one decode step reads: every matrix and per-layer vector once (every expert
// of an MoE), the LM head, and one embedding row.
int64_t DecodeWeightBytes(const ModelConfig& config, const ModelWeights& weights);

}  // namespace ssmkit::model

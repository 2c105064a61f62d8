// The attention block for training: q, k, v from one projection (the three weights sit
// contiguously in the parameter buffer), rotary embeddings at positions 0..L-1 of each
// sequence (none for "nope" layers), causal GQA attention, o_proj; and its backward. Composed
// from the public ops (ssmkit/rope.hpp, ssmkit/attention.hpp) and the trainer's GEMM.
//
// Dimension legend: Bt batch, L length, M = Bt * L, d d_model, Ha / Hk query / key-value heads,
// E head dim, W = (Ha + 2 Hk) E the fused q, k, v row.
//
//   [q, k, v] = normed W_qkv^T                 W_qkv = [q_proj (Ha E); k_proj (Hk E); v_proj]
//   q, k      = rope(q, k, position l)          (rotary_dim > 0)
//   att       = attention(q, k, v, causal, scale = attention.scale or 1 / sqrt(E))
//   out       = att W_o^T                       (M, d)
#pragma once

#include <cstdint>
#include <vector>

#include "ssmkit/status.hpp"
#include "train/block.hpp"

namespace ssmkit::train {

struct AttentionSaved {    // the forward's activations, kept for the backward
  std::vector<float> qkv;  // (M, W): q and k rotated
  std::vector<float> att;  // (M, Ha E): the attention output
  std::vector<float> lse;  // (Bt, Ha, L): the softmax's log-sum-exp
};

struct AttentionScratch {          // shared by the attention blocks
  std::vector<int32_t> positions;  // (Bt, L): l in every row
  std::vector<float> datt;         // (M, Ha E)
  std::vector<float> dq;           // (M, Ha E)
  std::vector<float> dk, dv;       // (M, Hk E)
  std::vector<float> dqkv;         // (M, W)
};

// normed: (M, d) the block's input; out: (M, d).
Status AttentionBlockForward(const BlockArgs& args, const float* normed, AttentionSaved* saved,
                             AttentionScratch* scratch, float* out);

// dout: (M, d). Adds the parameter gradients into args.grads and writes dnormed (M, d).
Status AttentionBlockBackward(const BlockArgs& args, const float* normed,
                              const AttentionSaved& saved, const float* dout,
                              AttentionScratch* scratch, float* dnormed);

}  // namespace ssmkit::train

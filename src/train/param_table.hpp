// The trainable parameters of a language model in one flat f32 buffer, named and shaped as
// Hugging Face stores them, so that a checkpoint is the buffer written tensor by tensor (and
// the engine loads it unchanged): MambaForCausalLM / Mamba2ForCausalLM, or a hybrid of
// Mamba-2 and attention layers each followed by an MLP, GraniteMoeHybridForCausalLM's dense
// form (model_type "granitemoehybrid", no experts).
//
// Dimension legend: d d_model, V vocab, D d_inner, N state size, K conv width, R dt_rank,
// H heads, G groups, C conv channels (Mamba-1: D; Mamba-2: D + 2 G N),
// I in_proj rows (Mamba-1: 2D; Mamba-2: 2D + 2GN + H), Ha / Hk attention query / key-value
// heads, E attention head dim, W = (Ha + 2 Hk) E, F MLP hidden width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::train {

struct ParamInfo {
  std::string name;            // "backbone.layers.0.mixer.in_proj.weight"
  std::vector<int64_t> shape;  // as stored in the checkpoint, e.g. conv1d.weight (C, 1, K)
  int64_t offset = 0;          // into the flat buffer, in floats
  int64_t numel = 0;
  bool weight_decay = false;  // AdamW decays matrices only (see ParamTable::Build)
};

// Offsets (in floats) of one block's tensors; -1 where the block has none.
struct LayerOffsets {
  int64_t norm = -1;        // (d): the block's pre-norm
  int64_t in_proj = -1;     // (I, d)
  int64_t conv_w = -1;      // (C, 1, K)
  int64_t conv_b = -1;      // (C)
  int64_t x_proj = -1;      // Mamba-1 (R + 2N, D)
  int64_t dt_proj = -1;     // Mamba-1 (D, R)
  int64_t dt_bias = -1;     // Mamba-1 dt_proj.bias (D); Mamba-2 dt_bias (H)
  int64_t A_log = -1;       // Mamba-1 (D, N); Mamba-2 (H)
  int64_t D = -1;           // Mamba-1 (D); Mamba-2 (H)
  int64_t gated_norm = -1;  // Mamba-2 (D)
  int64_t out_proj = -1;    // (d, D)
  int64_t qkv = -1;         // attention: q_proj (Ha E, d), k_proj, v_proj (Hk E, d), adjacent
  int64_t o_proj = -1;      // attention (d, Ha E)
  int64_t mlp_in = -1;      // MLP input_linear (2F, d): rows [gate (F), up (F)]
  int64_t mlp_out = -1;     // MLP output_linear (d, F)
};

class ParamTable {
 public:
  // The tensors `config` calls for, in checkpoint order. Training supports conv_bias = true,
  // proj_bias = false, Mamba-2's D of one value per head, vocab_size == config_vocab_size
  // (no padding rows) and, for Mamba-2, ngroups == 1 (the gated norm then matches both
  // mamba_ssm and transformers); hybrids: the "granitemoehybrid" family without experts,
  // attention without biases or window, Granite's four multipliers (any others 1); anything
  // else is an invalid-argument error naming the field.
  static Status Build(const ModelConfig& config, ParamTable* table);

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo* Find(const std::string& name) const;
  int64_t total() const { return total_; }  // floats in the flat buffer
  // One entry per block of config.block_list() (a pure Mamba model: one per layer).
  const std::vector<LayerOffsets>& blocks() const { return blocks_; }
  int64_t embedding() const { return embedding_; }  // (V, d)
  int64_t norm_f() const { return norm_f_; }        // (d)
  int64_t lm_head() const { return lm_head_; }      // (V, d); = embedding() when tied

 private:
  int64_t Add(std::string name, std::vector<int64_t> shape, bool weight_decay);
  void AddMamba1(const ModelConfig& config, const std::string& prefix, LayerOffsets* o);
  void AddMamba2(const ModelConfig& config, const std::string& prefix, LayerOffsets* o);
  void AddAttention(const ModelConfig& config, const std::string& prefix, LayerOffsets* o);
  void AddMlp(const ModelConfig& config, const std::string& prefix, LayerOffsets* o);

  std::vector<ParamInfo> params_;
  std::vector<LayerOffsets> blocks_;
  int64_t total_ = 0;
  int64_t embedding_ = -1, norm_f_ = -1, lm_head_ = -1;
};

}  // namespace ssmkit::train

// The trainable parameters of a Mamba-1 or Mamba-2 language model in one flat f32 buffer,
// named and shaped as Hugging Face's MambaForCausalLM / Mamba2ForCausalLM store them, so that
// a checkpoint is the buffer written tensor by tensor (and the engine loads it unchanged).
//
// Dimension legend: d d_model, V vocab, D d_inner, N state size, K conv width, R dt_rank,
// H heads, G groups, C conv channels (Mamba-1: D; Mamba-2: D + 2 G N),
// I in_proj rows (Mamba-1: 2D; Mamba-2: 2D + 2GN + H).
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

// Offsets (in floats) of one layer's tensors; -1 where the architecture has none.
struct LayerOffsets {
  int64_t norm = -1;        // (d)
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
};

class ParamTable {
 public:
  // The tensors `config` calls for, in checkpoint order. Training supports conv_bias = true,
  // proj_bias = false, Mamba-2's D of one value per head, vocab_size == config_vocab_size
  // (no padding rows) and, for Mamba-2, ngroups == 1 (the gated norm then matches both
  // mamba_ssm and transformers); anything else is an invalid-argument error naming the field.
  static Status Build(const ModelConfig& config, ParamTable* table);

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo* Find(const std::string& name) const;
  int64_t total() const { return total_; }  // floats in the flat buffer
  const std::vector<LayerOffsets>& layers() const { return layers_; }
  int64_t embedding() const { return embedding_; }  // (V, d)
  int64_t norm_f() const { return norm_f_; }        // (d)
  int64_t lm_head() const { return lm_head_; }      // (V, d); = embedding() when tied

 private:
  int64_t Add(std::string name, std::vector<int64_t> shape, bool weight_decay);

  std::vector<ParamInfo> params_;
  std::vector<LayerOffsets> layers_;
  int64_t total_ = 0;
  int64_t embedding_ = -1, norm_f_ = -1, lm_head_ = -1;
};

}  // namespace ssmkit::train

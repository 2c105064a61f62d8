// The named sizes of `ssmkit train --arch hybrid`: the Mamba-2 sizes of TrainSizeConfig with
// attention layers at a period and a SwiGLU MLP after every mixer, as a dense
// GraniteMoeHybrid (include/ssmkit/train.hpp).
#include <cmath>
#include <string>

#include "ssmkit/train.hpp"

namespace ssmkit {

Status TrainHybridSizeConfig(const std::string& size, int64_t attention_every,
                             ModelConfig* config) {
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR(TrainSizeConfig(ModelArch::kMamba2, size, &c));
  if (attention_every < 1 || attention_every > c.n_layer) {
    return Status::InvalidArgument("train: --attention-every: expected 1.." +
                                   std::to_string(c.n_layer) + " (the " + size + " size has " +
                                   std::to_string(c.n_layer) + " layers), given " +
                                   std::to_string(attention_every));
  }
  c.family = "granitemoehybrid";
  c.max_position_embeddings = 4096;
  AttentionConfig& a = c.attention;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = c.d_model / a.num_heads;  // GraniteMoeHybrid's: hidden_size / heads
  a.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  a.rotary_dim = a.head_dim;
  a.rope_theta = 10000.0;
  FeedForwardConfig& f = c.ffn;
  f.activation = "silu";
  f.gated = true;
  f.intermediate = f.shared_intermediate = 2 * c.d_model;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const bool attention = (i + 1) % attention_every == 0;
    c.blocks.push_back({attention ? BlockKind::kAttention : BlockKind::kMamba2, i});
    c.blocks.push_back({BlockKind::kMlp, i});
  }
  SSMKIT_RETURN_IF_ERROR(c.Validate());
  *config = c;
  return Status::Ok();
}

}  // namespace ssmkit

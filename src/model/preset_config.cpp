// The benchmark shapes of docs/targets.md as ModelConfigs, for random weights:
//   - m1-130m, m2-130m, m1-2.8b, m2-2.7b: the pure Mamba checkpoints' shapes (state-spaces'
//     mamba-130m / mamba2-130m / mamba-2.8b / mamba2-2.7b), set field by field;
//   - granite-4.0-h-350m, granite-4.0-h-1b, falcon-h1-0.5b: the hybrids, as config.json text
//     read by the same family readers as a checkpoint on disk (model/family_*.cpp), so that the
//     block list, the attention and the multipliers are what loading the published files gives.
// The texts hold the keys of the published config.json files that shape the model (sizes,
// layer list, heads, multipliers, rope); token ids and training keys are left out.
// granite-4.0-h-1b: its sizes and layer list are the published file's; its four multipliers
// were not in the copies we could read, so it carries the 350m's with the attention
// multiplier 1 / head_dim (they scale values and do not change the cost a benchmark measures).
#include <string>

#include "model/config.hpp"

namespace ssmkit {
namespace {

constexpr const char* kGranite350m = R"({
  "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
  "attention_bias": false, "attention_multiplier": 0.015625, "embedding_multiplier": 12,
  "hidden_size": 768, "intermediate_size": 2048, "logits_scaling": 3,
  "layer_types": ["mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba",
    "mamba", "mamba", "attention", "mamba", "mamba", "attention", "mamba", "mamba", "mamba",
    "attention", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba",
    "attention", "mamba", "mamba", "mamba", "mamba"],
  "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_head": 32, "mamba_d_state": 128,
  "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_proj_bias": false,
  "max_position_embeddings": 32768, "num_attention_heads": 12, "num_experts_per_tok": 0,
  "num_hidden_layers": 32, "num_key_value_heads": 4, "num_local_experts": 0,
  "position_embedding_type": "nope", "residual_multiplier": 0.246, "rms_norm_eps": 1e-05,
  "rope_theta": 10000, "shared_intermediate_size": 2048, "tie_word_embeddings": true,
  "vocab_size": 100352})";

constexpr const char* kGranite1b = R"({
  "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
  "attention_bias": false, "attention_multiplier": 0.0078125, "embedding_multiplier": 12,
  "hidden_size": 1536, "intermediate_size": 4096, "logits_scaling": 3,
  "layer_types": ["mamba", "mamba", "mamba", "mamba", "mamba", "attention", "mamba", "mamba",
    "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "attention", "mamba", "mamba",
    "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "attention", "mamba", "mamba",
    "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "mamba", "attention", "mamba", "mamba",
    "mamba", "mamba"],
  "mamba_chunk_size": 256, "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_head": 64,
  "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 48,
  "mamba_proj_bias": false, "max_position_embeddings": 131072, "num_attention_heads": 12,
  "num_experts_per_tok": 0, "num_hidden_layers": 40, "num_key_value_heads": 4,
  "num_local_experts": 0, "position_embedding_type": "nope", "residual_multiplier": 0.246,
  "rms_norm_eps": 1e-05, "rope_theta": 10000, "shared_intermediate_size": 4096,
  "tie_word_embeddings": true, "vocab_size": 100352})";

constexpr const char* kFalconH1_0_5b = R"({
  "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1",
  "attention_bias": false, "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375,
  "embedding_multiplier": 5.656854249492381, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 1024, "intermediate_size": 2048, "key_multiplier": 0.39062499999999994,
  "lm_head_multiplier": 0.0390625, "mamba_chunk_size": 128, "mamba_conv_bias": true,
  "mamba_d_conv": 4, "mamba_d_head": 64, "mamba_d_ssm": 1536, "mamba_d_state": 128,
  "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 24, "mamba_norm_before_gate": false,
  "mamba_proj_bias": false, "mamba_rms_norm": false, "max_position_embeddings": 16384,
  "mlp_bias": false, "mlp_multipliers": [0.8838834764831844, 0.5859375],
  "num_attention_heads": 8, "num_hidden_layers": 36, "num_key_value_heads": 2,
  "projectors_bias": false, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 100000000000.0, "ssm_in_multiplier": 1.25,
  "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
  "ssm_out_multiplier": 0.23570226039551587, "tie_word_embeddings": false,
  "vocab_size": 32784})";

// d_inner = 2 d_model and conv width 4 throughout; Mamba-1's dt_rank = d_model / 16.
Status PureMambaPreset(const std::string& name, ModelConfig* config) {
  const bool large = name == "m1-2.8b" || name == "m2-2.7b";
  ModelConfig c;
  c.d_model = large ? 2560 : 768;
  c.n_layer = large ? 64 : 24;
  c.d_inner = 2 * c.d_model;
  c.d_conv = 4;
  c.eos_token_id = 0;
  if (name == "m1-130m" || name == "m1-2.8b") {
    c.arch = ModelArch::kMamba1;
    c.vocab_size = c.config_vocab_size = 50280;
    c.d_state = 16;
    c.dt_rank = c.d_model / 16;
  } else {
    c.arch = ModelArch::kMamba2;
    c.vocab_size = c.config_vocab_size = 50288;
    c.d_state = 128;
    c.headdim = 64;
    c.nheads = c.d_inner / c.headdim;
    c.ngroups = 1;
  }
  *config = c;
  return Status::Ok();
}

}  // namespace

Status PresetConfig(const std::string& name, ModelConfig* config) {
  ModelConfig c;
  if (name == "m1-130m" || name == "m2-130m" || name == "m1-2.8b" || name == "m2-2.7b") {
    SSMKIT_RETURN_IF_ERROR(PureMambaPreset(name, &c));
  } else {
    const char* text = name == "granite-4.0-h-350m" ? kGranite350m
                       : name == "granite-4.0-h-1b" ? kGranite1b
                       : name == "falcon-h1-0.5b"   ? kFalconH1_0_5b
                                                    : nullptr;
    if (text == nullptr) {
      return Status::InvalidArgument("preset '" + name + "': expected one of " + PresetNames());
    }
    SSMKIT_RETURN_IF_ERROR(model::ParseModelConfig(text, "preset " + name, &c));
  }
  c.format = "preset";
  *config = c;
  return Status::Ok();
}

std::string PresetNames() {
  return "m1-130m, m2-130m, m1-2.8b, m2-2.7b, granite-4.0-h-350m, granite-4.0-h-1b, "
         "falcon-h1-0.5b";
}

}  // namespace ssmkit

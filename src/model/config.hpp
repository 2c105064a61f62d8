// config.json of the three checkpoint formats, read into a ModelConfig:
//   Hugging Face MambaForCausalLM  (model_type "mamba"):  hidden_size, num_hidden_layers,
//     state_size, expand, conv_kernel, time_step_rank, use_bias, use_conv_bias, ...
//   Hugging Face Mamba2ForCausalLM (model_type "mamba2"): plus num_heads, head_dim, n_groups,
//     chunk_size, time_step_limit
//   state-spaces (mamba_ssm's MambaConfig): d_model, n_layer, vocab_size, ssm_cfg {layer,
//     d_state, d_conv, expand, dt_rank, headdim, ngroups, ...}, pad_vocab_size_multiple,
//     tie_embeddings
// Errors name the file and the key.
#pragma once

#include <string>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// `text` is the file's contents, `file` its name for messages. Python's json writes inf as the
// bare token Infinity (not JSON); it is accepted for the float fields.
Status ParseModelConfig(const std::string& text, const std::string& file, ModelConfig* config);

}  // namespace ssmkit::model

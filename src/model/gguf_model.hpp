// A GGUF file (llama.cpp's convert_hf_to_gguf.py / llama-quantize output) as a model: the
// config from its metadata and its tensors under the Hugging Face names and shapes the binder
// (model/weights.hpp) expects, so that nothing past this file knows the format.
//
// What the converter changed, undone here (docs/gguf.md has the table):
//   - names: token_embd -> backbone.embeddings, blk.N.ssm_in -> backbone.layers.N.mixer.in_proj,
//     output -> lm_head (absent: tied), ...;
//   - ssm_a holds A = -exp(A_log): A_log = log(-A) is computed (f32) for the binder, which
//     takes the exponential again (a round trip within 2 ulp of the stored A);
//   - squeezed or reshaped tensors get their Hugging Face shapes back (conv (C, K) -> (C, 1, K),
//     Mamba-2's A and D (H, 1) -> (H), its norm (G, D / G) -> (D)); the bytes are the same;
//   - a vector stored quantized (not what llama.cpp writes, but a valid file) is dequantized to
//     f32; matrices stay as stored, quantized or not, and are read in place from the map.
#pragma once

#include <memory>
#include <string>

#include "model/weight_source.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::model {

// True when `path` is a regular file that starts with the GGUF magic.
bool IsGgufFile(const std::string& path);

// Opens `path`, reads the config (general.architecture "mamba" or "mamba2") and presents the
// tensors. Errors name the file and the key or tensor.
Status OpenGgufModel(const std::string& path, ModelConfig* config,
                     std::unique_ptr<WeightSource>* source);

// The tokenizer its metadata describes (model/gguf_tokenizer.cpp); raw bytes when it has none
// and the model has at most 256 rows.
Status GgufTokenizer(const std::string& path, int64_t model_vocab_size,
                     std::unique_ptr<Tokenizer>* tokenizer);

}  // namespace ssmkit::model

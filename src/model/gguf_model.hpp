// A GGUF file (llama.cpp's convert_hf_to_gguf.py / llama-quantize output) as a model: the
// config from its metadata and its tensors under the Hugging Face names and shapes the binder
// (model/weights.hpp) expects, so that nothing past this file knows the format. Each
// general.architecture has its reader and name map (model/gguf_arch.hpp).
//
// What the converter changed, undone here (docs/gguf.md has the tables):
//   - names: token_embd -> backbone.embeddings (model.embed_tokens), blk.N.ssm_in ->
//     backbone.layers.N.mixer.in_proj (model.layers.N.mamba.in_proj), output -> lm_head (absent:
//     tied), ...;
//   - ssm_a holds A = -exp(A_log): A_log = log(-A) is computed (f32) for the binder, which
//     takes the exponential again (a round trip within 2 ulp of the stored A);
//   - squeezed or reshaped tensors get their Hugging Face shapes back (conv (C, K) -> (C, 1, K),
//     Mamba-2's A and D (H, 1) -> (H), its norm (G, D / G) -> (D)); the bytes are the same;
//   - Q and K rows reordered per head for llama.cpp's rope (granitehybrid) are copied back into
//     the checkpoint's order;
//   - matrices stay as stored, quantized or not, and are read in place from the map; a vector
//     stored quantized (not what llama.cpp writes) is refused by name.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/weight_source.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::model {

// True when `path` is a regular file that starts with the GGUF magic.
bool IsGgufFile(const std::string& path);

// Opens `path`, reads the config (general.architecture: model/gguf_arch.hpp's list)
// and presents the tensors. Errors name the file and the key or tensor.
Status OpenGgufModel(const std::string& path, ModelConfig* config,
                     std::unique_ptr<WeightSource>* source);

// The tokenizer its metadata describes (model/gguf_tokenizer.cpp); raw bytes when it has none
// and the model has at most 256 rows.
Status GgufTokenizer(const std::string& path, int64_t model_vocab_size,
                     std::unique_ptr<Tokenizer>* tokenizer);

// The pre_tokenizer (a tokenizer.json object) of llama.cpp's pre-tokenizer name `pre`
// (tokenizer.ggml.pre): "gpt-2" / "olmo" (GPT-2's ByteLevel regex), "llama-bpe" / "llama3",
// "qwen2" (their Split regexes); another name is Unsupported, `label` naming the file.
Status GgufPreTokenizer(const std::string& label, const std::string& pre, nlohmann::json* out);

}  // namespace ssmkit::model

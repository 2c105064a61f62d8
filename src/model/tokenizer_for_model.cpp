// Which tokenizer goes with a checkpoint directory (Tokenizer::ForModel).
#include <filesystem>

#include "model/gguf_model.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit {

Status Tokenizer::ForModel(const std::string& model_dir, int64_t model_vocab_size,
                           std::unique_ptr<Tokenizer>* tokenizer) {
  if (model::IsGgufFile(model_dir))
    return model::GgufTokenizer(model_dir, model_vocab_size, tokenizer);
  const std::filesystem::path path = std::filesystem::path(model_dir) / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return FromFile(path.string(), tokenizer);
  if (model_vocab_size <= 256) {
    *tokenizer = Bytes();
    return Status::Ok();
  }
  return Status::InvalidArgument(model_dir + ": no tokenizer.json, and its vocabulary (" +
                                 std::to_string(model_vocab_size) +
                                 " tokens) is not raw bytes: the tokenizer must be given (e.g. the "
                                 "GPT-NeoX tokenizer.json the state-spaces models use)");
}

}  // namespace ssmkit

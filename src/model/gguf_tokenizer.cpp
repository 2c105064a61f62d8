// The tokenizer a GGUF file describes (tokenizer.ggml.*), as the tokenizer.json a Hugging Face
// checkpoint would hold, so that one BPE implementation serves both formats:
//   tokenizer.ggml.model "gpt2"          -> a byte-level BPE model
//   tokenizer.ggml.tokens / merges       -> model.vocab (id = position) / model.merges
//   tokenizer.ggml.token_type 3 / 4      -> added tokens, special (control) or not (user-defined)
//   tokenizer.ggml.pre                   -> the pre-tokenizer llama.cpp names by it
//   tokenizer.ggml.add_bos_token         -> a post-processor putting bos first
// No tokenizer.ggml.model (or "no_vocab") on a model of at most 256 rows: raw bytes.
#include <nlohmann/json.hpp>

#include "core/gguf.hpp"
#include "model/gguf_model.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::model {
namespace {

using Json = nlohmann::json;

constexpr int64_t kControl = 3, kUserDefined = 4;  // llama.cpp's token types

Status TokenizerJson(const GgufFile& f, std::string* text) {
  std::string model;
  SSMKIT_RETURN_IF_ERROR(f.GetString("tokenizer.ggml.model", &model));
  if (model != "gpt2") {
    return Status::Unsupported(f.label() + ": tokenizer.ggml.model '" + model +
                               "': this version reads 'gpt2' (byte-level BPE) tokenizers");
  }
  std::string pre = "gpt-2";
  if (f.Find("tokenizer.ggml.pre")) SSMKIT_RETURN_IF_ERROR(f.GetString("tokenizer.ggml.pre", &pre));
  const std::vector<std::string>* tokens = nullptr;
  const std::vector<std::string>* merges = nullptr;
  const std::vector<int64_t>* types = nullptr;
  SSMKIT_RETURN_IF_ERROR(f.GetStrings("tokenizer.ggml.tokens", &tokens));
  SSMKIT_RETURN_IF_ERROR(f.GetStrings("tokenizer.ggml.merges", &merges));
  if (f.Find("tokenizer.ggml.token_type")) {
    SSMKIT_RETURN_IF_ERROR(f.GetIntegers("tokenizer.ggml.token_type", &types));
    if (types->size() != tokens->size()) {
      return Status::InvalidArgument(f.label() + ": tokenizer.ggml.token_type has " +
                                     std::to_string(types->size()) + " entries, tokens " +
                                     std::to_string(tokens->size()));
    }
  }
  Json root;
  SSMKIT_RETURN_IF_ERROR(GgufPreTokenizer(f.label(), pre, &root["pre_tokenizer"]));
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t id = 0; id < tokens->size(); ++id) {
    const std::string& token = (*tokens)[id];
    const int64_t type = types ? (*types)[id] : 1;
    if (type == kControl || type == kUserDefined) {
      added.push_back({{"id", id},
                       {"content", token},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == kControl}});
    }
    vocab.emplace(token, id);  // a repeated text keeps its first id, as the map it came from
  }
  root["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", *merges}};
  root["added_tokens"] = std::move(added);
  root["decoder"] = {{"type", "ByteLevel"}};
  bool add_bos = false;
  if (f.Find("tokenizer.ggml.add_bos_token")) {
    SSMKIT_RETURN_IF_ERROR(f.GetBool("tokenizer.ggml.add_bos_token", &add_bos));
  }
  int64_t bos = -1;
  if (add_bos) {
    SSMKIT_RETURN_IF_ERROR(f.GetInteger("tokenizer.ggml.bos_token_id", &bos));
    root["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "bos"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"bos", {{"id", "bos"}, {"ids", {bos}}}}}}};
  }
  // Invalid UTF-8 in a token is replaced rather than thrown on.
  *text = root.dump(-1, ' ', false, Json::error_handler_t::replace);
  return Status::Ok();
}

}  // namespace

Status GgufPreTokenizer(const std::string& label, const std::string& pre, nlohmann::json* out) {
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  if (pre == "gpt-2" || pre == "olmo") {  // GPT-2's regex (GPT-NeoX: the Mamba checkpoints)
    *out = byte_level;
    return Status::Ok();
  }
  const char* regex = nullptr;
  if (pre == "llama-bpe" || pre == "llama3") {
    regex =
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1,3}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  } else if (pre == "qwen2") {
    regex =
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  } else {
    return Status::Unsupported(label + ": tokenizer.ggml.pre '" + pre +
                               "': this version reads 'gpt-2', 'olmo', 'llama-bpe' and 'qwen2'");
  }
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", regex}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json bytes = byte_level;
  bytes["use_regex"] = false;
  *out = {{"type", "Sequence"}, {"pretokenizers", Json::array({split, bytes})}};
  return Status::Ok();
}

Status GgufTokenizer(const std::string& path, int64_t model_vocab_size,
                     std::unique_ptr<Tokenizer>* tokenizer) {
  GgufFile file;
  SSMKIT_RETURN_IF_ERROR(GgufFile::Open(path, &file));
  const GgufValue* model = file.Find("tokenizer.ggml.model");
  if (model == nullptr || (model->type == GgufType::kString && model->text == "no_vocab")) {
    if (model_vocab_size <= 256) {  // a byte-level model, as Tokenizer::ForModel's directories
      *tokenizer = Tokenizer::Bytes();
      return Status::Ok();
    }
    return Status::InvalidArgument(path + ": no tokenizer in the metadata, and its vocabulary (" +
                                   std::to_string(model_vocab_size) + " tokens) is not raw bytes");
  }
  std::string json;
  SSMKIT_RETURN_IF_ERROR(TokenizerJson(file, &json));
  return Tokenizer::FromJson(json, path, tokenizer);
}

}  // namespace ssmkit::model

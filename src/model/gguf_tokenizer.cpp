// The tokenizer a GGUF file describes (tokenizer.ggml.*):
//   tokenizer.ggml.model "gpt2": a byte-level BPE, written as the tokenizer.json a Hugging Face
//     checkpoint would hold, so that one BPE implementation serves both formats:
//       tokenizer.ggml.tokens / merges   -> model.vocab (id = position) / model.merges
//       tokenizer.ggml.token_type 3 / 4  -> added tokens, special (control) or not (user-defined)
//       tokenizer.ggml.pre               -> the pre-tokenizer llama.cpp names by it
//       tokenizer.ggml.add_bos_token     -> a post-processor putting bos first
//   tokenizer.ggml.model "llama": a SentencePiece vocabulary (model/spm_tokenizer.hpp): tokens,
//     scores (absent: 0) and token types (absent: normal), bos / eos / unknown_token_id
//     (absent: 1, 2, 0, as llama.cpp takes them), add_bos_token (absent: true),
//     add_eos_token (absent: false), add_space_prefix (absent: true).
// No tokenizer.ggml.model (or "no_vocab") on a model of at most 256 rows: raw bytes.
#include <nlohmann/json.hpp>

#include "core/gguf.hpp"
#include "model/gguf_model.hpp"
#include "model/spm_tokenizer.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::model {
namespace {

using Json = nlohmann::json;

constexpr int64_t kControl = 3, kUserDefined = 4;  // llama.cpp's token types

// "<file>: <key> has <given> entries, expected one per token (<tokens>)" unless `given` is at
// least `tokens` (llama.cpp reads the first `tokens` of a longer list).
Status CheckPerToken(const GgufFile& f, const char* key, size_t given, size_t tokens) {
  if (given >= tokens) return Status::Ok();
  return Status::InvalidArgument(f.label() + ": " + key + " has " + std::to_string(given) +
                                 " entries, expected one per token (" + std::to_string(tokens) +
                                 ")");
}

// tokenizer.ggml.token_type, or nullptr when absent.
Status TokenTypes(const GgufFile& f, size_t tokens, const std::vector<int64_t>** types) {
  *types = nullptr;
  if (!f.Find("tokenizer.ggml.token_type")) return Status::Ok();
  SSMKIT_RETURN_IF_ERROR(f.GetIntegers("tokenizer.ggml.token_type", types));
  return CheckPerToken(f, "tokenizer.ggml.token_type", (*types)->size(), tokens);
}

// An optional boolean key, `v` left as it is when absent.
Status OptBool(const GgufFile& f, const char* key, bool* v) {
  return f.Find(key) ? f.GetBool(key, v) : Status::Ok();
}

Status TokenizerJson(const GgufFile& f, std::string* text) {
  std::string pre = "gpt-2";
  if (f.Find("tokenizer.ggml.pre")) SSMKIT_RETURN_IF_ERROR(f.GetString("tokenizer.ggml.pre", &pre));
  const std::vector<std::string>* tokens = nullptr;
  const std::vector<std::string>* merges = nullptr;
  const std::vector<int64_t>* types = nullptr;
  SSMKIT_RETURN_IF_ERROR(f.GetStrings("tokenizer.ggml.tokens", &tokens));
  SSMKIT_RETURN_IF_ERROR(f.GetStrings("tokenizer.ggml.merges", &merges));
  SSMKIT_RETURN_IF_ERROR(TokenTypes(f, tokens->size(), &types));
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
  SSMKIT_RETURN_IF_ERROR(OptBool(f, "tokenizer.ggml.add_bos_token", &add_bos));
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

// A special token's id: the key's value when it names a token, else `fallback` when that does
// (llama.cpp's defaults), else -1.
int32_t SpecialId(const GgufFile& f, const char* key, int64_t fallback, size_t tokens) {
  int64_t id = fallback;
  if (f.Find(key) && f.GetInteger(key, &id).ok() && id >= 0 && static_cast<size_t>(id) < tokens) {
    return static_cast<int32_t>(id);
  }
  return fallback >= 0 && static_cast<size_t>(fallback) < tokens ? static_cast<int32_t>(fallback)
                                                                 : -1;
}

Status SpmFromGguf(const GgufFile& f, std::unique_ptr<Tokenizer>* tokenizer) {
  const std::vector<std::string>* tokens = nullptr;
  SSMKIT_RETURN_IF_ERROR(f.GetStrings("tokenizer.ggml.tokens", &tokens));
  const size_t n = tokens->size();
  SpmVocab v;
  v.tokens = *tokens;
  v.scores.assign(n, 0.0f);
  if (const GgufValue* scores = f.Find("tokenizer.ggml.scores")) {
    const GgufType e = scores->element_type;
    const bool reals = e == GgufType::kF32 || e == GgufType::kF64;
    if (scores->type != GgufType::kArray ||
        (!reals && (e == GgufType::kBool || e == GgufType::kString || e == GgufType::kArray))) {
      return Status::InvalidArgument(f.label() +
                                     ": tokenizer.ggml.scores is not an array of numbers");
    }
    SSMKIT_RETURN_IF_ERROR(
        CheckPerToken(f, "tokenizer.ggml.scores", static_cast<size_t>(scores->array_size()), n));
    for (size_t i = 0; i < n; ++i) {
      v.scores[i] =
          static_cast<float>(reals ? scores->reals[i] : static_cast<double>(scores->integers[i]));
    }
  }
  const std::vector<int64_t>* types = nullptr;
  SSMKIT_RETURN_IF_ERROR(TokenTypes(f, n, &types));
  v.types.assign(n, kSpmNormal);
  for (size_t i = 0; types != nullptr && i < n; ++i) {
    const int64_t t = (*types)[i];
    v.types[i] = t >= kSpmUndefined && t <= kSpmByte ? static_cast<int32_t>(t) : kSpmUndefined;
  }
  v.bos = SpecialId(f, "tokenizer.ggml.bos_token_id", 1, n);
  v.eos = SpecialId(f, "tokenizer.ggml.eos_token_id", 2, n);
  v.unk = SpecialId(f, "tokenizer.ggml.unknown_token_id", 0, n);
  // A converter that found no special tokens (LlamaHfVocab without a tokenizer_config.json)
  // types "</s>" normal; llama.cpp makes the end-of-text tokens it recognises control ones,
  // and so the end-of-sequence token is here.
  if (v.eos >= 0 && v.types[v.eos] == kSpmNormal) v.types[v.eos] = kSpmControl;
  SSMKIT_RETURN_IF_ERROR(OptBool(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  SSMKIT_RETURN_IF_ERROR(OptBool(f, "tokenizer.ggml.add_eos_token", &v.add_eos));
  SSMKIT_RETURN_IF_ERROR(OptBool(f, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix));
  return MakeSpmTokenizer(std::move(v), f.label(), tokenizer);
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
  std::string name;
  SSMKIT_RETURN_IF_ERROR(file.GetString("tokenizer.ggml.model", &name));
  if (name == "llama") return SpmFromGguf(file, tokenizer);
  if (name != "gpt2") {
    return Status::Unsupported(path + ": tokenizer.ggml.model '" + name +
                               "': this version reads 'gpt2' (byte-level BPE) and 'llama' "
                               "(SentencePiece) tokenizers");
  }
  std::string json;
  SSMKIT_RETURN_IF_ERROR(TokenizerJson(file, &json));
  return Tokenizer::FromJson(json, path, tokenizer);
}

}  // namespace ssmkit::model

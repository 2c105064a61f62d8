// A checkpoint directory's tokenizer as tokenizer.ggml.* keys, the way llama.cpp's converter
// writes a byte-level BPE (its _set_vocab_gpt2): every id below the model's vocabulary rows
// ("[PADi]", unused, where the tokenizer has none), the added tokens as control (special, or
// looking special: "<|...|>") or user-defined, the merges as "a b", and the pre-tokenizer by the
// name llama.cpp gives it. The converter finds that name by hashing how the tokenizer splits a
// probe text; here it is the name whose pre-tokenizer, as this library's GGUF reader builds it
// (model/gguf_tokenizer.cpp), is the tokenizer.json's. No tokenizer.json: "no_vocab" (a
// byte-level model).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "model/gguf_export_arch.hpp"
#include "model/gguf_model.hpp"

namespace ssmkit::model {
namespace {

constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;  // llama.cpp's

// The written pre-tokenizer names, in the order they are tried.
constexpr const char* kPreTokenizers[] = {"gpt-2", "llama-bpe", "qwen2"};

// A Split regex with Llama-3's case-insensitive group spelled out as the reader writes it.
std::string CaseExpanded(std::string regex) {
  const std::string group = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const size_t at = regex.find(group);
  if (at != std::string::npos)
    regex.replace(at, group.size(), "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");
  return regex;
}

// Whether two pre_tokenizer objects split text alike: the keys that decide it, with the
// tokenizers library's defaults (ByteLevel: add_prefix_space and use_regex true).
bool SamePreTokenizer(const Json& a, const Json& b) {
  if (!a.is_object() || !b.is_object() || a.value("type", "") != b.value("type", "")) return false;
  const std::string type = a.value("type", "");
  if (type == "ByteLevel") {
    return a.value("add_prefix_space", true) == b.value("add_prefix_space", true) &&
           a.value("use_regex", true) == b.value("use_regex", true);
  }
  if (type == "Split") {
    auto regex = [](const Json& s) {
      const Json& p = s.value("pattern", Json());
      return p.is_object() && p.contains("Regex") && p.at("Regex").is_string()
                 ? CaseExpanded(p.at("Regex").get<std::string>())
                 : std::string();
    };
    return !regex(a).empty() && regex(a) == regex(b) &&
           a.value("behavior", "") == b.value("behavior", "") &&
           a.value("invert", false) == b.value("invert", false);
  }
  if (type == "Sequence") {
    const Json& x = a.value("pretokenizers", Json());
    const Json& y = b.value("pretokenizers", Json());
    if (!x.is_array() || !y.is_array() || x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!SamePreTokenizer(x[i], y[i])) return false;
    }
    return true;
  }
  return false;
}

// The converter's does_token_look_special, for the added tokens not marked special.
bool LooksSpecial(const std::string& t) {
  auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

Status AddTokenizerFromJson(const std::string& path, int64_t rows, GgufWriter* w) {
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    return Status::Unsupported(path + ": " + what +
                               ": cannot be written as a llama.cpp GGUF "
                               "tokenizer (docs/gguf.md)");
  };
  if (root.is_discarded() || !root.is_object()) return bad("not a JSON object");
  const Json& model = root.value("model", Json());
  if (!model.is_object() || model.value("type", "") != "BPE" ||
      !model.value("vocab", Json()).is_object()) {
    return bad("not a BPE model with a vocab");
  }
  const char* pre = nullptr;
  for (const char* name : kPreTokenizers) {
    Json ours;
    if (GgufPreTokenizer(path, name, &ours).ok() &&
        SamePreTokenizer(root.value("pre_tokenizer", Json()), ours)) {
      pre = name;
      break;
    }
  }
  if (pre == nullptr) {
    return bad(
        "a pre-tokenizer other than GPT-2's ByteLevel and the Split regexes of "
        "'llama-bpe' and 'qwen2'");
  }
  std::vector<std::string> tokens(static_cast<size_t>(rows));
  std::vector<int32_t> types(static_cast<size_t>(rows), kUnused);
  std::vector<bool> seen(static_cast<size_t>(rows), false);
  auto put = [&](const std::string& token, int64_t id, int32_t type) -> Status {
    if (id < 0 || id >= rows) {
      return bad("token '" + token + "' has id " + std::to_string(id) + " outside the model's " +
                 std::to_string(rows) + " rows");
    }
    tokens[static_cast<size_t>(id)] = token;
    types[static_cast<size_t>(id)] = type;
    seen[static_cast<size_t>(id)] = true;
    return Status::Ok();
  };
  for (const auto& [token, id] : model.at("vocab").items()) {
    if (!id.is_number_integer()) return bad("vocab id of '" + token + "'");
    SSMKIT_RETURN_IF_ERROR(put(token, id.get<int64_t>(), kNormal));
  }
  for (const Json& a : root.value("added_tokens", Json::array())) {
    if (!a.is_object() || !a.value("id", Json()).is_number_integer() ||
        !a.value("content", Json()).is_string()) {
      return bad("an added token without an integer id and a content");
    }
    std::string content = a.at("content").get<std::string>();
    const bool control = a.value("special", false) || LooksSpecial(content);
    if (!control) {  // the converter's pre-normalized spaces: U+2581 -> ' '
      for (size_t at; (at = content.find("\xe2\x96\x81")) != std::string::npos;)
        content.replace(at, 3, " ");
    }
    SSMKIT_RETURN_IF_ERROR(
        put(content, a.at("id").get<int64_t>(), control ? kControl : kUserDefined));
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (!seen[static_cast<size_t>(i)])
      tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
  }
  std::vector<std::string> merges;
  for (const Json& m : model.value("merges", Json::array())) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return bad("a merge that is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  w->AddString("tokenizer.ggml.model", "gpt2");
  w->AddString("tokenizer.ggml.pre", pre);
  w->AddStrings("tokenizer.ggml.tokens", tokens);
  w->AddI32s("tokenizer.ggml.token_type", types);
  w->AddStrings("tokenizer.ggml.merges", merges);
  return Status::Ok();
}

}  // namespace

Status AddTokenizerKeys(const std::string& dir, const ModelConfig& c, GgufWriter* w) {
  const std::filesystem::path json = std::filesystem::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::exists(json, ec))
    SSMKIT_RETURN_IF_ERROR(AddTokenizerFromJson(json, c.vocab_size, w));
  else
    w->AddString("tokenizer.ggml.model", "no_vocab");
  auto id = [&](const char* key, int64_t v) {
    if (v >= 0) w->AddU32(std::string("tokenizer.ggml.") + key, static_cast<uint32_t>(v));
  };
  id("bos_token_id", c.bos_token_id);
  id("eos_token_id", c.eos_token_id);
  id("padding_token_id", c.pad_token_id);
  return Status::Ok();
}

}  // namespace ssmkit::model

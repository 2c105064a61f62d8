// A checkpoint directory's tokenizer as tokenizer.ggml.* keys, the way llama.cpp's converter
// writes a byte-level BPE (its _set_vocab_gpt2): every id below the model's vocabulary rows
// ("[PADi]", unused, where the tokenizer has none), the added tokens as control (special, or
// looking special: "<|...|>") or user-defined, the merges as "a b", and the pre-tokenizer by the
// name llama.cpp gives it. The converter finds that name by hashing how the tokenizer splits a
// probe text; here it is the name whose pre-tokenizer, as this library's GGUF reader builds it
// (model/gguf_tokenizer.cpp), is the tokenizer.json's. No tokenizer.json: "no_vocab" (a
// byte-level model).
//
// A SentencePiece-style BPE (byte fallback, U+2581 for spaces: Jamba's) is written as llama.cpp's
// converter writes it from a tokenizer.model, the file it reads first ("llama"): the pieces by id
// (the rows past them "[PADi]", unused), byte pieces <0xNN> as bytes, the unk_token as unknown,
// the added tokens as control (special) or user-defined; add_space_prefix when the normalizer
// prepends U+2581. A SentencePiece model scores each piece; llama.cpp's merging of adjacent
// symbols takes the pair whose joined piece scores highest, which the tokenizer.json states as
// the merges' order: a piece a merge makes scores minus the rank of the first merge that makes
// it, any other -1000 (never consulted), as the converter scores every piece of a tokenizer.json
// without a tokenizer.model (its LlamaHfVocab, which llama.cpp would merge leftmost-first).
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "model/gguf_export_arch.hpp"
#include "model/gguf_model.hpp"

namespace ssmkit::model {
namespace {

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

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

// A tokenizer.json's BPE model, read; errors say the file and what it lacks.
struct BpeJson {
  std::string path;
  Json root;
  Status Bad(const std::string& what) const {
    return Status::Unsupported(path + ": " + what +
                               ": cannot be written as a llama.cpp GGUF "
                               "tokenizer (docs/gguf.md)");
  }
  const Json& model() const { return root.at("model"); }
  Status Read(const std::string& file) {
    path = file;
    std::string text;
    SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
    root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object()) return Bad("not a JSON object");
    const Json& m = root.value("model", Json());
    if (!m.is_object() || m.value("type", "") != "BPE" || !m.value("vocab", Json()).is_object())
      return Bad("not a BPE model with a vocab");
    return Status::Ok();
  }
  // The merges as (left, right), from "a b" strings or ["a", "b"] pairs.
  Status Merges(std::vector<std::pair<std::string, std::string>>* out) const {
    for (const Json& m : model().value("merges", Json::array())) {
      if (m.is_string()) {
        const std::string ab = m.get<std::string>();
        const size_t space = ab.find(' ');
        if (space == std::string::npos) return Bad("a merge \"" + ab + "\" without a space");
        out->emplace_back(ab.substr(0, space), ab.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        out->emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        return Bad("a merge that is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
    return Status::Ok();
  }
};

// One token per row of the model's vocabulary: ids past the tokenizer's are "[PADi]", unused.
struct TokenRows {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<bool> seen;
  explicit TokenRows(int64_t rows)
      : tokens(static_cast<size_t>(rows)),
        types(static_cast<size_t>(rows), kUnused),
        seen(static_cast<size_t>(rows), false) {}
  Status Put(const BpeJson& j, const std::string& token, int64_t id, int32_t type) {
    const int64_t rows = static_cast<int64_t>(tokens.size());
    if (id < 0 || id >= rows) {
      return j.Bad("token '" + token + "' has id " + std::to_string(id) + " outside the model's " +
                   std::to_string(rows) + " rows");
    }
    tokens[static_cast<size_t>(id)] = token;
    types[static_cast<size_t>(id)] = type;
    seen[static_cast<size_t>(id)] = true;
    return Status::Ok();
  }
  // The vocab's tokens as `type(token)`, then the added tokens as control (`control(entry)`)
  // or user-defined (`user(content)` the text written), then the unseen rows padded.
  template <class Type, class Control, class User>
  Status Fill(const BpeJson& j, Type type, Control control, User user) {
    for (const auto& [token, id] : j.model().at("vocab").items()) {
      if (!id.is_number_integer()) return j.Bad("vocab id of '" + token + "'");
      SSMKIT_RETURN_IF_ERROR(Put(j, token, id.template get<int64_t>(), type(token)));
    }
    for (const Json& a : j.root.value("added_tokens", Json::array())) {
      if (!a.is_object() || !a.value("id", Json()).is_number_integer() ||
          !a.value("content", Json()).is_string()) {
        return j.Bad("an added token without an integer id and a content");
      }
      const std::string content = a.at("content").get<std::string>();
      const bool is_control = control(a);
      SSMKIT_RETURN_IF_ERROR(Put(j, is_control ? content : user(content), a.at("id").get<int64_t>(),
                                 is_control ? kControl : kUserDefined));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (!seen[i]) tokens[i] = "[PAD" + std::to_string(i) + "]";
    }
    return Status::Ok();
  }
};

// Whether the tokenizer puts U+2581 before the text: a Prepend("\u2581") normalizer (alone or
// in a Sequence), or a Metaspace pre-tokenizer that prepends.
bool PrependsSpace(const Json& root) {
  auto prepend = [](const Json& n) {
    return n.is_object() && n.value("type", "") == "Prepend" &&
           n.value("prepend", "") == "\xe2\x96\x81";
  };
  const Json& norm = root.value("normalizer", Json());
  if (prepend(norm)) return true;
  if (norm.is_object() && norm.value("normalizers", Json()).is_array()) {
    for (const Json& n : norm.at("normalizers")) {
      if (prepend(n)) return true;
    }
  }
  const Json& pre = root.value("pre_tokenizer", Json());
  return pre.is_object() && pre.value("type", "") == "Metaspace" &&
         pre.value("prepend_scheme", "always") != "never" && pre.value("add_prefix_space", true);
}

// The converter's pre-normalized spaces of a user-defined token: U+2581 -> ' '.
std::string PlainSpaces(const std::string& content) {
  const std::string metaspace = "\xe2\x96\x81";
  std::string out;
  for (size_t i = 0; i < content.size();) {
    if (content.compare(i, metaspace.size(), metaspace) == 0) {
      out += ' ';
      i += metaspace.size();
    } else {
      out += content[i++];
    }
  }
  return out;
}

// A piece spelled <0xNN>: SentencePiece's byte fallback.
bool IsBytePiece(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

Status AddTokenizerFromJson(const std::string& path, int64_t rows, GgufWriter* w) {
  BpeJson j;
  SSMKIT_RETURN_IF_ERROR(j.Read(path));
  const Json& root = j.root;
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
    return j.Bad(
        "a pre-tokenizer other than GPT-2's ByteLevel and the Split regexes of "
        "'llama-bpe' and 'qwen2'");
  }
  TokenRows r(rows);
  SSMKIT_RETURN_IF_ERROR(r.Fill(
      j, [](const std::string&) { return kNormal; },
      [](const Json& a) {
        return a.value("special", false) || LooksSpecial(a.at("content").get<std::string>());
      },
      PlainSpaces));
  std::vector<std::pair<std::string, std::string>> pairs;
  SSMKIT_RETURN_IF_ERROR(j.Merges(&pairs));
  std::vector<std::string> merges;
  for (const auto& [a, b] : pairs) merges.push_back(a + " " + b);
  w->AddString("tokenizer.ggml.model", "gpt2");
  w->AddString("tokenizer.ggml.pre", pre);
  w->AddStrings("tokenizer.ggml.tokens", r.tokens);
  w->AddI32s("tokenizer.ggml.token_type", r.types);
  w->AddStrings("tokenizer.ggml.merges", merges);
  return Status::Ok();
}

Status AddSentencePieceVocab(const std::string& path, int64_t rows, GgufWriter* w) {
  BpeJson j;
  SSMKIT_RETURN_IF_ERROR(j.Read(path));
  if (!j.model().value("byte_fallback", false))
    return j.Bad("a BPE without byte_fallback, not a SentencePiece-style one");
  const std::string unk = j.model().value("unk_token", Json()).is_string()
                              ? j.model().at("unk_token").get<std::string>()
                              : std::string();
  TokenRows r(rows);
  SSMKIT_RETURN_IF_ERROR(r.Fill(
      j,
      [&](const std::string& token) {
        return token == unk ? kUnknown : IsBytePiece(token) ? kByte : kNormal;
      },
      [](const Json& a) { return a.value("special", false); },
      [](const std::string& content) { return content; }));
  // The unk_token stays unknown where it is also an added (special) token.
  const Json& vocab = j.model().at("vocab");
  if (!unk.empty() && vocab.contains(unk) && vocab.at(unk).is_number_integer()) {
    const int64_t id = vocab.at(unk).get<int64_t>();
    if (id >= 0 && id < rows) r.types[static_cast<size_t>(id)] = kUnknown;
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  SSMKIT_RETURN_IF_ERROR(j.Merges(&pairs));
  std::vector<float> scores(static_cast<size_t>(rows), -1000.0f);
  std::vector<bool> scored(static_cast<size_t>(rows), false);
  for (size_t rank = 0; rank < pairs.size(); ++rank) {
    const std::string joined = pairs[rank].first + pairs[rank].second;
    if (!vocab.contains(joined) || !vocab.at(joined).is_number_integer())
      return j.Bad("merge " + std::to_string(rank) + " makes '" + joined + "', not in the vocab");
    const int64_t id = vocab.at(joined).get<int64_t>();
    if (id < 0 || id >= rows || scored[static_cast<size_t>(id)]) continue;
    scores[static_cast<size_t>(id)] = -static_cast<float>(rank);
    scored[static_cast<size_t>(id)] = true;
  }
  w->AddString("tokenizer.ggml.model", "llama");
  w->AddString("tokenizer.ggml.pre", "default");
  w->AddStrings("tokenizer.ggml.tokens", r.tokens);
  w->AddF32s("tokenizer.ggml.scores", scores);
  w->AddI32s("tokenizer.ggml.token_type", r.types);
  w->AddBool("tokenizer.ggml.add_space_prefix", PrependsSpace(j.root));
  return Status::Ok();
}

}  // namespace

Status AddTokenizerKeys(const std::string& dir, const ModelConfig& c, bool sentencepiece,
                        GgufWriter* w) {
  const std::filesystem::path json = std::filesystem::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(json, ec)) {
    w->AddString("tokenizer.ggml.model", "no_vocab");
  } else if (sentencepiece) {
    SSMKIT_RETURN_IF_ERROR(AddSentencePieceVocab(json, c.vocab_size, w));
  } else {
    SSMKIT_RETURN_IF_ERROR(AddTokenizerFromJson(json, c.vocab_size, w));
  }
  auto id = [&](const char* key, int64_t v) {
    if (v >= 0) w->AddU32(std::string("tokenizer.ggml.") + key, static_cast<uint32_t>(v));
  };
  id("bos_token_id", c.bos_token_id);
  id("eos_token_id", c.eos_token_id);
  id("padding_token_id", c.pad_token_id);
  return Status::Ok();
}

}  // namespace ssmkit::model

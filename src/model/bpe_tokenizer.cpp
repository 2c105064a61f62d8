// Hugging Face tokenizer.json, byte-level BPE: reading the file and encoding / decoding.
// The steps and their order are those of the `tokenizers` package (see
// include/ssmkit/tokenizer.hpp).
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/mapped_file.hpp"
#include "model/unicode_text.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit {
namespace {

using Json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 (controls,
// space, DEL, NBSP, soft hyphen, ...) for U+0100 onwards, so every byte is a visible character.
struct ByteMap {
  std::string byte_to_utf8[256];                       // byte -> UTF-8 of its character
  std::unordered_map<uint32_t, uint8_t> char_to_byte;  // code point -> byte
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = printable ? b : next++;
      char_to_byte[cp] = static_cast<uint8_t>(b);
      std::string& s = byte_to_utf8[b];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {  // cp < 0x800: two bytes
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

const ByteMap& TheByteMap() {
  static const ByteMap map;
  return map;
}

// Decodes one UTF-8 character at s[i] (valid input); advances i.
uint32_t NextCodePoint(std::string_view s, size_t* i) {
  const uint8_t b = static_cast<uint8_t>(s[*i]);
  const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
  for (int k = 1; k < len && *i + k < s.size(); ++k)
    cp = cp << 6 | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false, rstrip = false;
};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class BpeTokenizer final : public Tokenizer {
 public:
  Status Load(const std::string& path);

  Status Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  void AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  int32_t TokenId(std::string_view token) const override {
    const auto it = token_to_id_.find(std::string(token));
    return it == token_to_id_.end() ? -1 : it->second;
  }
  std::string name() const override { return "bpe (" + path_ + ")"; }

 private:
  Status Fail(const std::string& what) const {
    return Status::InvalidArgument(path_ + ": " + what);
  }
  Status Unsupported(const std::string& what) const {
    return Status::Unsupported(path_ + ": " + what + " (docs/model.md lists what is supported)");
  }
  Status ReadModel(const Json& model);
  Status ReadAddedTokens(const Json& added);
  Status ReadPipeline(const Json& root);

  // Splits `text` by the added tokens with normalized == `normalized`, leftmost-longest;
  // calls piece(text) for the stretches between them and emits the tokens' ids.
  template <class Piece>
  Status SplitAdded(std::string_view text, bool normalized, std::vector<int32_t>* ids,
                    Piece&& piece) const;
  Status EncodeNormalizedPiece(std::string_view text, std::vector<int32_t>* ids) const;
  void EncodeWord(const std::string& mapped, std::vector<int32_t>* ids) const;

  std::string path_;
  std::unordered_map<std::string, int32_t> token_to_id_;  // the model's vocab and added tokens
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;
  std::vector<bool> added_;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<AddedToken> added_tokens_;
  bool nfc_ = false;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  model::GptSplitter splitter_;
};

Status BpeTokenizer::ReadModel(const Json& model) {
  if (!model.is_object() || model.value("type", "") != "BPE") {
    return Unsupported("\"model.type\" must be \"BPE\"");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    if (model.contains(key) && !model.at(key).is_null())
      return Unsupported(std::string("\"model.") + key + "\"");
  }
  if (model.value("byte_fallback", false)) return Unsupported("\"model.byte_fallback\": true");
  ignore_merges_ = model.value("ignore_merges", false);
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return Fail("\"model.vocab\" must be an object");
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Fail("\"model.vocab\": the id of '" + token + "' is not a non-negative integer");
    }
    const int32_t i = static_cast<int32_t>(id.get<int64_t>());
    if (static_cast<size_t>(i) >= id_to_token_.size()) id_to_token_.resize(i + 1);
    id_to_token_[i] = token;
    token_to_id_[token] = i;
  }
  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array())
    return Fail("\"model.merges\" must be an array");
  int32_t rank = 0;
  for (const Json& m : *merges) {
    std::string left, right;
    if (m.is_string()) {  // "a b" (tokenizers before 0.20)
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return Fail("merge \"" + s + "\" is not \"left right\"");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Fail("merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto l = token_to_id_.find(left), r = token_to_id_.find(right),
               lr = token_to_id_.find(left + right);
    if (l == token_to_id_.end() || r == token_to_id_.end() || lr == token_to_id_.end()) {
      return Fail("merge " + std::to_string(rank) + " (\"" + left + "\", \"" + right +
                  "\") names a token not in the vocab");
    }
    const uint64_t key = static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second);
    merges_.emplace(key, std::make_pair(rank++, lr->second));
  }
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    unk_id_ = TokenId(model.at("unk_token").get<std::string>());
  }
  return Status::Ok();
}

Status BpeTokenizer::ReadAddedTokens(const Json& added) {
  if (added.is_null()) return Status::Ok();
  if (!added.is_array()) return Fail("\"added_tokens\" must be an array");
  for (const Json& t : added) {
    if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
        !t.at("content").is_string() || !t.at("id").is_number_integer() ||
        t.at("id").get<int64_t>() < 0) {
      return Fail("\"added_tokens\": each entry needs an integer \"id\" and a string \"content\"");
    }
    AddedToken a;
    a.content = t.at("content").get<std::string>();
    a.id = static_cast<int32_t>(t.at("id").get<int64_t>());
    a.special = t.value("special", false);
    a.normalized = t.value("normalized", !a.special);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    if (t.value("single_word", false))
      return Unsupported("added token '" + a.content + "' with single_word");
    if (a.content.empty())
      return Fail("\"added_tokens\": empty content for id " + std::to_string(a.id));
    if (static_cast<size_t>(a.id) >= id_to_token_.size()) id_to_token_.resize(a.id + 1);
    id_to_token_[a.id] = a.content;
    token_to_id_[a.content] = a.id;
    added_tokens_.push_back(a);
  }
  special_.assign(id_to_token_.size(), false);
  added_.assign(id_to_token_.size(), false);
  for (const AddedToken& a : added_tokens_) {
    special_[a.id] = a.special;
    added_[a.id] = true;
  }
  return Status::Ok();
}

Status BpeTokenizer::ReadPipeline(const Json& root) {
  const Json& normalizer = root.contains("normalizer") ? root.at("normalizer") : Json();
  if (!normalizer.is_null()) {
    const std::string type = normalizer.value("type", "");
    if (type != "NFC") return Unsupported("normalizer \"" + type + "\" (NFC or none)");
    nfc_ = true;
  }
  const Json& pre = root.contains("pre_tokenizer") ? root.at("pre_tokenizer") : Json();
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel") {
    return Unsupported(
        "pre_tokenizer " +
        (pre.is_object() ? "\"" + pre.value("type", "") + "\"" : std::string("none")) +
        " (ByteLevel is supported)");
  }
  add_prefix_space_ = pre.value("add_prefix_space", false);
  use_regex_ = pre.value("use_regex", true);
  const Json& dec = root.contains("decoder") ? root.at("decoder") : Json();
  if (!dec.is_object() || dec.value("type", "") != "ByteLevel") {
    return Unsupported(
        "decoder " + (dec.is_object() ? "\"" + dec.value("type", "") + "\"" : std::string("none")) +
        " (ByteLevel is supported)");
  }
  const Json& post = root.contains("post_processor") ? root.at("post_processor") : Json();
  if (!post.is_null() && post.value("type", "") != "ByteLevel") {
    return Unsupported("post_processor \"" + post.value("type", "") + "\" (ByteLevel or none)");
  }
  return Status::Ok();
}

Status BpeTokenizer::Load(const std::string& path) {
  path_ = path;
  SSMKIT_RETURN_IF_ERROR(splitter_.status());
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Fail("not valid JSON");
  if (!root.is_object() || !root.contains("model"))
    return Fail("expected an object with a \"model\"");
  SSMKIT_RETURN_IF_ERROR(ReadPipeline(root));
  SSMKIT_RETURN_IF_ERROR(ReadModel(root.at("model")));
  return ReadAddedTokens(root.contains("added_tokens") ? root.at("added_tokens") : Json());
}

template <class Piece>
Status BpeTokenizer::SplitAdded(std::string_view text, bool normalized, std::vector<int32_t>* ids,
                                Piece&& piece) const {
  size_t start = 0;  // the stretch not yet handed to piece()
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* best = nullptr;
    for (const AddedToken& a : added_tokens_) {
      if (a.normalized != normalized || a.content.size() <= (best ? best->content.size() : 0))
        continue;
      if (text.compare(i, a.content.size(), a.content) == 0) best = &a;
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + best->content.size();
    if (best->lstrip) {
      while (begin > start && IsSpace(text[begin - 1])) --begin;
    }
    if (best->rstrip) {
      while (end < text.size() && IsSpace(text[end])) ++end;
    }
    if (begin > start) SSMKIT_RETURN_IF_ERROR(piece(text.substr(start, begin - start)));
    ids->push_back(best->id);
    start = i = end;
  }
  if (start < text.size()) SSMKIT_RETURN_IF_ERROR(piece(text.substr(start)));
  return Status::Ok();
}

void BpeTokenizer::EncodeWord(const std::string& mapped, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    const int32_t whole = TokenId(mapped);
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  // One symbol per character, then the lowest-ranked adjacent pair merged, leftmost first,
  // until no pair has a merge (the order of the `tokenizers` BPE's priority queue).
  std::vector<int32_t> symbols;
  for (size_t i = 0; i < mapped.size();) {
    const size_t begin = i;
    NextCodePoint(mapped, &i);
    const int32_t id = TokenId(std::string_view(mapped).substr(begin, i - begin));
    if (id >= 0) {
      symbols.push_back(id);
    } else if (unk_id_ >= 0) {
      symbols.push_back(unk_id_);
    }
  }
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), merged = -1;
    size_t best = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      const uint64_t key =
          static_cast<uint64_t>(symbols[k]) << 32 | static_cast<uint32_t>(symbols[k + 1]);
      const auto it = merges_.find(key);
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        merged = it->second.second;
        best = k;
      }
    }
    if (merged < 0) break;
    symbols[best] = merged;
    symbols.erase(symbols.begin() + best + 1);
  }
  ids->insert(ids->end(), symbols.begin(), symbols.end());
}

Status BpeTokenizer::EncodeNormalizedPiece(std::string_view text, std::vector<int32_t>* ids) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string> words;
  if (use_regex_) {
    SSMKIT_RETURN_IF_ERROR(splitter_.Split(text, &words));
  } else {
    words.emplace_back(text);
  }
  const ByteMap& map = TheByteMap();
  for (const std::string& w : words) {
    std::string mapped;
    for (char c : w) mapped += map.byte_to_utf8[static_cast<uint8_t>(c)];
    EncodeWord(mapped, ids);
  }
  return Status::Ok();
}

Status BpeTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  ids->clear();
  return SplitAdded(text, /*normalized=*/false, ids, [&](std::string_view raw) -> Status {
    std::string normalized;
    if (nfc_) {
      SSMKIT_RETURN_IF_ERROR(model::NormalizeNfc(raw, &normalized));
    } else {
      normalized = raw;
    }
    return SplitAdded(normalized, /*normalized=*/true, ids,
                      [&](std::string_view piece) { return EncodeNormalizedPiece(piece, ids); });
  });
}

void BpeTokenizer::AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return;
  if (skip_special && static_cast<size_t>(id) < special_.size() && special_[id]) return;
  const std::string& token = id_to_token_[id];
  // Every character mapped back to its byte; a token with any character outside the map
  // (e.g. an added token with a real space) contributes its own UTF-8 bytes.
  std::string out;
  const ByteMap& map = TheByteMap();
  for (size_t i = 0; i < token.size();) {
    const auto it = map.char_to_byte.find(NextCodePoint(token, &i));
    if (it == map.char_to_byte.end()) {
      bytes->append(token);
      return;
    }
    out.push_back(static_cast<char>(it->second));
  }
  bytes->append(out);
}

}  // namespace

Status Tokenizer::FromFile(const std::string& path, std::unique_ptr<Tokenizer>* tokenizer) {
  auto t = std::make_unique<BpeTokenizer>();
  try {
    SSMKIT_RETURN_IF_ERROR(t->Load(path));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(path + ": out of memory");
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected JSON type
    return Status::InvalidArgument(path + ": malformed tokenizer.json: " + e.what());
  }
  *tokenizer = std::move(t);
  return Status::Ok();
}

}  // namespace ssmkit

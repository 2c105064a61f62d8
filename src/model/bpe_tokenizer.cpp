// Hugging Face tokenizer.json with a BPE model: reading the file and encoding / decoding. The
// steps and their order are those of the `tokenizers` package (include/ssmkit/tokenizer.hpp);
// the normalizer, pre-tokenizer, post-processor and decoder are model/tokenizer_pipeline.*.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/mapped_file.hpp"
#include "model/tokenizer_pipeline.hpp"
#include "model/unicode_text.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit {
namespace {

using Json = nlohmann::json;

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

// Token ids index a table of the tokens: an id far past the number of tokens a file defines
// would make that table gigabytes. Published tokenizers number their tokens densely (a few
// reserved slots at most), so ids stay below twice the count, plus room for small files.
int64_t TokenIdLimit(size_t tokens) { return 2 * static_cast<int64_t>(tokens) + 65536; }

class BpeTokenizer final : public Tokenizer {
 public:
  Status Load(const std::string& path);
  // tokenizer.json's text; `label` names it in messages and name().
  Status LoadText(const std::string& text, const std::string& label);

  Status Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  void AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const override;
  bool IsByteToken(int32_t id) const override {
    return id >= 0 && static_cast<size_t>(id) < byte_token_.size() && byte_token_[id];
  }
  int leading_spaces_stripped() const override { return pipeline_.strip_leading_spaces(); }
  void AddSpecialTokens(std::vector<int32_t>* ids) const override;
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

  // Splits `text` by the added tokens with normalized == `normalized`, leftmost-longest;
  // calls piece(text) for the stretches between them and emits the tokens' ids.
  template <class Piece>
  Status SplitAdded(std::string_view text, bool normalized, std::vector<int32_t>* ids,
                    Piece&& piece) const;
  Status EncodeNormalizedPiece(std::string_view text, bool at_start,
                               std::vector<int32_t>* ids) const;
  void EncodeWord(const std::string& word, std::vector<int32_t>* ids) const;
  // The ids of a character's UTF-8 bytes as <0xNN> tokens (byte fallback); false when the
  // vocabulary lacks one of them.
  bool ByteTokens(std::string_view character, std::vector<int32_t>* ids) const;

  std::string path_;
  std::unordered_map<std::string, int32_t> token_to_id_;  // the model's vocab and added tokens
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;
  std::vector<bool> added_;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<AddedToken> added_tokens_;
  std::vector<bool> byte_token_;  // the <0xNN> tokens, when the decoder has ByteFallback
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  model::TextPipeline pipeline_;
};

Status BpeTokenizer::ReadModel(const Json& model) {
  if (!model.is_object() || model.value("type", "") != "BPE") {
    return Unsupported("\"model.type\" must be \"BPE\"");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    if (model.contains(key) && !model.at(key).is_null())
      return Unsupported(std::string("\"model.") + key + "\"");
  }
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  ignore_merges_ = model.value("ignore_merges", false);
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return Fail("\"model.vocab\" must be an object");
  const int64_t id_limit = TokenIdLimit(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= id_limit) {
      return Fail("\"model.vocab\": the id of '" + token + "': expected an integer in [0, " +
                  std::to_string(id_limit) + "), given " + id.dump());
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
  const int64_t id_limit = TokenIdLimit(id_to_token_.size() + added.size());
  for (const Json& t : added) {
    if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
        !t.at("content").is_string() || !t.at("id").is_number_integer()) {
      return Fail("\"added_tokens\": each entry needs an integer \"id\" and a string \"content\"");
    }
    if (t.at("id").get<int64_t>() < 0 || t.at("id").get<int64_t>() >= id_limit) {
      return Fail("\"added_tokens\": the id of '" + t.at("content").get<std::string>() +
                  "': expected an integer in [0, " + std::to_string(id_limit) + "), given " +
                  t.at("id").dump());
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

Status BpeTokenizer::Load(const std::string& path) {
  path_ = path;
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
  return LoadText(text, path);
}

Status BpeTokenizer::LoadText(const std::string& text, const std::string& label) {
  path_ = label;
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Fail("not valid JSON");
  if (!root.is_object() || !root.contains("model"))
    return Fail("expected an object with a \"model\"");
  if (const Status s = pipeline_.Load(root); !s.ok())
    return Status(s.code(), path_ + ": " + s.message());
  SSMKIT_RETURN_IF_ERROR(ReadModel(root.at("model")));
  SSMKIT_RETURN_IF_ERROR(
      ReadAddedTokens(root.contains("added_tokens") ? root.at("added_tokens") : Json()));
  byte_token_.assign(id_to_token_.size(), false);
  for (size_t id = 0; id < id_to_token_.size(); ++id) {
    std::string bytes;
    int byte = -1;
    pipeline_.DecodeToken(id_to_token_[id], &bytes, &byte);
    byte_token_[id] = byte >= 0;
  }
  return Status::Ok();
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

bool BpeTokenizer::ByteTokens(std::string_view character, std::vector<int32_t>* ids) const {
  const size_t before = ids->size();
  for (char c : character) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", static_cast<uint8_t>(c));
    const int32_t id = TokenId(name);
    if (id < 0) {
      ids->resize(before);
      return false;
    }
    ids->push_back(id);
  }
  return true;
}

void BpeTokenizer::EncodeWord(const std::string& word, std::vector<int32_t>* ids) const {
  const std::string& mapped = word;
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
    model::NextCodePoint(mapped, &i);
    const std::string_view character = std::string_view(mapped).substr(begin, i - begin);
    const int32_t id = TokenId(character);
    if (id >= 0) {
      symbols.push_back(id);
    } else if (byte_fallback_ && ByteTokens(character, &symbols)) {
      continue;
    } else if (unk_id_ >= 0 && !(fuse_unk_ && !symbols.empty() && symbols.back() == unk_id_)) {
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

Status BpeTokenizer::EncodeNormalizedPiece(std::string_view text, bool at_start,
                                           std::vector<int32_t>* ids) const {
  std::vector<std::string> words;
  SSMKIT_RETURN_IF_ERROR(pipeline_.PreTokenize(text, at_start, &words));
  for (const std::string& w : words) {
    if (!w.empty()) EncodeWord(w, ids);
  }
  return Status::Ok();
}

Status BpeTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  ids->clear();
  return SplitAdded(text, /*normalized=*/false, ids, [&](std::string_view raw) -> Status {
    std::string normalized;
    SSMKIT_RETURN_IF_ERROR(pipeline_.Normalize(raw, &normalized));
    const bool raw_at_start = raw.data() == text.data();
    return SplitAdded(normalized, /*normalized=*/true, ids, [&](std::string_view piece) {
      return EncodeNormalizedPiece(piece, raw_at_start && piece.data() == normalized.data(), ids);
    });
  });
}

void BpeTokenizer::AddSpecialTokens(std::vector<int32_t>* ids) const {
  ids->insert(ids->begin(), pipeline_.template_before().begin(), pipeline_.template_before().end());
  ids->insert(ids->end(), pipeline_.template_after().begin(), pipeline_.template_after().end());
}

void BpeTokenizer::AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return;
  if (skip_special && static_cast<size_t>(id) < special_.size() && special_[id]) return;
  int byte = -1;
  pipeline_.DecodeToken(id_to_token_[id], bytes, &byte);
  if (byte >= 0) bytes->push_back(static_cast<char>(byte));
}

}  // namespace

// Runs a BpeTokenizer loader, turning exceptions into a Status naming `label`.
template <class LoadFn>
Status MakeBpe(const std::string& label, LoadFn&& load, std::unique_ptr<Tokenizer>* tokenizer) {
  auto t = std::make_unique<BpeTokenizer>();
  try {
    SSMKIT_RETURN_IF_ERROR(load(t.get()));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(label + ": out of memory");
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected JSON type
    return Status::InvalidArgument(label + ": malformed tokenizer.json: " + e.what());
  }
  *tokenizer = std::move(t);
  return Status::Ok();
}

Status Tokenizer::FromFile(const std::string& path, std::unique_ptr<Tokenizer>* tokenizer) {
  return MakeBpe(
      path, [&](BpeTokenizer* t) { return t->Load(path); }, tokenizer);
}

Status Tokenizer::FromJson(const std::string& json, const std::string& label,
                           std::unique_ptr<Tokenizer>* tokenizer) {
  return MakeBpe(
      label, [&](BpeTokenizer* t) { return t->LoadText(json, label); }, tokenizer);
}

}  // namespace ssmkit

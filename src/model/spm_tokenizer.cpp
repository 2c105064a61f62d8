// The SentencePiece-style tokenizer of GGUF "llama" vocabularies (model/spm_tokenizer.hpp): the
// special-token cut, the score-ordered merging of adjacent symbols, byte fallback, decoding.
#include "model/spm_tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>
#include <string_view>
#include <unordered_map>

namespace ssmkit::model {
namespace {

constexpr char kSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's stand-in for a space

// A UTF-8 character's length as its lead byte says (a continuation byte stands alone), cut at
// the end of the text: how llama.cpp's SPM tokenizer splits text into symbols, valid or not.
size_t CharLength(std::string_view s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  const size_t n = b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

// 0..255 for a token spelled <0xNN>, else -1.
int ByteValue(const std::string& token) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const int hi = hex(token[3]), lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

bool IsSpecialType(int32_t type) {
  return type == kSpmControl || type == kSpmUserDefined || type == kSpmUnknown;
}

class SpmTokenizer final : public Tokenizer {
 public:
  Status Init(SpmVocab vocab, const std::string& label);

  Status Encode(std::string_view text, std::vector<int32_t>* ids) const override;
  void AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const override;
  bool IsByteToken(int32_t id) const override { return InRange(id) && v_.types[id] == kSpmByte; }
  int leading_spaces_stripped() const override { return v_.add_space_prefix ? 1 : 0; }
  void AddSpecialTokens(std::vector<int32_t>* ids) const override {
    if (v_.add_bos && v_.bos >= 0) ids->insert(ids->begin(), v_.bos);
    if (v_.add_eos && v_.eos >= 0) ids->push_back(v_.eos);
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(v_.tokens.size()); }
  int32_t TokenId(std::string_view token) const override { return Find(token); }
  std::string name() const override { return "spm (" + label_ + ")"; }

 private:
  bool InRange(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < v_.tokens.size(); }
  int32_t Find(std::string_view text) const {
    const auto it = ids_.find(std::string(text));
    return it == ids_.end() ? -1 : it->second;
  }
  // Steps 2-4 of model/spm_tokenizer.hpp on one stretch between special tokens.
  Status EncodeStretch(std::string_view stretch, bool prefix_space,
                       std::vector<int32_t>* ids) const;

  SpmVocab v_;
  std::string label_;
  std::unordered_map<std::string, int32_t> ids_;  // text -> id (the first of a repeated text)
  std::vector<int32_t> specials_;                 // cut out of the text, longest first
  std::vector<int16_t> byte_of_;                  // (V) a byte token's byte, else -1
  int32_t byte_token_[256];                       // byte fallback: -1 when there is none
};

Status SpmTokenizer::Init(SpmVocab vocab, const std::string& label) {
  v_ = std::move(vocab);
  label_ = label;
  const size_t n = v_.tokens.size();
  if (v_.scores.size() != n || v_.types.size() != n) {
    return Status::InvalidArgument(label_ + ": " + std::to_string(n) + " tokens but " +
                                   std::to_string(v_.scores.size()) + " scores and " +
                                   std::to_string(v_.types.size()) + " token types");
  }
  for (int32_t* id : {&v_.bos, &v_.eos, &v_.unk}) {
    if (!InRange(*id)) *id = -1;
  }
  byte_of_.assign(n, -1);
  for (size_t id = 0; id < n; ++id) {
    const std::string& token = v_.tokens[id];
    // A NaN would break the ordering of the merge queue: such a token is never merged to.
    if (std::isnan(v_.scores[id])) v_.scores[id] = -std::numeric_limits<float>::infinity();
    if (v_.types[id] == kSpmByte) {
      byte_of_[id] = static_cast<int16_t>(ByteValue(token));
      if (byte_of_[id] < 0) {
        return Status::InvalidArgument(label_ + ": token " + std::to_string(id) +
                                       " is of the byte type but spelled '" + token +
                                       "', expected <0xNN>");
      }
    }
    if (token.empty()) continue;  // never matched (llama.cpp renames it)
    ids_.emplace(token, static_cast<int32_t>(id));
    if (IsSpecialType(v_.types[id])) specials_.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return v_.tokens[a].size() > v_.tokens[b].size(); });
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    int32_t id = Find(name);
    if (id < 0) id = Find(std::string(1, static_cast<char>(b)));
    byte_token_[b] = id >= 0 ? id : v_.unk;
  }
  return Status::Ok();
}

Status SpmTokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  ids->clear();
  // Step 1: stretches of text (token -1) and special tokens, in order.
  struct Piece {
    std::string_view text;
    int32_t token;
  };
  std::vector<Piece> pieces;
  if (!text.empty()) pieces.push_back({text, -1});
  for (int32_t special : specials_) {
    const std::string& s = v_.tokens[special];
    std::vector<Piece> cut;
    for (const Piece& p : pieces) {
      if (p.token >= 0) {
        cut.push_back(p);
        continue;
      }
      size_t start = 0;
      for (size_t hit; (hit = p.text.find(s, start)) != std::string_view::npos;
           start = hit + s.size()) {
        if (hit > start) cut.push_back({p.text.substr(start, hit - start), -1});
        cut.push_back({{}, special});
      }
      if (start < p.text.size()) cut.push_back({p.text.substr(start), -1});
    }
    pieces = std::move(cut);
  }
  bool after_special = true;  // the start of the text counts as one
  for (const Piece& p : pieces) {
    if (p.token >= 0) {
      ids->push_back(p.token);
      after_special = true;
      continue;
    }
    SSMKIT_RETURN_IF_ERROR(EncodeStretch(p.text, v_.add_space_prefix && after_special, ids));
    after_special = false;
  }
  return Status::Ok();
}

Status SpmTokenizer::EncodeStretch(std::string_view stretch, bool prefix_space,
                                   std::vector<int32_t>* ids) const {
  // Step 2.
  std::string text = prefix_space ? kSpace : "";
  for (char c : stretch) {
    if (c == ' ') {
      text += kSpace;
    } else {
      text.push_back(c);
    }
  }
  // Step 3: symbols as a linked list over `text`; merged symbols grow to the right and the
  // symbol merged into its left neighbour is emptied.
  struct Symbol {
    size_t begin, size;
    int64_t prev, next;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < text.size();) {
    const size_t n = CharLength(text, i);
    const int64_t index = static_cast<int64_t>(symbols.size());
    symbols.push_back({i, n, index - 1, i + n < text.size() ? index + 1 : int64_t{-1}});
    i += n;
  }
  // A candidate merge of symbols left and right, spelling a token of the given score; stale
  // once either symbol has changed (their sizes no longer add up to `size`).
  struct Candidate {
    float score;
    int64_t left, right;
    size_t size;
  };
  auto lower = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
  auto propose = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].size + symbols[right].size;
    const int32_t id = Find(std::string_view(text).substr(symbols[left].begin, size));
    if (id >= 0) queue.push({v_.scores[id], left, right, size});
  };
  for (int64_t i = 1; i < static_cast<int64_t>(symbols.size()); ++i) propose(i - 1, i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[c.left];
    Symbol& r = symbols[c.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != c.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    propose(l.prev, c.left);
    propose(c.left, l.next);
  }
  // Step 4.
  for (int64_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view s = std::string_view(text).substr(symbols[i].begin, symbols[i].size);
    const int32_t id = Find(s);
    if (id >= 0) {
      ids->push_back(id);
      continue;
    }
    for (char c : s) {
      const int32_t b = byte_token_[static_cast<uint8_t>(c)];
      if (b < 0) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", static_cast<uint8_t>(c));
        return Status::InvalidArgument(label_ + ": byte " + hex +
                                       " of the text is in no token, and the vocabulary has "
                                       "neither byte tokens nor an unknown token");
      }
      ids->push_back(b);
    }
  }
  return Status::Ok();
}

void SpmTokenizer::AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const {
  if (!InRange(id)) return;
  const std::string& token = v_.tokens[id];
  switch (v_.types[id]) {
    case kSpmNormal:
      for (size_t i = 0; i < token.size();) {
        if (token.compare(i, 3, kSpace) == 0) {
          bytes->push_back(' ');
          i += 3;
        } else {
          bytes->push_back(token[i++]);
        }
      }
      return;
    case kSpmByte:
      bytes->push_back(static_cast<char>(byte_of_[id]));
      return;
    case kSpmUserDefined:
      bytes->append(token);
      return;
    case kSpmControl:
    case kSpmUnknown:
      if (!skip_special) bytes->append(token);
      return;
    default:  // unused and undefined tokens stand for no text
      return;
  }
}

}  // namespace

Status MakeSpmTokenizer(SpmVocab vocab, const std::string& label,
                        std::unique_ptr<Tokenizer>* tokenizer) {
  auto t = std::make_unique<SpmTokenizer>();
  try {
    SSMKIT_RETURN_IF_ERROR(t->Init(std::move(vocab), label));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(label + ": out of memory");
  }
  *tokenizer = std::move(t);
  return Status::Ok();
}

}  // namespace ssmkit::model

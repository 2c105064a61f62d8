// The Unicode-aware steps of a BPE tokenizer, on ICU: NFC normalization and the pre-tokenizer
// regexes (the GPT-2 one ByteLevel uses, and a Split pre-tokenizer's own). Strings are UTF-8.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Decodes the UTF-8 character at s[*i] (valid UTF-8 assumed) and advances *i past it.
inline uint32_t NextCodePoint(std::string_view s, size_t* i) {
  const uint8_t b = static_cast<uint8_t>(s[*i]);
  const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
  for (int k = 1; k < len && *i + k < s.size(); ++k)
    cp = cp << 6 | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

// Canonical composition (NFC). Invalid UTF-8 is read with U+FFFD replacements first.
Status NormalizeNfc(std::string_view text, std::string* out);

// Splits text at the matches of a regex, each match and each stretch between matches a piece
// (the `tokenizers` Split pre-tokenizer's "Isolated" behaviour). \s and \S in the pattern mean
// what they mean in Oniguruma (the `tokenizers` regex engine): [\t\n\v\f\r\x85\p{Z}], which
// ICU's \s lacks \v and \x85 of, so they are rewritten before ICU compiles the pattern.
class RegexSplitter {
 public:
  // The GPT-2 split of the `tokenizers` ByteLevel pre-tokenizer:
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  static const char* GptPattern();

  explicit RegexSplitter(std::string_view pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Set when ICU could not compile the pattern (naming the ICU error).
  Status status() const { return status_; }
  // Appends the pieces of `text`, in order; their concatenation is `text`.
  Status Split(std::string_view text, std::vector<std::string>* pieces) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Status status_;
};

}  // namespace ssmkit::model

// The Unicode-aware steps of a BPE tokenizer, on ICU: NFC normalization and the pre-tokenizer
// regexes (the GPT-2 one ByteLevel uses, and a Split pre-tokenizer's own). Strings are UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit::model {

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

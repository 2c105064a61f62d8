// The two Unicode-aware steps of a byte-level BPE tokenizer, on ICU: NFC normalization and the
// GPT-2 pre-tokenizer regex. Strings are UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit::model {

// Canonical composition (NFC). Invalid UTF-8 is read with U+FFFD replacements first.
Status NormalizeNfc(std::string_view text, std::string* out);

// The GPT-2 split of the `tokenizers` ByteLevel pre-tokenizer:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s as Oniguruma's (the `tokenizers` regex engine): [\t\n\v\f\r\x85\p{Z}].
class GptSplitter {
 public:
  GptSplitter();
  ~GptSplitter();
  GptSplitter(const GptSplitter&) = delete;
  GptSplitter& operator=(const GptSplitter&) = delete;

  Status status() const { return status_; }  // set when ICU could not compile the pattern
  // Appends the pieces of `text`, in order; their concatenation is `text`.
  Status Split(std::string_view text, std::vector<std::string>* pieces) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Status status_;
};

}  // namespace ssmkit::model

// The text a request receives as its tokens are generated: each token's text (complete UTF-8
// characters only, special tokens skipped), with OpenAI's stop strings applied. Text that may
// be the beginning of a stop string is held back until the next token settles it, so a
// streamed response never sends text a later stop would have cut; generation ends at the first
// stop string found, which is not part of the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ssmkit/tokenizer.hpp"

namespace ssmkit::server {

class TextOutput {
 public:
  TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop);

  // Adds token `id`; returns the text that may now be sent (often the token's own, sometimes
  // empty). *stopped becomes true when a stop string completed: the text returned ends just
  // before it and no further token should be pushed.
  std::string Push(int32_t id, bool* stopped);
  // At the end of generation (not after a stop): the text still held back.
  std::string Finish();

 private:
  // The text of held_ that cannot start a stop string, removed from held_; or, with a stop
  // string in held_, the text before it (*stopped).
  std::string Release(bool* stopped);

  TokenTextStream stream_;
  std::vector<std::string> stop_;
  std::string held_;
};

}  // namespace ssmkit::server

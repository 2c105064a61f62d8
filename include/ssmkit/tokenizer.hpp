// Tokenizers for the Mamba checkpoints: Hugging Face tokenizer.json byte-level BPE (GPT-2 /
// GPT-NeoX style, which the state-spaces models use) and a raw-byte tokenizer (vocab 256).
//
// Byte-level BPE, as the `tokenizers` package runs it:
//   1. added tokens that are not normalized (the special ones) are split out of the raw text,
//      leftmost-longest;
//   2. the rest is normalized (NFC, when tokenizer.json asks for it), and normalized added
//      tokens are split out of it;
//   3. each remaining piece is cut by the GPT-2 regex, each part's UTF-8 bytes mapped to
//      printable characters (bytes_to_unicode), and the BPE merges applied, lowest rank first.
// Decoding maps each token's characters back to bytes (a token with a character outside that
// map, e.g. an added token, contributes its UTF-8 bytes as they are) and reads the bytes as
// UTF-8, each invalid sequence replaced by U+FFFD (Rust's from_utf8_lossy).
// docs/model.md lists what tokenizer.json features are supported.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A Hugging Face tokenizer.json with a byte-level BPE model.
  static Status FromFile(const std::string& path, std::unique_ptr<Tokenizer>* tokenizer);
  // Token i is byte i (vocab 256).
  static std::unique_ptr<Tokenizer> Bytes();
  // The tokenizer of the checkpoint in `model_dir`: its tokenizer.json, or, when it has none
  // and the model's vocabulary has at most 256 rows (a byte-level model such as the built-in
  // one), Bytes(). Fails naming the directory otherwise.
  static Status ForModel(const std::string& model_dir, int64_t model_vocab_size,
                         std::unique_ptr<Tokenizer>* tokenizer);

  virtual Status Encode(std::string_view text, std::vector<int32_t>* ids) const = 0;
  // The bytes token `id` stands for, appended to `bytes` (nothing for an unknown id, or for a
  // special token when skip_special). Concatenate, then read with Utf8Lossy.
  virtual void AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const = 0;
  // The text of `ids`: their bytes, read as UTF-8 with invalid sequences replaced.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  virtual int64_t vocab_size() const = 0;  // the largest id + 1
  // The id of a token's text (e.g. "<|endoftext|>"), or -1.
  virtual int32_t TokenId(std::string_view token) const = 0;
  virtual std::string name() const = 0;  // "bpe (path)" or "bytes"
};

// The text of generated tokens as they come: the bytes of a character split across tokens are
// held until it is complete, so that every piece is valid UTF-8 on its own and the pieces
// concatenate to Decode(all ids).
class TokenTextStream {
 public:
  TokenTextStream(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  // The text `id` completes (often all of its own, sometimes empty). Valid until the next call.
  const std::string& Push(int32_t id);
  // What is still held (an incomplete character, as U+FFFD); the stream is then empty.
  const std::string& Finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete character
  std::string text_;
};

// Reads `bytes` as UTF-8, each maximal invalid subsequence replaced by U+FFFD, appending to
// `text`. With final = false an incomplete sequence at the end is left unread: the return
// value is the number of bytes consumed (streaming output keeps the rest for the next call).
size_t Utf8Lossy(std::string_view bytes, bool final, std::string* text);

}  // namespace ssmkit

// Tokenizers for the checkpoints: Hugging Face tokenizer.json BPE (byte-level, GPT-2 / GPT-NeoX
// style, with the GPT-2 regex or a Split by the model's own, as the Mamba and most hybrid
// checkpoints use; and SentencePiece-style with byte fallback, as Jamba and Zamba2 use), a GGUF
// file's SentencePiece vocabulary (src/model/spm_tokenizer.hpp), and a raw-byte tokenizer
// (vocab 256).
//
// BPE, as the `tokenizers` package runs it:
//   1. added tokens that are not normalized (the special ones) are split out of the raw text,
//      leftmost-longest;
//   2. the rest is normalized (NFC; Prepend and Replace), and normalized added tokens are split
//      out of it;
//   3. each remaining piece is pre-tokenized (ByteLevel: cut by the GPT-2 regex, each part's
//      UTF-8 bytes mapped to printable characters; Split by a regex; Metaspace: spaces to "▁"),
//      and the BPE merges applied to each word, lowest rank first; a character missing from the
//      vocabulary becomes its <0xNN> byte tokens (byte fallback) or the unknown token.
// Decoding maps each token back to bytes (ByteLevel: its characters through the byte map, a
// token with a character outside it contributing its UTF-8 bytes as they are; "▁" back to a
// space; <0xNN> tokens to their byte) and reads the bytes as UTF-8, each invalid sequence
// replaced by U+FFFD (Rust's from_utf8_lossy).
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
  // The same from tokenizer.json's text in memory; `label` names it in messages.
  static Status FromJson(const std::string& json, const std::string& label,
                         std::unique_ptr<Tokenizer>* tokenizer);
  // Token i is byte i (vocab 256).
  static std::unique_ptr<Tokenizer> Bytes();
  // The tokenizer of the checkpoint in `model_dir`: its tokenizer.json, or, when it has none
  // and the model's vocabulary has at most 256 rows (a byte-level model such as the built-in
  // one), Bytes(). Fails naming the directory otherwise. A GGUF file instead of a directory:
  // the tokenizer its metadata describes (tokenizer.ggml.*: a "gpt2" byte-level BPE, or a
  // "llama" SentencePiece vocabulary tokenized as llama.cpp does, docs/gguf.md).
  static Status ForModel(const std::string& model_dir, int64_t model_vocab_size,
                         std::unique_ptr<Tokenizer>* tokenizer);

  virtual Status Encode(std::string_view text, std::vector<int32_t>* ids) const = 0;
  // The bytes token `id` stands for, appended to `bytes` (nothing for an unknown id, or for a
  // special token when skip_special). Concatenate, then read with Utf8Lossy.
  virtual void AppendTokenBytes(int32_t id, bool skip_special, std::string* bytes) const = 0;
  // The text of `ids`: their bytes, read as UTF-8 with invalid sequences replaced (a
  // TokenTextStream over them).
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // A byte-fallback token (<0xNN>, its byte from AppendTokenBytes): a run of them that is not
  // valid UTF-8 decodes to one U+FFFD per token, as the `tokenizers` ByteFallback decoder does.
  virtual bool IsByteToken(int32_t id) const {
    (void)id;
    return false;
  }
  // Leading spaces the decoder removes from the start of the text (SentencePiece-style
  // tokenizers drop the space their encoder put before the first word).
  virtual int leading_spaces_stripped() const { return 0; }
  // The post-processor's single-sequence template (transformers' add_special_tokens=True):
  // e.g. a beginning-of-text token put before `ids`. Nothing for most tokenizers.
  virtual void AddSpecialTokens(std::vector<int32_t>* ids) const { (void)ids; }

  virtual int64_t vocab_size() const = 0;  // the largest id + 1
  // The id of a token's text (e.g. "<|endoftext|>"), or -1.
  virtual int32_t TokenId(std::string_view token) const = 0;
  virtual std::string name() const = 0;  // "bpe (path)" or "bytes"
};

// The text of generated tokens as they come: the bytes of a character split across tokens (and
// a run of byte-fallback tokens) are held until complete, so that every piece is valid UTF-8 on
// its own and the pieces concatenate to Decode(all ids).
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
  void FlushByteRun();

  int strip_ = -1;       // leading spaces still to remove (-1: not yet read from the tokenizer)
  std::string pending_;  // bytes of an incomplete character
  std::string run_;      // the bytes of a run of byte-fallback tokens
  int64_t run_tokens_ = 0;
  std::string text_;
};

// Reads `bytes` as UTF-8, each maximal invalid subsequence replaced by U+FFFD, appending to
// `text`. With final = false an incomplete sequence at the end is left unread: the return
// value is the number of bytes consumed (streaming output keeps the rest for the next call).
size_t Utf8Lossy(std::string_view bytes, bool final, std::string* text);

}  // namespace ssmkit

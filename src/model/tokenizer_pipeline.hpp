// The text steps around a tokenizer.json BPE model, as the `tokenizers` package runs them:
// normalizer, pre-tokenizer, post-processor and decoder, each a supported type or a Sequence of
// them (anything else is an error naming it). docs/model.md lists the supported types.
//
//   normalizer     NFC | Prepend(s) | Replace(String a, b)
//   pre-tokenizer  ByteLevel (GPT-2 split unless use_regex is false; bytes mapped to printable
//                  characters) | Split(Regex, "Isolated") | Metaspace(replacement,
//                  prepend_scheme always / first / never, split)
//   post-processor ByteLevel (offsets only) | TemplateProcessing (its single-sequence template:
//                  the special tokens around the text)
//   decoder        ByteLevel | Replace(String a, b) | ByteFallback (<0xNN> tokens are bytes) |
//                  Fuse | Strip(after Fuse, leading characters) | Metaspace
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/unicode_text.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

class TextPipeline {
 public:
  // Reads "normalizer", "pre_tokenizer", "post_processor" and "decoder" of a tokenizer.json.
  // Errors are Unsupported / InvalidArgument messages without the file name (the caller adds it).
  Status Load(const nlohmann::json& root);

  // The normalizer over one stretch of text between added tokens.
  Status Normalize(std::string_view text, std::string* out) const;
  // The pre-tokenizer over a normalized stretch: the words the BPE model encodes one by one.
  // `at_start`: the stretch begins the input text (Metaspace's prepend_scheme "first").
  Status PreTokenize(std::string_view text, bool at_start, std::vector<std::string>* words) const;

  // The post-processor's single-sequence template: token ids before and after the text.
  const std::vector<int32_t>& template_before() const { return before_; }
  const std::vector<int32_t>& template_after() const { return after_; }

  // Decoding of one token's string: its bytes appended (ByteLevel: characters mapped back to
  // bytes; Replace; Metaspace: the replacement back to a space). `byte` receives 0..255 when
  // the token is a <0xNN> byte token and ByteFallback is on (nothing appended then), else -1.
  void DecodeToken(const std::string& token, std::string* bytes, int* byte) const;
  // Leading spaces the decoder removes from the start of the decoded text (Strip after Fuse,
  // or Metaspace's first-token space).
  int strip_leading_spaces() const { return strip_; }
  bool byte_level() const { return byte_level_; }

 private:
  struct Replace {
    std::string from, to;
  };
  Status LoadNormalizer(const nlohmann::json& j);
  Status LoadPreTokenizer(const nlohmann::json& j);
  Status LoadPostProcessor(const nlohmann::json& j);
  Status LoadDecoder(const nlohmann::json& j, bool* fused);

  // Normalizer steps, in order: kNfc, prepend, replace.
  struct NormalizerStep {
    enum Kind { kNfc, kPrepend, kReplace } kind;
    std::string a, b;
  };
  std::vector<NormalizerStep> normalizers_;

  struct PreTokenizerStep {
    enum Kind { kByteLevel, kSplit, kMetaspace } kind;
    bool add_prefix_space = false;         // ByteLevel
    std::shared_ptr<RegexSplitter> regex;  // ByteLevel with use_regex, Split
    std::string replacement;               // Metaspace
    int prepend = 0;                       // Metaspace: 0 never, 1 first, 2 always
    bool split = false;                    // Metaspace
  };
  std::vector<PreTokenizerStep> pre_tokenizers_;
  bool byte_level_ = false;  // a ByteLevel pre-tokenizer maps the words' bytes

  std::vector<int32_t> before_, after_;

  bool decode_byte_level_ = false, byte_fallback_ = false;
  std::vector<Replace> decode_replaces_;
  int strip_ = 0;
};

}  // namespace ssmkit::model

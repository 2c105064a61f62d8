// The SentencePiece-style tokenizer of a GGUF "llama" vocabulary (tokenizer.ggml.model
// "llama"), as llama.cpp runs it (its SPM tokenizer): the vocabulary is tokens, a score each
// and a type each, and no merge list.
//
// Encode:
//   1. the text is cut at the special tokens (control, user-defined and unknown types),
//      longest token text first, every occurrence, left to right (llama.cpp with
//      parse_special); the stretches between them are encoded alone;
//   2. a stretch gets a space put before it when add_space_prefix and it is the text's start or
//      follows a special token; its spaces become U+2581 ("▁");
//   3. one symbol per UTF-8 character (its length read from the lead byte alone); then, while
//      some adjacent pair of symbols spells a token, the pair whose token has the highest score
//      is merged (the leftmost among equal scores);
//   4. each symbol is its token, or, when it is none (a character outside the vocabulary), one
//      <0xNN> byte token per UTF-8 byte (else the byte as a token, else the unknown token).
// AddSpecialTokens puts bos first when add_bos, and eos last when add_eos.
// Decode: normal tokens with "▁" back to spaces, byte tokens as their byte, user-defined tokens
// as written, control and unknown tokens as written unless special tokens are skipped, unused
// tokens as nothing; one leading space is stripped when add_space_prefix (the one step 2 put
// there).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::model {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum SpmTokenType : int32_t {
  kSpmUndefined = 0,
  kSpmNormal = 1,
  kSpmUnknown = 2,
  kSpmControl = 3,
  kSpmUserDefined = 4,
  kSpmUnused = 5,
  kSpmByte = 6,
};

struct SpmVocab {
  std::vector<std::string> tokens;       // (V) id -> text
  std::vector<float> scores;             // (V) merge priority of each token, highest first
  std::vector<int32_t> types;            // (V) SpmTokenType
  int32_t bos = -1, eos = -1, unk = -1;  // -1: none
  bool add_bos = true, add_eos = false, add_space_prefix = true;
};

// `label` names the vocabulary in messages and in name() ("spm (<label>)"). Fails when the
// lists differ in length or a byte-type token is not spelled <0xNN>.
Status MakeSpmTokenizer(SpmVocab vocab, const std::string& label,
                        std::unique_ptr<Tokenizer>* tokenizer);

}  // namespace ssmkit::model

// libFuzzer target for tokenizer encode and decode on the fixture tokenizers (tests/fixtures/
// tokenizer*: byte-level with NFC and a Split pre-tokenizer, SentencePiece-style with byte
// fallback, Metaspace; and the SentencePiece ("llama") vocabulary of the jamba GGUF seed,
// tests/fuzz/corpus/gguf/jamba-q8_0.gguf, tokenized as llama.cpp does): any bytes as the text
// to encode. Properties:
//   - every id is below vocab_size and the decoded text is valid UTF-8;
//   - the streamed text (TokenTextStream, token by token) equals Decode of all ids;
//   - byte-level tokenizers lose nothing: for valid UTF-8 input, Decode(Encode(text)) is the
//     text's NFC form (their normalizer); the GGUF vocabulary (no space prefix, byte fallback)
//     gives back valid UTF-8 text as it is, unless it holds U+2581 (which decodes to a space).
// Seeds: tests/fuzz/corpus/bpe/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/unicode_text.hpp"
#include "ssmkit/tokenizer.hpp"

namespace {

// What Decode(Encode(text)) must give for valid UTF-8 text.
enum class RoundTrip { kAnything, kNfc, kSame };

struct Fixture {
  std::unique_ptr<ssmkit::Tokenizer> tokenizer;
  RoundTrip round_trip;
};

std::vector<Fixture> LoadFixtures() {
  std::vector<Fixture> out;
  for (auto [dir, round_trip] : {std::pair{"tokenizer", RoundTrip::kNfc},
                                 {"tokenizer-split", RoundTrip::kNfc},
                                 {"tokenizer-spm", RoundTrip::kAnything},
                                 {"tokenizer-spm-metaspace", RoundTrip::kAnything}}) {
    Fixture f{nullptr, round_trip};
    const std::string path = std::string(SSMKIT_FIXTURES_DIR) + "/" + dir + "/tokenizer.json";
    if (!ssmkit::Tokenizer::FromFile(path, &f.tokenizer).ok()) std::abort();
    out.push_back(std::move(f));
  }
  Fixture gguf{nullptr, RoundTrip::kSame};
  const std::string path =
      std::string(SSMKIT_FIXTURES_DIR) + "/../fuzz/corpus/gguf/jamba-q8_0.gguf";
  if (!ssmkit::Tokenizer::ForModel(path, 0, &gguf.tokenizer).ok()) std::abort();
  out.push_back(std::move(gguf));
  return out;
}

bool ValidUtf8(std::string_view s) {
  std::string lossy;
  ssmkit::Utf8Lossy(s, /*final=*/true, &lossy);
  return lossy == s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Fixture> fixtures = LoadFixtures();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = ValidUtf8(text);
  for (const Fixture& f : fixtures) {
    std::vector<int32_t> ids;
    if (!f.tokenizer->Encode(text, &ids).ok()) {
      if (valid) std::abort();  // valid UTF-8 always encodes
      continue;
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= f.tokenizer->vocab_size()) std::abort();
    }
    const std::string decoded = f.tokenizer->Decode(ids);
    if (!ValidUtf8(decoded)) std::abort();
    ssmkit::TokenTextStream stream(*f.tokenizer, /*skip_special=*/false);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Finish();
    if (streamed != decoded) std::abort();
    if (f.round_trip == RoundTrip::kNfc && valid) {
      std::string nfc;
      if (!ssmkit::model::NormalizeNfc(text, &nfc).ok() || decoded != nfc) std::abort();
    }
    if (f.round_trip == RoundTrip::kSame && valid &&
        text.find("\xE2\x96\x81") == std::string_view::npos && decoded != text) {
      std::abort();
    }
  }
  return 0;
}

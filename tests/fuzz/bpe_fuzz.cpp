// libFuzzer target for BPE encode and decode on the fixture tokenizers (tests/fixtures/
// tokenizer*: byte-level with NFC and a Split pre-tokenizer, SentencePiece-style with byte
// fallback, Metaspace): any bytes as the text to encode. Properties:
//   - every id is below vocab_size and the decoded text is valid UTF-8;
//   - the streamed text (TokenTextStream, token by token) equals Decode of all ids;
//   - byte-level tokenizers lose nothing: for valid UTF-8 input, Decode(Encode(text)) is the
//     text's NFC form (their normalizer).
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

struct Fixture {
  std::unique_ptr<ssmkit::Tokenizer> tokenizer;
  bool byte_level;
};

std::vector<Fixture> LoadFixtures() {
  std::vector<Fixture> out;
  for (auto [dir, byte_level] : {std::pair{"tokenizer", true},
                                 {"tokenizer-split", true},
                                 {"tokenizer-spm", false},
                                 {"tokenizer-spm-metaspace", false}}) {
    Fixture f{nullptr, byte_level};
    const std::string path = std::string(SSMKIT_FIXTURES_DIR) + "/" + dir + "/tokenizer.json";
    if (!ssmkit::Tokenizer::FromFile(path, &f.tokenizer).ok()) std::abort();
    out.push_back(std::move(f));
  }
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
    if (f.byte_level && valid) {
      std::string nfc;
      if (!ssmkit::model::NormalizeNfc(text, &nfc).ok() || decoded != nfc) std::abort();
    }
  }
  return 0;
}

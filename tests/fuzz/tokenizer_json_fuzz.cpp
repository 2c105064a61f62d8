// libFuzzer target for tokenizer.json loading (src/model/bpe_tokenizer.cpp and the pipeline
// of normalizers, pre-tokenizers and decoders): any bytes as a tokenizer.json must load or fail
// with a Status naming the problem, never crash. A tokenizer that loads must encode a few texts
// to ids below its vocab_size and decode them. Seeds: tests/fuzz/corpus/tokenizer_json/ and
// the fixture tokenizers (scripts/fuzz.sh passes them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_file.hpp"
#include "ssmkit/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ssmkit::fuzz::MemoryFile file(data, size);
  std::unique_ptr<ssmkit::Tokenizer> tokenizer;
  const ssmkit::Status loaded = ssmkit::Tokenizer::FromFile(file.path(), &tokenizer);
  if (!loaded.ok()) {
    if (loaded.message().empty()) std::abort();
    return 0;
  }
  for (const char* text :
       {"Hello, world! 123", " leading  spaces\n\ttabs", "caf\xc3\xa9 \xe2\x96\x81",
        "\xf0\x9f\x98\x80 <s></s><|endoftext|>", ""}) {
    std::vector<int32_t> ids;
    if (!tokenizer->Encode(text, &ids).ok()) continue;
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer->vocab_size()) std::abort();
    }
    (void)tokenizer->Decode(ids);
    (void)tokenizer->Decode(ids, /*skip_special=*/true);
  }
  return 0;
}

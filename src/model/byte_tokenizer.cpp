// The raw-byte tokenizer: token i is byte i, for byte-level models (vocab 256).
#include "ssmkit/tokenizer.hpp"

namespace ssmkit {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  Status Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    ids->clear();
    for (char c : text) ids->push_back(static_cast<uint8_t>(c));
    return Status::Ok();
  }
  void AppendTokenBytes(int32_t id, bool, std::string* bytes) const override {
    if (id >= 0 && id < 256) bytes->push_back(static_cast<char>(id));
  }
  int64_t vocab_size() const override { return 256; }
  int32_t TokenId(std::string_view token) const override {
    return token.size() == 1 ? static_cast<uint8_t>(token[0]) : -1;
  }
  std::string name() const override { return "bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::Bytes() { return std::make_unique<ByteTokenizer>(); }

}  // namespace ssmkit

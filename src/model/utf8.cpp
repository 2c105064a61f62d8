// UTF-8 reading with replacement (Rust's String::from_utf8_lossy, which the `tokenizers`
// decoders use), and Tokenizer::Decode and TokenTextStream on top of it.
#include <cstdint>

#include "ssmkit/tokenizer.hpp"

namespace ssmkit {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of a sequence led by `b` and the range its second byte must fall in
// (Unicode table 3-7, well-formed UTF-8); 0 for a byte that cannot lead one.
int SequenceLength(uint8_t b, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b == 0xE0) *lo = 0xA0;
  if (b == 0xED) *hi = 0x9F;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b == 0xF0) *lo = 0x90;
  if (b == 0xF4) *hi = 0x8F;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t Utf8Lossy(std::string_view bytes, bool final, std::string* text) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    uint8_t lo, hi;
    const int len = SequenceLength(static_cast<uint8_t>(bytes[i]), &lo, &hi);
    if (len == 0) {
      text->append(kReplacement);
      ++i;
      continue;
    }
    int j = 1;
    for (; j < len; ++j) {
      if (i + j >= n) {
        if (!final) return i;  // incomplete: keep for the next call
        break;
      }
      const uint8_t c = static_cast<uint8_t>(bytes[i + j]);
      if (c < (j == 1 ? lo : 0x80) || c > (j == 1 ? hi : 0xBF)) break;
    }
    if (j == len) {
      text->append(bytes.substr(i, len));
    } else {
      text->append(kReplacement);  // the maximal valid prefix becomes one U+FFFD
    }
    i += j;
  }
  return n;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  TokenTextStream stream(*this, skip_special);
  std::string text;
  for (int32_t id : ids) text += stream.Push(id);
  return text + stream.Finish();
}

// A finished run of byte-fallback tokens: its bytes when they are UTF-8, else U+FFFD per token.
void TokenTextStream::FlushByteRun() {
  if (run_tokens_ == 0) return;
  std::string checked;
  Utf8Lossy(run_, true, &checked);
  if (checked == run_) {
    pending_ += run_;
  } else {
    for (int64_t i = 0; i < run_tokens_; ++i) pending_ += kReplacement;
  }
  run_.clear();
  run_tokens_ = 0;
}

const std::string& TokenTextStream::Push(int32_t id) {
  if (strip_ < 0) strip_ = tokenizer_->leading_spaces_stripped();
  text_.clear();
  if (tokenizer_->IsByteToken(id)) {
    tokenizer_->AppendTokenBytes(id, skip_special_, &run_);
    ++run_tokens_;
    return text_;
  }
  FlushByteRun();
  tokenizer_->AppendTokenBytes(id, skip_special_, &pending_);
  // The decoder's leading spaces: removed from the first bytes the stream sees.
  while (strip_ > 0 && !pending_.empty()) {
    if (pending_[0] != ' ') {
      strip_ = 0;
      break;
    }
    pending_.erase(0, 1);
    --strip_;
  }
  pending_.erase(0, Utf8Lossy(pending_, /*final=*/false, &text_));
  return text_;
}

const std::string& TokenTextStream::Finish() {
  FlushByteRun();
  if (strip_ < 0) strip_ = tokenizer_->leading_spaces_stripped();
  while (strip_ > 0 && !pending_.empty() && pending_[0] == ' ') {
    pending_.erase(0, 1);
    --strip_;
  }
  text_.clear();
  Utf8Lossy(pending_, /*final=*/true, &text_);
  pending_.clear();
  return text_;
}
}  // namespace ssmkit

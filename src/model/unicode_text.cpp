#include "model/unicode_text.hpp"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

namespace ssmkit::model {
namespace {

// Oniguruma's \s in Unicode mode: the ASCII controls \t \n \v \f \r, U+0085, and category Z.
#define SSMKIT_WS "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
constexpr const char* kGptPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" SSMKIT_WS "\\p{L}\\p{N}]+|[" SSMKIT_WS
    "]+(?![^" SSMKIT_WS "])|[" SSMKIT_WS "]+";
#undef SSMKIT_WS

icu::UnicodeString FromUtf8(std::string_view text) {
  return icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

}  // namespace

Status NormalizeNfc(std::string_view text, std::string* out) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) return Status::Internal(std::string("ICU NFC: ") + u_errorName(err));
  const icu::UnicodeString normalized = nfc->normalize(FromUtf8(text), err);
  if (U_FAILURE(err)) return Status::Internal(std::string("ICU NFC: ") + u_errorName(err));
  out->clear();
  normalized.toUTF8String(*out);
  return Status::Ok();
}

struct GptSplitter::Impl {
  std::unique_ptr<icu::RegexPattern> pattern;
};

GptSplitter::GptSplitter() : impl_(std::make_unique<Impl>()) {
  UErrorCode err = U_ZERO_ERROR;
  UParseError parse{};
  impl_->pattern.reset(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kGptPattern), parse, err));
  if (U_FAILURE(err)) status_ = Status::Internal(std::string("ICU regex: ") + u_errorName(err));
}

GptSplitter::~GptSplitter() = default;

Status GptSplitter::Split(std::string_view text, std::vector<std::string>* pieces) const {
  SSMKIT_RETURN_IF_ERROR(status_);
  const icu::UnicodeString u = FromUtf8(text);
  UErrorCode err = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(impl_->pattern->matcher(u, err));
  if (U_FAILURE(err)) return Status::Internal(std::string("ICU regex: ") + u_errorName(err));
  // Every character is matched by some alternative (the last two cover whitespace, the others
  // everything else), so the matches tile the text; a gap would still be kept as its own piece.
  int32_t last = 0;
  while (m->find(err) && U_SUCCESS(err)) {
    const int32_t begin = m->start(err), end = m->end(err);
    std::string piece;
    if (begin > last) {
      u.tempSubStringBetween(last, begin).toUTF8String(piece);
      pieces->push_back(piece);
      piece.clear();
    }
    u.tempSubStringBetween(begin, end).toUTF8String(piece);
    pieces->push_back(piece);
    last = end;
  }
  if (U_FAILURE(err)) return Status::Internal(std::string("ICU regex: ") + u_errorName(err));
  if (last < u.length()) {
    std::string piece;
    u.tempSubStringBetween(last, u.length()).toUTF8String(piece);
    pieces->push_back(piece);
  }
  return Status::Ok();
}

}  // namespace ssmkit::model

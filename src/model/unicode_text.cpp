#include "model/unicode_text.hpp"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

namespace ssmkit::model {
namespace {

// Oniguruma's \s in Unicode mode: the ASCII controls \t \n \v \f \r, U+0085, and category Z.
constexpr const char* kWhitespace = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";

// `pattern` with \s and \S spelled out as Oniguruma reads them: inside a class the members
// are inserted, outside a class a class of them (or of everything else).
std::string OnigurumaWhitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhitespace) : "[" + std::string(kWhitespace) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespace) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

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

struct RegexSplitter::Impl {
  std::unique_ptr<icu::RegexPattern> pattern;
};

const char* RegexSplitter::GptPattern() {
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
}

RegexSplitter::RegexSplitter(std::string_view pattern) : impl_(std::make_unique<Impl>()) {
  UErrorCode err = U_ZERO_ERROR;
  UParseError parse{};
  impl_->pattern.reset(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(OnigurumaWhitespace(pattern)), parse, err));
  if (U_FAILURE(err)) {
    status_ = Status::Unsupported("the regex \"" + std::string(pattern) +
                                  "\" does not compile in ICU: " + u_errorName(err));
  }
}

RegexSplitter::~RegexSplitter() = default;

Status RegexSplitter::Split(std::string_view text, std::vector<std::string>* pieces) const {
  SSMKIT_RETURN_IF_ERROR(status_);
  const icu::UnicodeString u = FromUtf8(text);
  UErrorCode err = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(impl_->pattern->matcher(u, err));
  if (U_FAILURE(err)) return Status::Internal(std::string("ICU regex: ") + u_errorName(err));
  // Each match is a piece, and each stretch between matches (the GPT-2 pattern leaves none).
  int32_t last = 0;
  while (m->find(err) && U_SUCCESS(err)) {
    const int32_t begin = m->start(err), end = m->end(err);
    if (begin == end) continue;  // an empty match splits nothing
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

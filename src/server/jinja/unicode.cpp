#include "server/jinja/unicode.hpp"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "server/jinja/value.hpp"

namespace ssmkit::server::jinja {
namespace {

// ICU's root locale: Python's mappings are locale-independent.
const icu::Locale& Root() {
  static const icu::Locale root("");
  return root;
}

std::string Utf8(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

icu::UnicodeString CodePointString(char32_t c) {
  return icu::UnicodeString(static_cast<UChar32>(c));
}

bool Cased(char32_t c) {
  return c < 0x110000 && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}

// Title case of a word's first character, lower case of the rest (Python's title and
// capitalize): bytes that are not UTF-8 pass unchanged.
std::string TitleOrCapitalize(const std::string& s, bool every_word) {
  const std::vector<char32_t> cps = CodePoints(s);
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    if (c >= 0x110000) {
      out += FromCodePoints(cps, i, i + 1);
      previous_cased = false;
      continue;
    }
    const bool first = every_word ? !previous_cased : i == 0;
    if (first) {
      icu::UnicodeString u = CodePointString(c);
      // Full title mapping of one character (e.g. U+00DF to "Ss"); no word breaking.
      u.toTitle(nullptr, Root(), U_TITLECASE_NO_BREAK_ADJUSTMENT | U_TITLECASE_NO_LOWERCASE);
      out += Utf8(u);
    } else {
      out += Utf8(CodePointString(c).toLower(Root()));
    }
    if (every_word) previous_cased = Cased(c);
  }
  return out;
}

bool AllCasedAre(const std::string& s, bool upper) {
  bool any = false;
  for (char32_t c : CodePoints(s)) {
    if (!Cased(c)) continue;
    const UChar32 u = static_cast<UChar32>(c);
    if (upper ? !u_isUUppercase(u) : !u_isULowercase(u)) return false;
    any = true;
  }
  return any;
}

}  // namespace

std::string PyUpper(const std::string& s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  return Utf8(u.toUpper(Root()));
}

std::string PyLower(const std::string& s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  return Utf8(u.toLower(Root()));
}

std::string PyTitle(const std::string& s) { return TitleOrCapitalize(s, true); }
std::string PyCapitalize(const std::string& s) { return TitleOrCapitalize(s, false); }
bool PyIsUpper(const std::string& s) { return AllCasedAre(s, true); }
bool PyIsLower(const std::string& s) { return AllCasedAre(s, false); }

bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  if (c >= 0x110000) return false;
  const int8_t type = u_charType(static_cast<UChar32>(c));
  switch (type) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return true;
    default:
      return false;
  }
}

std::vector<std::string> PySplitLines(const std::string& s) {
  const std::vector<char32_t> cps = CodePoints(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c ||
                          (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    lines.push_back(FromCodePoints(cps, start, i));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(FromCodePoints(cps, start, cps.size()));
  return lines;
}

}  // namespace ssmkit::server::jinja

#include "server/jinja/lexer.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "server/jinja/value.hpp"

namespace ssmkit::server::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1c && c <= 0x1f);
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Whitespace in Python's sense (re's \s on str): the text lstrip_blocks may remove.
bool AllSpace(const std::string& s) {
  if (s.empty()) return false;
  for (char32_t c : CodePoints(s)) {
    if (!IsPythonSpace(c)) return false;
  }
  return true;
}

std::string RstripSpace(std::string s) {
  // Python's str.rstrip(): Unicode whitespace, read back to front one code point at a time.
  std::vector<char32_t> cps = CodePoints(s);
  size_t end = cps.size();
  while (end > 0 && IsPythonSpace(cps[end - 1])) --end;
  return FromCodePoints(cps, 0, end);
}

void AppendUtf8(char32_t c, std::string* out) { *out += FromCodePoints({c}, 0, 1); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal's body.
Status Unescape(const std::string& body, int line, std::string* out) {
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      *out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\\':
        *out += '\\';
        break;
      case '\'':
        *out += '\'';
        break;
      case '"':
        *out += '"';
        break;
      case 'n':
        *out += '\n';
        break;
      case 't':
        *out += '\t';
        break;
      case 'r':
        *out += '\r';
        break;
      case 'a':
        *out += '\a';
        break;
      case 'b':
        *out += '\b';
        break;
      case 'f':
        *out += '\f';
        break;
      case 'v':
        *out += '\v';
        break;
      case '\n':
        break;  // a backslash-newline continues the line
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          const int h = i + k < body.size() ? HexValue(body[i + k]) : -1;
          if (h < 0) {
            return Status::InvalidArgument("line " + std::to_string(line) + ": a truncated \\" +
                                           std::string(1, c) + " escape in a string");
          }
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10ffff) {
          return Status::InvalidArgument("line " + std::to_string(line) +
                                         ": an escape beyond U+10FFFF in a string");
        }
        AppendUtf8(cp, out);
        i += n;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = static_cast<char32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          AppendUtf8(cp, out);
        } else {
          *out += '\\';
          *out += c;
        }
    }
  }
  return Status::Ok();
}

class Lexer {
 public:
  Lexer(std::string src, std::vector<Token>* out) : src_(std::move(src)), out_(out) {}

  Status Run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      const size_t tag = NextTag();
      if (tag == std::string::npos) {
        Push(Tok::kText, src_.substr(pos_));
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_newlines = Newlines(pos_, tag);
      const char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      if (sign == '-') {
        text = RstripSpace(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only whitespace between the line's start and a block or comment tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting_) && AllSpace(text.substr(l_pos))) text.resize(l_pos);
      }
      if (!text.empty()) Push(Tok::kText, text);
      line_ += text_newlines;
      if (kind == '#') {
        SSMKIT_RETURN_IF_ERROR(Comment(p));
        continue;
      }
      Push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "");
      SSMKIT_RETURN_IF_ERROR(Tag(p, kind == '%'));
    }
    Push(Tok::kEof, "");
    return Status::Ok();
  }

 private:
  size_t NextTag() const {
    for (size_t i = src_.find('{', pos_); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  int Newlines(size_t begin, size_t end) const {
    int n = 0;
    for (size_t i = begin; i < end; ++i) n += src_[i] == '\n';
    return n;
  }

  void Push(Tok kind, std::string text) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line_;
    out_->push_back(std::move(t));
  }

  Status Error(const std::string& what) const {
    return Status::InvalidArgument("line " + std::to_string(line_) + ": " + what);
  }

  // The end of a tag at p: "-" strips all whitespace after it, "+" nothing, and trim_blocks
  // one newline after a block or comment tag.
  void EndTag(size_t p, size_t tag_len, char sign, bool trim) {
    size_t q = p + tag_len;
    if (sign == '-') {
      while (q < src_.size() && IsSpace(src_[q])) ++q;
    } else if (sign == 0 && trim && q < src_.size() && src_[q] == '\n') {
      ++q;
    }
    line_ += Newlines(p, q);
    line_starting_ = q > 0 && src_[q - 1] == '\n';
    pos_ = q;
  }

  Status Comment(size_t p) {
    const size_t end = src_.find("#}", p);
    if (end == std::string::npos) return Error("missing the end of a comment (#})");
    char sign = 0;
    size_t at = end;
    if (end > p && (src_[end - 1] == '-' || src_[end - 1] == '+')) {
      sign = src_[end - 1];
      at = end - 1;
    }
    line_ += Newlines(p, at);
    EndTag(at, sign ? 3 : 2, sign, /*trim=*/true);
    return Status::Ok();
  }

  // The tokens of a {{ }} or {% %} tag from p, up to its end tag (outside brackets).
  Status Tag(size_t p, bool block) {
    const size_t n = src_.size();
    std::string brackets;
    const char* end = block ? "%}" : "}}";
    while (true) {
      while (p < n && IsSpace(src_[p])) {
        line_ += src_[p] == '\n';
        ++p;
      }
      if (p >= n) return Error(std::string("missing the end of a tag (") + end + ")");
      if (brackets.empty()) {
        if ((src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, end) == 0) {
          Push(block ? Tok::kBlockEnd : Tok::kVarEnd, "");
          EndTag(p, 3, src_[p], block);
          return Status::Ok();
        }
        if (src_.compare(p, 2, end) == 0) {
          Push(block ? Tok::kBlockEnd : Tok::kVarEnd, "");
          EndTag(p, 2, 0, block);
          return Status::Ok();
        }
      }
      const char c = src_[p];
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < n && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= n) return Error("a string without its closing quote");
        std::string value;
        SSMKIT_RETURN_IF_ERROR(Unescape(src_.substr(p + 1, q - p - 1), line_, &value));
        Push(Tok::kString, std::move(value));
        line_ += Newlines(p, q);
        p = q + 1;
      } else if (IsDigit(c)) {
        p = Number(p);
      } else if (IsNameStart(c)) {
        size_t q = p;
        while (q < n && IsNameChar(src_[q])) ++q;
        Push(Tok::kName, src_.substr(p, q - p));
        p = q;
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op(1, c);
        for (const char* two : kTwo) {
          if (src_.compare(p, 2, two) == 0) op = two;
        }
        if (op.size() == 1 && std::string("+-/*%~[](){}=.:|,<>").find(c) == std::string::npos) {
          return Error(std::string("unexpected character '") + c + "'");
        }
        if (c == '(' || c == '[' || c == '{') {
          brackets += c;
        } else if (c == ')' || c == ']' || c == '}') {
          const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) {
            return Error(std::string("unexpected '") + c + "'");
          }
          brackets.pop_back();
        }
        Push(Tok::kOp, op);
        p += op.size();
      }
    }
  }

  // An integer or a float (digits with "_" separators, a fraction, an exponent) from p.
  size_t Number(size_t p) {
    const size_t n = src_.size();
    auto digits = [&](size_t q) {
      while (q < n && (IsDigit(src_[q]) || (src_[q] == '_' && q + 1 < n && IsDigit(src_[q + 1])))) {
        ++q;
      }
      return q;
    };
    size_t q = digits(p);
    bool is_float = false;
    if (q + 1 < n && src_[q] == '.' && IsDigit(src_[q + 1])) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < n && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < n && IsDigit(src_[r])) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string text = src_.substr(p, q - p);
    std::string plain;
    for (char ch : text) {
      if (ch != '_') plain += ch;
    }
    Token t;
    t.kind = is_float ? Tok::kFloat : Tok::kInt;
    t.text = text;
    t.line = line_;
    if (is_float) {
      t.float_value = std::strtod(plain.c_str(), nullptr);
    } else {
      // Python ints are unbounded; ours saturate (a template's literals are small).
      errno = 0;
      const long long v = std::strtoll(plain.c_str(), nullptr, 10);
      t.int_value = errno == ERANGE ? INT64_MAX : v;
    }
    out_->push_back(std::move(t));
    return q;
  }

  std::string src_;
  std::vector<Token>* out_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
};

// "\r\n" and "\r" to "\n", and one trailing newline dropped (keep_trailing_newline=False).
std::string Normalize(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

Status Lex(const std::string& source, std::vector<Token>* tokens) {
  tokens->clear();
  return Lexer(Normalize(source), tokens).Run();
}

}  // namespace ssmkit::server::jinja

// Jinja source to tokens, as jinja2's lexer splits it in transformers' environment:
// text between tags; {{ }} and {% %} with the tokens of their expressions; {# #} dropped.
// Whitespace control: "{%-" / "-%}" (and the same on {{ }} and {# #}) remove all whitespace
// before / after the tag; trim_blocks removes the newline right after a %} or #}; lstrip_blocks
// removes the spaces and tabs between a line's start and a {% or {# ("{%+" keeps them); one
// trailing newline of the source is dropped; "\r\n" and "\r" read as "\n".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit::server::jinja {

enum class Tok {
  kText,
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  Tok kind = Tok::kEof;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

Status Lex(const std::string& source, std::vector<Token>* tokens);

}  // namespace ssmkit::server::jinja

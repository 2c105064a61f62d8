// A Jinja2 template interpreter for chat templates: the subset of the language the chat
// templates of the model families we serve use (docs/server.md lists it), rendering as
// jinja2 does in transformers' environment (trim_blocks, lstrip_blocks, loop controls, no
// autoescape, a single trailing newline of the source dropped).
//   lexer.cpp: source -> tokens (text, tags, whitespace control);
//   parser.cpp: tokens -> a tree of statements and expressions;
//   evaluator.cpp (+ filters.cpp, methods.cpp): the tree and a context -> text.
// Templates and the values they see come from outside (checkpoint files, HTTP requests): every
// failure is a Status, recursion and output are bounded, nothing aborts.
#pragma once

#include <memory>
#include <string>

#include "server/jinja/value.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::server::jinja {

struct Node;  // parser.hpp

class Template {
 public:
  Template();
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Parses `source`; errors name the line.
  static Status Parse(const std::string& source, Template* out);
  // Renders with the variables of `context` (an object). raise_exception(msg) in the template
  // is an error with msg as its message.
  Status Render(const Value& context, std::string* out) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace ssmkit::server::jinja

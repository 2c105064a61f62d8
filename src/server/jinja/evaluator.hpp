// The tree and a context to text: Python's semantics for the values (value.hpp), jinja2's for
// names, scopes and undefined values. A {% for %} body is a scope of its own (a variable set in
// it is gone after the loop: namespace() carries values out); {% if %} is not. Undefined values
// print as nothing, are false and iterate as empty; taking an attribute or item of one, or
// calling one, is an error. Output, loops and macro recursion are bounded.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/jinja/parser.hpp"
#include "server/jinja/value.hpp"

namespace ssmkit::server::jinja {

class Evaluator {
 public:
  // `context`: the template's variables (a dict); `out`: where the text goes.
  Evaluator(const Value& context, std::string* out);

  Status Run(const Node& root);

  // Builtins call back into these (map and select apply filters and tests by name).
  Status Filter(const std::string& name, const Value& input, const Args& args, Value* out);
  Status Test(const std::string& name, const Value& input, const Args& args, bool* out);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status Exec(const Node& n);
  Status ExecBody(const Node& body);
  Status ExecFor(const Node& n);
  Status ExecSet(const Node& n);
  // The targets of a set or for (n.names): one name takes v, several unpack it.
  Status AssignTargets(const Node& n, const Value& v);
  Status Eval(const Node& n, Value* out);
  Status EvalInner(const Node& n, Value* out);
  Status EvalArgs(const Node& n, size_t first, Args* args);
  Status Binary(const std::string& op, const Value& a, const Value& b, Value* out);
  Status Compare(const std::string& op, const Value& a, const Value& b, bool* out);
  Status GetAttr(const Value& obj, const std::string& name, Value* out);
  Status GetItem(const Value& obj, const Value& key, Value* out);
  Status Slice(const Value& obj, const Value& start, const Value& stop, const Value& step,
               Value* out);
  Value MakeMacro(const Node& n);
  Status Emit(const std::string& text);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value);

  Value context_;
  std::vector<std::vector<std::pair<std::string, Value>>> scopes_;  // innermost last
  std::string* out_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
  int64_t iterations_ = 0;
};

// The globals every template sees: range, namespace, dict, raise_exception, strftime_now.
Value Global(const std::string& name);
// A method of a str, dict or list value bound to it (s.strip, d.items, ...): false if none.
bool BindMethod(const Value& obj, const std::string& name, Value* out);
// The values a for loop or a filter iterates: list elements, dict keys, string characters;
// undefined gives none. Anything else is an error.
Status Iterate(const Value& v, Array* out);

// raise_exception's errors carry this prefix, so Render can return the template's own message.
inline constexpr const char* kRaisedPrefix = "raise_exception: ";

}  // namespace ssmkit::server::jinja

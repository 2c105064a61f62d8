// Tokens to a tree: statements (text, {{ output }}, if, for, set, macro, break, continue) and
// expressions with jinja2's precedence, loosest first: conditional (a if c else b), or, and,
// not, comparisons (chained; in, not in), + -, ~, * / // %, **, unary - +, then filters (|f),
// tests (is t, is not t), calls, attributes and subscripts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/jinja/lexer.hpp"
#include "server/jinja/value.hpp"

namespace ssmkit::server::jinja {

enum class NodeKind {
  // Statements.
  kBody,      // children: statements
  kText,      // text
  kOutput,    // children[0]: the expression printed
  kIf,        // children: cond, body, cond, body, ..., [else body]
  kFor,       // names: targets; children: iterable, body, else body, [filter condition]
  kSet,       // names: targets, or (namespace, attribute) when attribute; children[0]: value
  kSetBlock,  // names[0]: target; children[0]: body
  kMacro,     // text: name; names: parameters; children: body, then a default per parameter
              // (nullptr: none)
  kBreak,
  kContinue,
  // Expressions.
  kLiteral,  // value
  kName,     // text
  kGetAttr,  // children[0] . text
  kGetItem,  // children[0] [children[1]]
  kSlice,    // children[0] [children[1] : children[2] : children[3]] (nullptr: absent)
  kCall,     // children[0] (positional children[1 .. 1 + positional), then keywords named by names)
  kFilter,   // text: filter; children[0]: input; arguments as kCall's
  kTest,     // text: test; children[0]: input; arguments as kCall's; negated
  kUnary,    // text: "-", "+" or "not"; children[0]
  kBinary,   // text: operator ("+", "and", "~", ...); children[0], children[1]
  kCompare,  // names: operators ("==", "in", "not in", ...); children: operands
  kCondExpr,  // children: then, condition, [else]
  kList,
  kTuple,
  kDict,  // children: key, value, key, value, ...
};

struct Node {
  NodeKind kind = NodeKind::kBody;
  int line = 0;
  std::string text;
  Value value;
  std::vector<std::shared_ptr<const Node>> children;
  std::vector<std::string> names;
  size_t positional = 0;   // calls, filters, tests: how many arguments are positional
  bool negated = false;    // tests
  bool attribute = false;  // kSet of namespace.attribute
};

Status ParseTemplate(const std::vector<Token>& tokens, std::shared_ptr<const Node>* root);

}  // namespace ssmkit::server::jinja

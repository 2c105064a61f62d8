#include "server/jinja/parser.hpp"

#include <set>

namespace ssmkit::server::jinja {
namespace {

using NodePtr = std::shared_ptr<Node>;

// Nesting beyond this (expressions or blocks) is refused: a template from outside must not
// exhaust the stack.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Status Run(std::shared_ptr<const Node>* root) {
    NodePtr body;
    std::string end;
    SSMKIT_RETURN_IF_ERROR(Body({}, &body, &end));
    *root = body;
    return Status::Ok();
  }

 private:
  const Token& Peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t k = 0) const {
    return Peek(k).kind == Tok::kOp && Peek(k).text == op;
  }
  bool IsName(const char* name, size_t k = 0) const {
    return Peek(k).kind == Tok::kName && Peek(k).text == name;
  }
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("line " + std::to_string(Peek().line) + ": " + what);
  }
  Status Expect(const char* op) {
    if (!IsOp(op)) return Error(std::string("expected '") + op + "', found " + Describe(Peek()));
    ++i_;
    return Status::Ok();
  }
  Status ExpectBlockEnd() {
    if (Peek().kind != Tok::kBlockEnd) return Error("expected '%}', found " + Describe(Peek()));
    ++i_;
    return Status::Ok();
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Tok::kEof:
        return "the end of the template";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kText:
        return "text";
      default:
        return "'" + t.text + "'";
    }
  }
  NodePtr Make(NodeKind kind, int line) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };

  // Statements up to a block tag named in `ends` ({% endfor %}, {% else %}, ...), whose name
  // is returned in *end with the tag's name token consumed; the end of the template is an
  // error unless `ends` is empty.
  Status Body(const std::set<std::string>& ends, NodePtr* body, std::string* end) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxDepth) return Error("blocks nested too deeply");
    *body = Make(NodeKind::kBody, Peek().line);
    while (true) {
      const Token& tok = Peek();
      if (tok.kind == Tok::kEof) {
        if (ends.empty()) return Status::Ok();
        return Error("missing {% " + *ends.begin() + " %}");
      }
      if (tok.kind == Tok::kText) {
        NodePtr n = Make(NodeKind::kText, tok.line);
        n->text = tok.text;
        (*body)->children.push_back(n);
        ++i_;
        continue;
      }
      if (tok.kind == Tok::kVarBegin) {
        ++i_;
        NodePtr n = Make(NodeKind::kOutput, tok.line);
        NodePtr e;
        SSMKIT_RETURN_IF_ERROR(Expression(&e));
        n->children.push_back(e);
        if (Peek().kind != Tok::kVarEnd) return Error("expected '}}', found " + Describe(Peek()));
        ++i_;
        (*body)->children.push_back(n);
        continue;
      }
      if (tok.kind != Tok::kBlockBegin) return Error("unexpected " + Describe(tok));
      ++i_;
      if (Peek().kind != Tok::kName) return Error("expected a tag name after '{%'");
      const std::string name = Peek().text;
      if (ends.count(name)) {
        ++i_;
        *end = name;
        return Status::Ok();
      }
      NodePtr stmt;
      SSMKIT_RETURN_IF_ERROR(Statement(&stmt));
      if (stmt) (*body)->children.push_back(stmt);
    }
  }

  Status Statement(NodePtr* out) {
    const Token& tok = Next();
    const std::string& name = tok.text;
    if (name == "if") return If(tok.line, out);
    if (name == "for") return For(tok.line, out);
    if (name == "set") return Set(tok.line, out);
    if (name == "macro") return Macro(tok.line, out);
    if (name == "break" || name == "continue") {
      *out = Make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, tok.line);
      return ExpectBlockEnd();
    }
    if (name == "generation") {
      // transformers' {% generation %} marks assistant text; it renders its body as is.
      SSMKIT_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      SSMKIT_RETURN_IF_ERROR(Body({"endgeneration"}, out, &end));
      return ExpectBlockEnd();
    }
    --i_;
    return Error("unsupported tag '" + name + "'");
  }

  Status If(int line, NodePtr* out) {
    NodePtr n = Make(NodeKind::kIf, line);
    while (true) {
      NodePtr cond, body;
      SSMKIT_RETURN_IF_ERROR(Expression(&cond));
      SSMKIT_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      SSMKIT_RETURN_IF_ERROR(Body({"elif", "else", "endif"}, &body, &end));
      n->children.push_back(cond);
      n->children.push_back(body);
      if (end == "elif") continue;
      if (end == "else") {
        SSMKIT_RETURN_IF_ERROR(ExpectBlockEnd());
        SSMKIT_RETURN_IF_ERROR(Body({"endif"}, &body, &end));
        n->children.push_back(body);
      }
      *out = n;
      return ExpectBlockEnd();
    }
  }

  // name, or name, name, ... (optionally in parentheses).
  Status Targets(std::vector<std::string>* names) {
    const bool paren = IsOp("(");
    if (paren) ++i_;
    while (true) {
      if (Peek().kind != Tok::kName) return Error("expected a variable name");
      names->push_back(Next().text);
      if (!IsOp(",")) break;
      ++i_;
    }
    if (paren) SSMKIT_RETURN_IF_ERROR(Expect(")"));
    return Status::Ok();
  }

  Status For(int line, NodePtr* out) {
    NodePtr n = Make(NodeKind::kFor, line);
    SSMKIT_RETURN_IF_ERROR(Targets(&n->names));
    if (!IsName("in")) return Error("expected 'in' in a for loop");
    ++i_;
    NodePtr iter, filter, body, else_body;
    // The iterable stops before a loop filter's "if" (no conditional expression here).
    SSMKIT_RETURN_IF_ERROR(Or(&iter));
    if (IsName("if")) {
      ++i_;
      SSMKIT_RETURN_IF_ERROR(Expression(&filter));
    }
    if (IsName("recursive")) return Error("recursive loops are not supported");
    SSMKIT_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    SSMKIT_RETURN_IF_ERROR(Body({"else", "endfor"}, &body, &end));
    if (end == "else") {
      SSMKIT_RETURN_IF_ERROR(ExpectBlockEnd());
      SSMKIT_RETURN_IF_ERROR(Body({"endfor"}, &else_body, &end));
    } else {
      else_body = Make(NodeKind::kBody, line);
    }
    n->children = {iter, body, else_body};
    if (filter) n->children.push_back(filter);
    *out = n;
    return ExpectBlockEnd();
  }

  Status Set(int line, NodePtr* out) {
    NodePtr n = Make(NodeKind::kSet, line);
    if (Peek().kind == Tok::kName && IsOp(".", 1)) {
      n->attribute = true;
      n->names.push_back(Next().text);
      ++i_;
      if (Peek().kind != Tok::kName) return Error("expected an attribute name after '.'");
      n->names.push_back(Next().text);
    } else {
      SSMKIT_RETURN_IF_ERROR(Targets(&n->names));
    }
    if (Peek().kind == Tok::kBlockEnd && !n->attribute && n->names.size() == 1) {
      // {% set x %}...{% endset %}
      ++i_;
      n->kind = NodeKind::kSetBlock;
      NodePtr body;
      std::string end;
      SSMKIT_RETURN_IF_ERROR(Body({"endset"}, &body, &end));
      n->children.push_back(body);
      *out = n;
      return ExpectBlockEnd();
    }
    SSMKIT_RETURN_IF_ERROR(Expect("="));
    NodePtr value;
    SSMKIT_RETURN_IF_ERROR(TupleOrExpression(&value));
    n->children.push_back(value);
    *out = n;
    return ExpectBlockEnd();
  }

  Status Macro(int line, NodePtr* out) {
    NodePtr n = Make(NodeKind::kMacro, line);
    if (Peek().kind != Tok::kName) return Error("expected the macro's name");
    n->text = Next().text;
    SSMKIT_RETURN_IF_ERROR(Expect("("));
    std::vector<std::shared_ptr<const Node>> defaults;
    while (!IsOp(")")) {
      if (Peek().kind != Tok::kName) return Error("expected a parameter name");
      n->names.push_back(Next().text);
      NodePtr def;
      if (IsOp("=")) {
        ++i_;
        SSMKIT_RETURN_IF_ERROR(Expression(&def));
      }
      defaults.push_back(def);
      if (!IsOp(",")) break;
      ++i_;
    }
    SSMKIT_RETURN_IF_ERROR(Expect(")"));
    SSMKIT_RETURN_IF_ERROR(ExpectBlockEnd());
    NodePtr body;
    std::string end;
    SSMKIT_RETURN_IF_ERROR(Body({"endmacro"}, &body, &end));
    n->children.push_back(body);
    for (auto& d : defaults) n->children.push_back(d);
    *out = n;
    return ExpectBlockEnd();
  }

  // An expression, or a tuple of them written without parentheses (set a = 1, 2).
  Status TupleOrExpression(NodePtr* out) {
    SSMKIT_RETURN_IF_ERROR(Expression(out));
    if (!IsOp(",")) return Status::Ok();
    NodePtr tuple = Make(NodeKind::kTuple, (*out)->line);
    tuple->children.push_back(*out);
    while (IsOp(",")) {
      ++i_;
      if (Peek().kind == Tok::kBlockEnd) break;
      NodePtr e;
      SSMKIT_RETURN_IF_ERROR(Expression(&e));
      tuple->children.push_back(e);
    }
    *out = tuple;
    return Status::Ok();
  }

  Status Expression(NodePtr* out) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxDepth) return Error("expression nested too deeply");
    SSMKIT_RETURN_IF_ERROR(Or(out));
    while (IsName("if")) {
      NodePtr n = Make(NodeKind::kCondExpr, Peek().line);
      ++i_;
      NodePtr cond, other;
      SSMKIT_RETURN_IF_ERROR(Or(&cond));
      n->children = {*out, cond};
      if (IsName("else")) {
        ++i_;
        SSMKIT_RETURN_IF_ERROR(Expression(&other));
        n->children.push_back(other);
      }
      *out = n;
    }
    return Status::Ok();
  }

  Status BinaryChain(NodePtr* out, Status (Parser::*operand)(NodePtr*),
                     std::initializer_list<const char*> ops, bool names) {
    SSMKIT_RETURN_IF_ERROR((this->*operand)(out));
    while (true) {
      const char* found = nullptr;
      for (const char* op : ops) {
        if (names ? IsName(op) : IsOp(op)) found = op;
      }
      if (found == nullptr) return Status::Ok();
      NodePtr n = Make(NodeKind::kBinary, Peek().line);
      ++i_;
      NodePtr right;
      SSMKIT_RETURN_IF_ERROR((this->*operand)(&right));
      n->text = found;
      n->children = {*out, right};
      *out = n;
    }
  }

  Status Or(NodePtr* out) { return BinaryChain(out, &Parser::And, {"or"}, true); }
  Status And(NodePtr* out) { return BinaryChain(out, &Parser::Not, {"and"}, true); }

  Status Not(NodePtr* out) {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      if (depth_ > kMaxDepth) return Error("expression nested too deeply");
      NodePtr n = Make(NodeKind::kUnary, Next().line);
      n->text = "not";
      NodePtr arg;
      SSMKIT_RETURN_IF_ERROR(Not(&arg));
      n->children.push_back(arg);
      *out = n;
      return Status::Ok();
    }
    return Compare(out);
  }

  Status Compare(NodePtr* out) {
    NodePtr first;
    SSMKIT_RETURN_IF_ERROR(Math1(&first));
    NodePtr n = Make(NodeKind::kCompare, first->line);
    n->children.push_back(first);
    while (true) {
      std::string op;
      if (Peek().kind == Tok::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++i_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      NodePtr right;
      SSMKIT_RETURN_IF_ERROR(Math1(&right));
      n->names.push_back(op);
      n->children.push_back(right);
    }
    *out = n->names.empty() ? first : n;
    return Status::Ok();
  }

  Status Math1(NodePtr* out) { return BinaryChain(out, &Parser::Concat, {"+", "-"}, false); }
  Status Concat(NodePtr* out) { return BinaryChain(out, &Parser::Math2, {"~"}, false); }
  Status Math2(NodePtr* out) {
    return BinaryChain(out, &Parser::Pow, {"*", "/", "//", "%"}, false);
  }
  Status Pow(NodePtr* out) { return BinaryChain(out, &Parser::UnaryWithFilters, {"**"}, false); }
  Status UnaryWithFilters(NodePtr* out) { return Unary(out, true); }

  Status Unary(NodePtr* out, bool with_filters) {
    DepthGuard guard(&depth_);
    if (depth_ > kMaxDepth) return Error("expression nested too deeply");
    if (IsOp("-") || IsOp("+")) {
      NodePtr n = Make(NodeKind::kUnary, Peek().line);
      n->text = Next().text;
      NodePtr arg;
      SSMKIT_RETURN_IF_ERROR(Unary(&arg, false));
      n->children.push_back(arg);
      *out = n;
      // As jinja2: postfix operators apply to the negation (-x.y is (-x).y).
      SSMKIT_RETURN_IF_ERROR(Postfix(out));
    } else {
      SSMKIT_RETURN_IF_ERROR(Primary(out));
      SSMKIT_RETURN_IF_ERROR(Postfix(out));
    }
    if (with_filters) SSMKIT_RETURN_IF_ERROR(FilterChain(out));
    return Status::Ok();
  }

  // Arguments after '(' up to ')': positional, then name=value.
  Status Arguments(Node* n) {
    SSMKIT_RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (Peek().kind == Tok::kName && IsOp("=", 1)) {
        n->names.push_back(Next().text);
        ++i_;
      } else if (!n->names.empty()) {
        return Error("a positional argument after a keyword argument");
      }
      NodePtr arg;
      SSMKIT_RETURN_IF_ERROR(Expression(&arg));
      n->children.push_back(arg);
      if (n->names.empty()) ++n->positional;
      if (!IsOp(",")) break;
      ++i_;
    }
    return Expect(")");
  }

  Status Postfix(NodePtr* out) {
    while (true) {
      if (IsOp(".")) {
        ++i_;
        NodePtr n = Make(NodeKind::kGetAttr, Peek().line);
        if (Peek().kind == Tok::kName) {
          n->text = Next().text;
        } else if (Peek().kind == Tok::kInt) {
          // a.0 is a[0]
          n->kind = NodeKind::kGetItem;
          NodePtr index = Make(NodeKind::kLiteral, Peek().line);
          index->value = Value(Next().int_value);
          n->children = {*out, index};
          *out = n;
          continue;
        } else {
          return Error("expected an attribute name after '.'");
        }
        n->children.push_back(*out);
        *out = n;
      } else if (IsOp("[")) {
        SSMKIT_RETURN_IF_ERROR(Subscript(out));
      } else if (IsOp("(")) {
        SSMKIT_RETURN_IF_ERROR(Call(out));
      } else {
        return Status::Ok();
      }
    }
  }

  // *out(arguments): the call replaces *out.
  Status Call(NodePtr* out) {
    NodePtr n = Make(NodeKind::kCall, Peek().line);
    n->children.push_back(*out);
    SSMKIT_RETURN_IF_ERROR(Arguments(n.get()));
    *out = n;
    return Status::Ok();
  }

  Status Subscript(NodePtr* out) {
    const int line = Next().line;  // [
    NodePtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++colons > 2) return Error("a slice takes at most three parts");
        ++i_;
        continue;
      }
      if (parts[colons]) return Error("expected ':' or ']' in a subscript");
      SSMKIT_RETURN_IF_ERROR(Expression(&parts[colons]));
    }
    ++i_;
    if (colons == 0) {
      if (!parts[0]) return Error("an empty subscript");
      NodePtr n = Make(NodeKind::kGetItem, line);
      n->children = {*out, parts[0]};
      *out = n;
      return Status::Ok();
    }
    NodePtr n = Make(NodeKind::kSlice, line);
    n->children = {*out, parts[0], parts[1], parts[2]};
    *out = n;
    return Status::Ok();
  }

  Status FilterChain(NodePtr* out) {
    while (true) {
      if (IsOp("|")) {
        ++i_;
        if (Peek().kind != Tok::kName) return Error("expected a filter name after '|'");
        NodePtr n = Make(NodeKind::kFilter, Peek().line);
        n->text = Next().text;
        // Dotted filter names do not exist in our set; a name is one token.
        n->children.push_back(*out);
        if (IsOp("(")) SSMKIT_RETURN_IF_ERROR(Arguments(n.get()));
        *out = n;
      } else if (IsName("is")) {
        ++i_;
        NodePtr n = Make(NodeKind::kTest, Peek().line);
        if (IsName("not")) {
          ++i_;
          n->negated = true;
        }
        if (Peek().kind != Tok::kName) return Error("expected a test name after 'is'");
        n->text = Next().text;
        n->children.push_back(*out);
        if (IsOp("(")) {
          SSMKIT_RETURN_IF_ERROR(Arguments(n.get()));
        } else if (Peek().kind == Tok::kString || Peek().kind == Tok::kInt ||
                   Peek().kind == Tok::kFloat ||
                   (Peek().kind == Tok::kName && !IsName("and") && !IsName("or") &&
                    !IsName("else") && !IsName("if") && !IsName("is") && !IsName("in") &&
                    !IsName("not"))) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
          NodePtr arg;
          SSMKIT_RETURN_IF_ERROR(Primary(&arg));
          SSMKIT_RETURN_IF_ERROR(Postfix(&arg));
          n->children.push_back(arg);
          n->positional = 1;
        }
        *out = n;
      } else if (IsOp("(")) {
        SSMKIT_RETURN_IF_ERROR(Call(out));
      } else {
        return Status::Ok();
      }
    }
  }

  Status Primary(NodePtr* out) {
    const Token& tok = Peek();
    if (tok.kind == Tok::kName) {
      ++i_;
      NodePtr n = Make(NodeKind::kLiteral, tok.line);
      const std::string& s = tok.text;
      if (s == "true" || s == "True") {
        n->value = Value(true);
      } else if (s == "false" || s == "False") {
        n->value = Value(false);
      } else if (s == "none" || s == "None") {
        n->value = Value::None();
      } else {
        n->kind = NodeKind::kName;
        n->text = s;
      }
      *out = n;
      return Status::Ok();
    }
    if (tok.kind == Tok::kString) {
      NodePtr n = Make(NodeKind::kLiteral, tok.line);
      std::string s;
      while (Peek().kind == Tok::kString) s += Next().text;  // adjacent literals join
      n->value = Value(std::move(s));
      *out = n;
      return Status::Ok();
    }
    if (tok.kind == Tok::kInt || tok.kind == Tok::kFloat) {
      ++i_;
      NodePtr n = Make(NodeKind::kLiteral, tok.line);
      n->value = tok.kind == Tok::kInt ? Value(tok.int_value) : Value(tok.float_value);
      *out = n;
      return Status::Ok();
    }
    if (IsOp("(")) {
      ++i_;
      if (IsOp(")")) {
        ++i_;
        *out = Make(NodeKind::kTuple, tok.line);
        return Status::Ok();
      }
      NodePtr first;
      SSMKIT_RETURN_IF_ERROR(Expression(&first));
      if (IsOp(")")) {
        ++i_;
        *out = first;
        return Status::Ok();
      }
      NodePtr tuple = Make(NodeKind::kTuple, tok.line);
      tuple->children.push_back(first);
      while (IsOp(",")) {
        ++i_;
        if (IsOp(")")) break;
        NodePtr e;
        SSMKIT_RETURN_IF_ERROR(Expression(&e));
        tuple->children.push_back(e);
      }
      SSMKIT_RETURN_IF_ERROR(Expect(")"));
      *out = tuple;
      return Status::Ok();
    }
    if (IsOp("[")) {
      ++i_;
      NodePtr list = Make(NodeKind::kList, tok.line);
      while (!IsOp("]")) {
        NodePtr e;
        SSMKIT_RETURN_IF_ERROR(Expression(&e));
        list->children.push_back(e);
        if (!IsOp(",")) break;
        ++i_;
      }
      SSMKIT_RETURN_IF_ERROR(Expect("]"));
      *out = list;
      return Status::Ok();
    }
    if (IsOp("{")) {
      ++i_;
      NodePtr dict = Make(NodeKind::kDict, tok.line);
      while (!IsOp("}")) {
        NodePtr k, v;
        SSMKIT_RETURN_IF_ERROR(Expression(&k));
        SSMKIT_RETURN_IF_ERROR(Expect(":"));
        SSMKIT_RETURN_IF_ERROR(Expression(&v));
        dict->children.push_back(k);
        dict->children.push_back(v);
        if (!IsOp(",")) break;
        ++i_;
      }
      SSMKIT_RETURN_IF_ERROR(Expect("}"));
      *out = dict;
      return Status::Ok();
    }
    return Error("unexpected " + Describe(tok) + " in an expression");
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Status ParseTemplate(const std::vector<Token>& tokens, std::shared_ptr<const Node>* root) {
  if (tokens.empty()) return Status::InvalidArgument("no tokens");
  return Parser(tokens).Run(root);
}

}  // namespace ssmkit::server::jinja

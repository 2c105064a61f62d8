#include "server/jinja/evaluator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ssmkit::server::jinja {
namespace {

// Bounds on what a template may do (a template or the data it renders may come from outside).
constexpr size_t kMaxOutputBytes = size_t{64} << 20;
constexpr int kMaxCallDepth = 100;
constexpr int64_t kMaxIterations = 1'000'000;

Status TypeError(const std::string& what) { return Status::InvalidArgument(what); }

Status UndefinedError(const Value& v) {
  return Status::InvalidArgument("'" + (v.undefined_name().empty() ? "value" : v.undefined_name()) +
                                 "' is undefined");
}

// Python's floor division and modulo on integers.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Python's slice.indices(n): the positions a[start:stop:step] takes.
Status SliceIndices(int64_t n, const Value& start, const Value& stop, const Value& step,
                    std::vector<int64_t>* out) {
  auto absent = [](const Value& v) { return v.is_none() || v.is_undefined(); };
  for (const Value* v : {&start, &stop, &step}) {
    if (!absent(*v) && !v->is_int()) return TypeError("slice indices must be integers or None");
  }
  const int64_t s = absent(step) ? 1 : step.as_int();
  if (s == 0) return TypeError("slice step cannot be zero");
  const int64_t lower = s > 0 ? 0 : -1, upper = s > 0 ? n : n - 1;
  auto index = [&](const Value& v, int64_t fallback) {
    if (absent(v)) return fallback;
    int64_t x = v.as_int();
    if (x < 0) x += n;
    return std::clamp(x, lower, upper);
  };
  const int64_t a = index(start, s > 0 ? lower : upper);
  const int64_t b = index(stop, s > 0 ? upper : lower);
  // A step longer than the sequence takes one element, as n + 1 does (and cannot overflow).
  const int64_t d = s > 0 ? std::min(s, n + 1) : std::max(s, -(n + 1));
  for (int64_t i = a; d > 0 ? i < b : i > b; i += d) out->push_back(i);
  return Status::Ok();
}

}  // namespace

Status Iterate(const Value& v, Array* out) {
  out->clear();
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Status::Ok();
    case Value::Kind::kArray:
      *out = v.as_array();
      return Status::Ok();
    case Value::Kind::kDict:
      if (v.as_dict().is_namespace) break;
      for (const auto& kv : v.as_dict().items) out->push_back(Value(kv.first));
      return Status::Ok();
    case Value::Kind::kString: {
      const std::vector<char32_t> cps = CodePoints(v.as_string());
      for (size_t i = 0; i < cps.size(); ++i) out->push_back(Value(FromCodePoints(cps, i, i + 1)));
      return Status::Ok();
    }
    default:
      break;
  }
  return TypeError(std::string("'") + v.TypeName() + "' object is not iterable");
}

Evaluator::Evaluator(const Value& context, std::string* out) : context_(context), out_(out) {
  scopes_.emplace_back();
}

Status Evaluator::Run(const Node& root) { return ExecBody(root); }

Status Evaluator::Emit(const std::string& text) {
  *out_ += text;
  if (out_->size() > kMaxOutputBytes) {
    return Status::InvalidArgument("the output is larger than " + std::to_string(kMaxOutputBytes) +
                                   " bytes");
  }
  return Status::Ok();
}

Value Evaluator::Lookup(const std::string& name) const {
  for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
    for (auto it = s->rbegin(); it != s->rend(); ++it) {
      if (it->first == name) return it->second;
    }
  }
  if (context_.is_dict()) {
    if (const Value* v = context_.as_dict().Find(name)) return *v;
  }
  Value g = Global(name);
  if (!g.is_undefined()) return g;
  return Value::MakeUndefined(name);
}

void Evaluator::Assign(const std::string& name, Value value) {
  for (auto& [k, v] : scopes_.back()) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  scopes_.back().emplace_back(name, std::move(value));
}

Status Evaluator::ExecBody(const Node& body) {
  for (const auto& stmt : body.children) {
    SSMKIT_RETURN_IF_ERROR(Exec(*stmt));
    if (flow_ != Flow::kNormal) return Status::Ok();
  }
  return Status::Ok();
}

Status Evaluator::Exec(const Node& n) {
  switch (n.kind) {
    case NodeKind::kText:
      return Emit(n.text);
    case NodeKind::kOutput: {
      Value v;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &v));
      return Emit(v.Str());
    }
    case NodeKind::kIf: {
      const size_t pairs = n.children.size() / 2;
      for (size_t i = 0; i < pairs; ++i) {
        Value cond;
        SSMKIT_RETURN_IF_ERROR(Eval(*n.children[2 * i], &cond));
        if (cond.Truthy()) return ExecBody(*n.children[2 * i + 1]);
      }
      if (n.children.size() % 2 == 1) return ExecBody(*n.children.back());
      return Status::Ok();
    }
    case NodeKind::kFor:
      return ExecFor(n);
    case NodeKind::kSet:
      return ExecSet(n);
    case NodeKind::kSetBlock: {
      std::string captured;
      std::string* saved = out_;
      out_ = &captured;
      const Status s = ExecBody(*n.children[0]);
      out_ = saved;
      SSMKIT_RETURN_IF_ERROR(s);
      Assign(n.names[0], Value(std::move(captured)));
      return Status::Ok();
    }
    case NodeKind::kMacro:
      Assign(n.text, MakeMacro(n));
      return Status::Ok();
    case NodeKind::kBreak:
      flow_ = Flow::kBreak;
      return Status::Ok();
    case NodeKind::kContinue:
      flow_ = Flow::kContinue;
      return Status::Ok();
    case NodeKind::kBody:
      return ExecBody(n);
    default:
      return Status::Internal("line " + std::to_string(n.line) + ": not a statement");
  }
}

Status Evaluator::ExecSet(const Node& n) {
  Value v;
  SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &v));
  if (n.attribute) {
    const Value ns = Lookup(n.names[0]);
    if (!ns.is_dict() || !ns.as_dict().is_namespace) {
      return TypeError("line " + std::to_string(n.line) + ": cannot assign attribute on '" +
                       n.names[0] + "': not a namespace");
    }
    ns.mutable_dict().Set(n.names[1], std::move(v));
    return Status::Ok();
  }
  return AssignTargets(n, v);
}

Status Evaluator::AssignTargets(const Node& n, const Value& v) {
  if (n.names.size() == 1) {
    Assign(n.names[0], v);
    return Status::Ok();
  }
  Array parts;
  SSMKIT_RETURN_IF_ERROR(Iterate(v, &parts));
  if (parts.size() != n.names.size()) {
    return TypeError("line " + std::to_string(n.line) + ": cannot unpack " +
                     std::to_string(parts.size()) + " values into " +
                     std::to_string(n.names.size()));
  }
  for (size_t i = 0; i < parts.size(); ++i) Assign(n.names[i], parts[i]);
  return Status::Ok();
}

Status Evaluator::ExecFor(const Node& n) {
  Value iterable;
  SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &iterable));
  Array items;
  Status s = Iterate(iterable, &items);
  if (!s.ok())
    return Status::InvalidArgument("line " + std::to_string(n.line) + ": " + s.message());
  if (n.children.size() > 3) {
    // The loop filter runs first: loop.length and loop.last count what passes.
    Array kept;
    for (const Value& item : items) {
      scopes_.emplace_back();
      Status st = AssignTargets(n, item);
      Value keep;
      if (st.ok()) st = Eval(*n.children[3], &keep);
      scopes_.pop_back();
      SSMKIT_RETURN_IF_ERROR(st);
      if (keep.Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  // As jinja2 compiles it, the else body runs unless an iteration reached the end of the body:
  // one that ended by {% continue %} or {% break %} does not count.
  bool completed = false;
  const int64_t length = static_cast<int64_t>(items.size());
  auto index = std::make_shared<int64_t>(0);
  Dict fields;
  for (const char* name : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                           "depth", "depth0", "previtem", "nextitem"}) {
    fields.items.emplace_back(name, Value());
  }
  fields.items[6].second = Value(length);
  fields.items[7].second = Value(1);
  fields.items[8].second = Value(0);
  fields.items.emplace_back(
      "cycle", Value(Function([index](const Args& args, Value* out) {
        if (args.positional.empty()) {
          return TypeError("loop.cycle: no items given");
        }
        *out = args.positional[static_cast<size_t>(*index) % args.positional.size()];
        return Status::Ok();
      })));
  const Value loop(std::move(fields));
  for (int64_t i = 0; i < length; ++i) {
    if (++iterations_ > kMaxIterations) {
      return Status::InvalidArgument("more than " + std::to_string(kMaxIterations) +
                                     " loop iterations");
    }
    // One loop object per for statement, advanced in place (jinja2's LoopContext is one object
    // too): no allocation per iteration.
    std::vector<std::pair<std::string, Value>>& f = loop.mutable_dict().items;
    f[0].second = Value(i + 1);
    f[1].second = Value(i);
    f[2].second = Value(length - i);
    f[3].second = Value(length - i - 1);
    f[4].second = Value(i == 0);
    f[5].second = Value(i == length - 1);
    f[9].second = i > 0 ? items[i - 1] : Value::MakeUndefined("loop.previtem");
    f[10].second = i + 1 < length ? items[i + 1] : Value::MakeUndefined("loop.nextitem");
    *index = i;
    scopes_.emplace_back();
    scopes_.back().emplace_back("loop", loop);
    Status st = AssignTargets(n, items[i]);
    if (st.ok()) st = ExecBody(*n.children[1]);
    scopes_.pop_back();
    SSMKIT_RETURN_IF_ERROR(st);
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    completed = completed || flow_ == Flow::kNormal;
    flow_ = Flow::kNormal;
  }
  return completed ? Status::Ok() : ExecBody(*n.children[2]);
}

Value Evaluator::MakeMacro(const Node& n) {
  const Node* node = &n;
  return Value(Function([this, node](const Args& args, Value* out) -> Status {
    if (depth_ >= kMaxCallDepth) {
      return Status::InvalidArgument("macro calls nested more than " +
                                     std::to_string(kMaxCallDepth) + " deep");
    }
    const std::vector<std::string>& params = node->names;
    if (args.positional.size() > params.size()) {
      return TypeError("macro '" + node->text + "' takes " + std::to_string(params.size()) +
                       " arguments, given " + std::to_string(args.positional.size()));
    }
    std::vector<std::pair<std::string, Value>> scope;
    for (size_t i = 0; i < params.size(); ++i) {
      Value v;
      if (i < args.positional.size()) {
        v = args.positional[i];
      } else if (const Value* kw = args.Keyword(params[i])) {
        v = *kw;
      } else if (node->children[i + 1]) {
        SSMKIT_RETURN_IF_ERROR(Eval(*node->children[i + 1], &v));
      } else {
        v = Value::MakeUndefined(params[i]);
      }
      scope.emplace_back(params[i], std::move(v));
    }
    std::string captured;
    std::string* saved_out = out_;
    const Flow saved_flow = flow_;
    out_ = &captured;
    scopes_.push_back(std::move(scope));
    ++depth_;
    const Status s = ExecBody(*node->children[0]);
    --depth_;
    scopes_.pop_back();
    out_ = saved_out;
    flow_ = saved_flow;
    SSMKIT_RETURN_IF_ERROR(s);
    *out = Value(std::move(captured));
    return Status::Ok();
  }));
}

Status Evaluator::Eval(const Node& n, Value* out) {
  const Status s = EvalInner(n, out);
  if (s.ok() || s.message().rfind("line ", 0) == 0 || s.message().rfind(kRaisedPrefix, 0) == 0) {
    return s;
  }
  return Status(s.code(), "line " + std::to_string(n.line) + ": " + s.message());
}

Status Evaluator::EvalArgs(const Node& n, size_t first, Args* args) {
  const size_t positional_end = first + n.positional;
  for (size_t i = first; i < n.children.size(); ++i) {
    Value v;
    SSMKIT_RETURN_IF_ERROR(Eval(*n.children[i], &v));
    if (i < positional_end) {
      args->positional.push_back(std::move(v));
    } else {
      args->keyword.emplace_back(n.names[i - positional_end], std::move(v));
    }
  }
  return Status::Ok();
}

Status Evaluator::EvalInner(const Node& n, Value* out) {
  switch (n.kind) {
    case NodeKind::kLiteral:
      *out = n.value;
      return Status::Ok();
    case NodeKind::kName:
      *out = Lookup(n.text);
      return Status::Ok();
    case NodeKind::kGetAttr: {
      Value obj;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &obj));
      return GetAttr(obj, n.text, out);
    }
    case NodeKind::kGetItem: {
      Value obj, key;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &obj));
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[1], &key));
      return GetItem(obj, key, out);
    }
    case NodeKind::kSlice: {
      Value obj, parts[3] = {Value::None(), Value::None(), Value::None()};
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &obj));
      for (int i = 0; i < 3; ++i) {
        if (n.children[i + 1]) SSMKIT_RETURN_IF_ERROR(Eval(*n.children[i + 1], &parts[i]));
      }
      return Slice(obj, parts[0], parts[1], parts[2], out);
    }
    case NodeKind::kCall: {
      Value callee;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &callee));
      Args args;
      SSMKIT_RETURN_IF_ERROR(EvalArgs(n, 1, &args));
      if (callee.is_undefined()) return UndefinedError(callee);
      if (!callee.is_function()) {
        return TypeError(std::string("'") + callee.TypeName() + "' object is not callable");
      }
      return callee.as_function()(args, out);
    }
    case NodeKind::kFilter: {
      Value input;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &input));
      Args args;
      SSMKIT_RETURN_IF_ERROR(EvalArgs(n, 1, &args));
      return Filter(n.text, input, args, out);
    }
    case NodeKind::kTest: {
      Value input;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &input));
      Args args;
      SSMKIT_RETURN_IF_ERROR(EvalArgs(n, 1, &args));
      bool result = false;
      SSMKIT_RETURN_IF_ERROR(Test(n.text, input, args, &result));
      *out = Value(result != n.negated);
      return Status::Ok();
    }
    case NodeKind::kUnary: {
      Value v;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &v));
      if (n.text == "not") {
        *out = Value(!v.Truthy());
      } else if (!v.is_number()) {
        return TypeError(std::string("bad operand type for unary ") + n.text + ": '" +
                         v.TypeName() + "'");
      } else if (n.text == "+") {
        *out = v.is_int() ? Value(v.as_int()) : v;
      } else if (v.is_int()) {
        if (v.as_int() == std::numeric_limits<int64_t>::min()) return TypeError("integer overflow");
        *out = Value(-v.as_int());
      } else {
        *out = Value(-v.as_double());
      }
      return Status::Ok();
    }
    case NodeKind::kBinary: {
      Value a;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &a));
      // and / or return an operand, evaluating the second only when needed (Python's).
      if (n.text == "and" || n.text == "or") {
        if (a.Truthy() == (n.text == "or")) {
          *out = a;
          return Status::Ok();
        }
        return Eval(*n.children[1], out);
      }
      Value b;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[1], &b));
      return Binary(n.text, a, b, out);
    }
    case NodeKind::kCompare: {
      Value left;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[0], &left));
      for (size_t i = 0; i < n.names.size(); ++i) {
        Value right;
        SSMKIT_RETURN_IF_ERROR(Eval(*n.children[i + 1], &right));
        bool r = false;
        SSMKIT_RETURN_IF_ERROR(Compare(n.names[i], left, right, &r));
        if (!r) {
          *out = Value(false);
          return Status::Ok();
        }
        left = std::move(right);
      }
      *out = Value(true);
      return Status::Ok();
    }
    case NodeKind::kCondExpr: {
      Value cond;
      SSMKIT_RETURN_IF_ERROR(Eval(*n.children[1], &cond));
      if (cond.Truthy()) return Eval(*n.children[0], out);
      if (n.children.size() > 2) return Eval(*n.children[2], out);
      *out = Value::MakeUndefined("");
      return Status::Ok();
    }
    case NodeKind::kList:
    case NodeKind::kTuple: {
      Array items;
      for (const auto& c : n.children) {
        Value v;
        SSMKIT_RETURN_IF_ERROR(Eval(*c, &v));
        items.push_back(std::move(v));
      }
      *out = n.kind == NodeKind::kTuple ? Value::Tuple(std::move(items)) : Value(std::move(items));
      return Status::Ok();
    }
    case NodeKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < n.children.size(); i += 2) {
        Value k, v;
        SSMKIT_RETURN_IF_ERROR(Eval(*n.children[i], &k));
        SSMKIT_RETURN_IF_ERROR(Eval(*n.children[i + 1], &v));
        if (!k.is_string()) return TypeError("dict keys must be strings here");
        d.Set(k.as_string(), std::move(v));
      }
      *out = Value(std::move(d));
      return Status::Ok();
    }
    default:
      return Status::Internal("not an expression");
  }
}

Status Evaluator::Binary(const std::string& op, const Value& a, const Value& b, Value* out) {
  if (op == "~") {
    *out = Value(a.Str() + b.Str());
    return Status::Ok();
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const auto unsupported = [&] {
    return TypeError("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" +
                     b.TypeName() + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      *out = Value(a.as_string() + b.as_string());
      return Status::Ok();
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      Array c = a.as_array();
      c.insert(c.end(), b.as_array().begin(), b.as_array().end());
      *out = a.is_tuple() ? Value::Tuple(std::move(c)) : Value(std::move(c));
      return Status::Ok();
    }
  }
  if (op == "*" && ((a.is_string() || a.is_array()) != (b.is_string() || b.is_array()))) {
    const Value& seq = a.is_int() ? b : a;
    const Value& times = a.is_int() ? a : b;
    if (!times.is_int() || times.kind() == Value::Kind::kBool) return unsupported();
    const int64_t k = std::max<int64_t>(0, times.as_int());
    const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_array().size();
    if (unit > 0 && static_cast<uint64_t>(k) > kMaxOutputBytes / unit) {
      return Status::InvalidArgument("a repeated sequence would be too long");
    }
    if (seq.is_string()) {
      std::string s;
      for (int64_t i = 0; i < k; ++i) s += seq.as_string();
      *out = Value(std::move(s));
    } else {
      Array r;
      for (int64_t i = 0; i < k; ++i)
        r.insert(r.end(), seq.as_array().begin(), seq.as_array().end());
      *out = Value(std::move(r));
    }
    return Status::Ok();
  }
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool ints = a.is_int() && b.is_int();
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                            : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                        : __builtin_mul_overflow(x, y, &r);
      if (overflow) return Status::InvalidArgument("integer overflow in " + op);
      *out = Value(r);
      return Status::Ok();
    }
    if (op == "//" || op == "%") {
      if (y == 0) return Status::InvalidArgument("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        return Status::InvalidArgument("integer overflow in " + op);
      }
      *out = Value(op == "//" ? FloorDiv(x, y) : FloorMod(x, y));
      return Status::Ok();
    }
    if (op == "**" && y >= 0) {
      int64_t p = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(p, x, &p))
          return Status::InvalidArgument("integer overflow in **");
        if (p == 0 || p == 1) break;
      }
      *out = Value(p);
      return Status::Ok();
    }
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+")
    *out = Value(x + y);
  else if (op == "-")
    *out = Value(x - y);
  else if (op == "*")
    *out = Value(x * y);
  else if (op == "/" || op == "//" || op == "%") {
    if (y == 0.0) return Status::InvalidArgument("float division by zero");
    if (op == "/") {
      *out = Value(x / y);
    } else if (op == "//") {
      *out = Value(std::floor(x / y));
    } else {
      double r = std::fmod(x, y);
      if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
      *out = Value(r);
    }
  } else if (op == "**") {
    *out = Value(std::pow(x, y));
  } else {
    return unsupported();
  }
  return Status::Ok();
}

Status Evaluator::Compare(const std::string& op, const Value& a, const Value& b, bool* out) {
  if (op == "==" || op == "!=") {
    *out = a.Equals(b) == (op == "==");
    return Status::Ok();
  }
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return TypeError(std::string("'in <string>' requires string as left operand, not ") +
                         a.TypeName());
      }
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_dict() && !b.as_dict().is_namespace) {
      found = a.is_string() && b.as_dict().Find(a.as_string()) != nullptr;
    } else if (b.is_array()) {
      for (const Value& v : b.as_array()) found = found || a.Equals(v);
    } else if (!b.is_undefined()) {
      return TypeError(std::string("argument of type '") + b.TypeName() + "' is not iterable");
    }
    *out = found == (op == "in");
    return Status::Ok();
  }
  int c = 0;
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_int() && b.is_int();
    if (ints) {
      c = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    } else {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) {
        *out = false;
        return Status::Ok();
      }
      c = x < y ? -1 : x > y;
    }
  } else if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, Python's.
    c = a.as_string().compare(b.as_string());
    c = c < 0 ? -1 : c > 0;
  } else {
    return TypeError("'" + op + "' not supported between instances of '" + a.TypeName() +
                     "' and '" + b.TypeName() + "'");
  }
  *out = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
  return Status::Ok();
}

Status Evaluator::GetAttr(const Value& obj, const std::string& name, Value* out) {
  if (obj.is_undefined()) return UndefinedError(obj);
  // jinja2's getattr: the Python attribute (a method) first, then the item.
  if (BindMethod(obj, name, out)) return Status::Ok();
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().Find(name);
    *out = v != nullptr ? *v : Value::MakeUndefined(name);
    return Status::Ok();
  }
  *out = Value::MakeUndefined(name);
  return Status::Ok();
}

Status Evaluator::GetItem(const Value& obj, const Value& key, Value* out) {
  if (obj.is_undefined()) return UndefinedError(obj);
  // jinja2's getitem: the item first, then (for a string key) the attribute.
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().Find(key.as_string())) {
      *out = *v;
      return Status::Ok();
    }
  } else if ((obj.is_array() || obj.is_string()) && key.is_int()) {
    int64_t i = key.as_int();
    if (obj.is_array()) {
      const int64_t n = static_cast<int64_t>(obj.as_array().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        *out = obj.as_array()[static_cast<size_t>(i)];
        return Status::Ok();
      }
    } else {
      const std::vector<char32_t> cps = CodePoints(obj.as_string());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        *out = Value(FromCodePoints(cps, static_cast<size_t>(i), static_cast<size_t>(i + 1)));
        return Status::Ok();
      }
    }
  }
  if (key.is_string()) return GetAttr(obj, key.as_string(), out);
  *out = Value::MakeUndefined(key.Str());
  return Status::Ok();
}

Status Evaluator::Slice(const Value& obj, const Value& start, const Value& stop, const Value& step,
                        Value* out) {
  if (obj.is_undefined()) return UndefinedError(obj);
  std::vector<int64_t> idx;
  if (obj.is_array()) {
    SSMKIT_RETURN_IF_ERROR(
        SliceIndices(static_cast<int64_t>(obj.as_array().size()), start, stop, step, &idx));
    Array r;
    for (int64_t i : idx) r.push_back(obj.as_array()[static_cast<size_t>(i)]);
    *out = obj.is_tuple() ? Value::Tuple(std::move(r)) : Value(std::move(r));
    return Status::Ok();
  }
  if (obj.is_string()) {
    const std::vector<char32_t> cps = CodePoints(obj.as_string());
    SSMKIT_RETURN_IF_ERROR(SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step, &idx));
    std::vector<char32_t> picked;
    for (int64_t i : idx) picked.push_back(cps[static_cast<size_t>(i)]);
    *out = Value(FromCodePoints(picked, 0, picked.size()));
    return Status::Ok();
  }
  return TypeError(std::string("'") + obj.TypeName() + "' object is not subscriptable");
}

}  // namespace ssmkit::server::jinja

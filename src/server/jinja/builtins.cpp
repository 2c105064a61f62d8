// jinja2's filters and tests that chat templates use, transformers' tojson, and the globals
// (range, namespace, dict, raise_exception, strftime_now). Each follows jinja2 3.1's
// definition; docs/server.md lists them.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "server/jinja/evaluator.hpp"
#include "server/jinja/unicode.hpp"

namespace ssmkit::server::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

Status FilterError(const std::string& filter, const std::string& what) {
  return Status::InvalidArgument("filter '" + filter + "': " + what);
}

// An argument by position or by name; nullptr when absent.
const Value* Arg(const Args& args, size_t position, const char* name) {
  if (position < args.positional.size()) return &args.positional[position];
  return args.Keyword(name);
}

bool BoolArg(const Args& args, size_t position, const char* name, bool fallback) {
  const Value* v = Arg(args, position, name);
  return v == nullptr ? fallback : v->Truthy();
}

std::string Lowered(const std::string& s) { return PyLower(s); }

// jinja2's attribute paths for sort, map, selectattr, ...: "a.b.0".
Value AttributePath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_dict()) {
      const Value* f = cur.as_dict().Find(part);
      cur = f != nullptr ? *f : Value::MakeUndefined(part);
    } else if (cur.is_array() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t i = static_cast<size_t>(std::stoll(part));
      cur = i < cur.as_array().size() ? cur.as_array()[i] : Value::MakeUndefined(part);
    } else {
      return Value::MakeUndefined(part);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Ordering for sort, min, max, dictsort: numbers and strings (case-folded unless asked).
Status Less(const Value& a, const Value& b, bool case_sensitive, bool* out) {
  if (a.is_number() && b.is_number()) {
    *out = a.as_double() < b.as_double();
    return Status::Ok();
  }
  if (a.is_string() && b.is_string()) {
    *out = case_sensitive ? a.as_string() < b.as_string()
                          : Lowered(a.as_string()) < Lowered(b.as_string());
    return Status::Ok();
  }
  return Status::InvalidArgument(std::string("'<' not supported between instances of '") +
                                 a.TypeName() + "' and '" + b.TypeName() + "'");
}

Status SortValues(Array* items, bool reverse, bool case_sensitive, const Value* attribute) {
  Status error;
  auto key = [&](const Value& v) {
    return attribute != nullptr && attribute->is_string() ? AttributePath(v, attribute->as_string())
                                                          : v;
  };
  std::stable_sort(items->begin(), items->end(), [&](const Value& x, const Value& y) {
    bool less = false;
    const Status s = reverse ? Less(key(y), key(x), case_sensitive, &less)
                             : Less(key(x), key(y), case_sensitive, &less);
    if (!s.ok() && error.ok()) error = s;
    return less;
  });
  return error;
}

std::string HtmlEscape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '&':
        r += "&amp;";
        break;
      case '<':
        r += "&lt;";
        break;
      case '>':
        r += "&gt;";
        break;
      case '"':
        r += "&#34;";
        break;
      case '\'':
        r += "&#39;";
        break;
      default:
        r += c;
    }
  }
  return r;
}

int64_t Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(CodePoints(v.as_string()).size());
  if (v.is_array()) return static_cast<int64_t>(v.as_array().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  return -1;
}

}  // namespace

Value Global(const std::string& name) {
  if (name == "range") {
    return Value(Function([](const Args& args, Value* out) -> Status {
      const auto& p = args.positional;
      if (p.empty() || p.size() > 3) return Status::InvalidArgument("range: 1 to 3 arguments");
      for (const Value& v : p) {
        if (!v.is_int()) return Status::InvalidArgument("range: integer arguments only");
      }
      const int64_t start = p.size() > 1 ? p[0].as_int() : 0;
      const int64_t stop = p.size() > 1 ? p[1].as_int() : p[0].as_int();
      const int64_t step = p.size() > 2 ? p[2].as_int() : 1;
      if (step == 0) return Status::InvalidArgument("range: step must not be zero");
      const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                     static_cast<double>(step));
      if (count > static_cast<double>(kMaxRange)) {
        return Status::InvalidArgument("range: more than " + std::to_string(kMaxRange) + " items");
      }
      Array items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value(i));
      *out = Value(std::move(items));
      return Status::Ok();
    }));
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value(Function([ns](const Args& args, Value* out) -> Status {
      Dict d;
      d.is_namespace = ns;
      for (const Value& p : args.positional) {
        if (!p.is_dict()) return Status::InvalidArgument("namespace/dict: expected a mapping");
        for (const auto& [k, v] : p.as_dict().items) d.Set(k, v);
      }
      for (const auto& [k, v] : args.keyword) d.Set(k, v);
      *out = Value(std::move(d));
      return Status::Ok();
    }));
  }
  if (name == "raise_exception") {
    return Value(Function([](const Args& args, Value*) -> Status {
      const std::string message = args.positional.empty() ? "" : args.positional[0].Str();
      return Status::InvalidArgument(kRaisedPrefix + message);
    }));
  }
  if (name == "strftime_now") {
    return Value(Function([](const Args& args, Value* out) -> Status {
      if (args.positional.empty() || !args.positional[0].is_string()) {
        return Status::InvalidArgument("strftime_now: expected a format string");
      }
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[512];
      const size_t n =
          std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &local);
      *out = Value(std::string(buf, n));
      return Status::Ok();
    }));
  }
  return Value::MakeUndefined(name);
}

Status Evaluator::Filter(const std::string& name, const Value& input, const Args& args,
                         Value* out) {
  const auto& p = args.positional;
  if (name == "safe") {
    *out = input;
  } else if (name == "string") {
    *out = Value(input.Str());
  } else if (name == "trim") {
    Value strip;
    BindMethod(Value(input.Str()), "strip", &strip);
    Args strip_args;
    if (const Value* chars = Arg(args, 0, "chars")) strip_args.positional.push_back(*chars);
    return strip.as_function()(strip_args, out);
  } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    Value method;
    BindMethod(Value(input.Str()), name, &method);
    return method.as_function()(Args{}, out);
  } else if (name == "length" || name == "count") {
    if (input.is_undefined()) {
      *out = Value(int64_t{0});
    } else if (Length(input) < 0) {
      return FilterError(name,
                         std::string("object of type '") + input.TypeName() + "' has no len()");
    } else {
      *out = Value(Length(input));
    }
  } else if (name == "default" || name == "d") {
    const Value* fallback = Arg(args, 0, "default_value");
    const bool boolean = BoolArg(args, 1, "boolean", false);
    const bool use = input.is_undefined() || (boolean && !input.Truthy());
    *out = use ? (fallback != nullptr ? *fallback : Value(std::string())) : input;
  } else if (name == "tojson") {
    const Value* indent = Arg(args, 0, "indent");
    if (BoolArg(args, 99, "ensure_ascii", false)) {
      return FilterError(name, "ensure_ascii=True is not supported");
    }
    if (const Value* sep = args.Keyword("separators"); sep != nullptr && !sep->is_none()) {
      return FilterError(name, "separators are not supported");
    }
    std::string json;
    SSMKIT_RETURN_IF_ERROR(
        ToJson(input,
               indent != nullptr && indent->is_int()
                   ? static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64))
                   : -1,
               BoolArg(args, 99, "sort_keys", false), &json));
    *out = Value(std::move(json));
  } else if (name == "join") {
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    const Value* sep = Arg(args, 0, "d");
    const Value* attribute = Arg(args, 1, "attribute");
    std::string r;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && sep != nullptr) r += sep->Str();
      r += (attribute != nullptr && attribute->is_string()
                ? AttributePath(items[i], attribute->as_string())
                : items[i])
               .Str();
    }
    *out = Value(std::move(r));
  } else if (name == "first" || name == "last") {
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    *out = items.empty()     ? Value::MakeUndefined(name)
           : name == "first" ? items.front()
                             : items.back();
  } else if (name == "list") {
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    *out = Value(std::move(items));
  } else if (name == "reverse") {
    if (input.is_string()) {
      std::vector<char32_t> cps = CodePoints(input.as_string());
      std::reverse(cps.begin(), cps.end());
      *out = Value(FromCodePoints(cps, 0, cps.size()));
    } else {
      Array items;
      SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
      std::reverse(items.begin(), items.end());
      *out = Value(std::move(items));
    }
  } else if (name == "items") {
    Array items;
    if (input.is_dict()) {
      for (const auto& [k, v] : input.as_dict().items) items.push_back(Value::Tuple({Value(k), v}));
    } else if (!input.is_undefined()) {
      return FilterError(name, "expected a mapping");
    }
    *out = Value(std::move(items));
  } else if (name == "replace") {
    Value method;
    BindMethod(Value(input.Str()), "replace", &method);
    return method.as_function()(args, out);
  } else if (name == "escape" || name == "e") {
    *out = Value(HtmlEscape(input.Str()));
  } else if (name == "int") {
    const Value* fallback = Arg(args, 0, "default");
    if (input.is_int()) {
      *out = Value(input.as_int());
    } else if (input.kind() == Value::Kind::kFloat && std::isfinite(input.as_double()) &&
               std::fabs(input.as_double()) < 9.2e18) {
      *out = Value(static_cast<int64_t>(input.as_double()));
    } else if (input.is_string()) {
      char* end = nullptr;
      const std::string s = input.as_string();
      const double d = std::strtod(s.c_str(), &end);
      const bool ok = end != s.c_str() && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18;
      *out = ok ? Value(static_cast<int64_t>(d)) : (fallback ? *fallback : Value(int64_t{0}));
    } else {
      *out = fallback ? *fallback : Value(int64_t{0});
    }
  } else if (name == "float") {
    const Value* fallback = Arg(args, 0, "default");
    if (input.is_number()) {
      *out = Value(input.as_double());
    } else if (input.is_string()) {
      char* end = nullptr;
      const double d = std::strtod(input.as_string().c_str(), &end);
      const bool ok = end != input.as_string().c_str() && *end == '\0';
      *out = ok ? Value(d) : (fallback ? *fallback : Value(0.0));
    } else {
      *out = fallback ? *fallback : Value(0.0);
    }
  } else if (name == "abs") {
    if (!input.is_number()) return FilterError(name, "expected a number");
    *out = input.is_int() ? Value(input.as_int() < 0 ? -input.as_int() : input.as_int())
                          : Value(std::fabs(input.as_double()));
  } else if (name == "round") {
    if (!input.is_number()) return FilterError(name, "expected a number");
    const Value* precision = Arg(args, 0, "precision");
    const Value* method = Arg(args, 1, "method");
    const double scale = std::pow(10.0, precision && precision->is_int() ? precision->as_int() : 0);
    const std::string how = method && method->is_string() ? method->as_string() : "common";
    const double x = input.as_double() * scale;
    const double r = how == "floor"  ? std::floor(x)
                     : how == "ceil" ? std::ceil(x)
                                     : std::nearbyint(x);
    *out = Value(r / scale);
  } else if (name == "sort") {
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    SSMKIT_RETURN_IF_ERROR(SortValues(&items, BoolArg(args, 0, "reverse", false),
                                      BoolArg(args, 1, "case_sensitive", false),
                                      Arg(args, 2, "attribute")));
    *out = Value(std::move(items));
  } else if (name == "dictsort") {
    if (!input.is_dict()) return FilterError(name, "expected a mapping");
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* by = Arg(args, 1, "by");
    const bool by_value = by != nullptr && by->is_string() && by->as_string() == "value";
    Array items;
    for (const auto& [k, v] : input.as_dict().items) items.push_back(Value::Tuple({Value(k), v}));
    const Value attribute(by_value ? "1" : "0");
    SSMKIT_RETURN_IF_ERROR(
        SortValues(&items, BoolArg(args, 2, "reverse", false), case_sensitive, &attribute));
    *out = Value(std::move(items));
  } else if (name == "unique") {
    Array items, kept;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* attribute = Arg(args, 1, "attribute");
    std::vector<Value> seen;
    for (const Value& v : items) {
      Value key =
          attribute && attribute->is_string() ? AttributePath(v, attribute->as_string()) : v;
      if (!case_sensitive && key.is_string()) key = Value(Lowered(key.as_string()));
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); })) {
        seen.push_back(key);
        kept.push_back(v);
      }
    }
    *out = Value(std::move(kept));
  } else if (name == "min" || name == "max") {
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    SSMKIT_RETURN_IF_ERROR(SortValues(&items, name == "max",
                                      BoolArg(args, 0, "case_sensitive", false),
                                      Arg(args, 1, "attribute")));
    *out = items.empty() ? Value::MakeUndefined(name) : items.front();
  } else if (name == "sum") {
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    const Value* attribute = Arg(args, 0, "attribute");
    const Value* start = Arg(args, 1, "start");
    Value total = start != nullptr ? *start : Value(int64_t{0});
    for (const Value& v : items) {
      const Value x =
          attribute && attribute->is_string() ? AttributePath(v, attribute->as_string()) : v;
      if (!x.is_number() || !total.is_number()) return FilterError(name, "expected numbers");
      total = total.is_int() && x.is_int() ? Value(total.as_int() + x.as_int())
                                           : Value(total.as_double() + x.as_double());
    }
    *out = total;
  } else if (name == "map") {
    Array items, mapped;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    const Value* attribute = args.Keyword("attribute");
    if (attribute != nullptr) {
      const Value* fallback = args.Keyword("default");
      for (const Value& v : items) {
        Value x = AttributePath(v, attribute->Str());
        mapped.push_back(x.is_undefined() && fallback ? *fallback : x);
      }
    } else {
      if (p.empty() || !p[0].is_string()) return FilterError(name, "expected a filter name");
      Args rest{std::vector<Value>(p.begin() + 1, p.end()), args.keyword};
      for (const Value& v : items) {
        Value x;
        SSMKIT_RETURN_IF_ERROR(Filter(p[0].as_string(), v, rest, &x));
        mapped.push_back(std::move(x));
      }
    }
    *out = Value(std::move(mapped));
  } else if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attribute = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    Array items, kept;
    SSMKIT_RETURN_IF_ERROR(Iterate(input, &items));
    size_t k = 0;
    std::string attribute;
    if (by_attribute) {
      if (p.empty() || !p[0].is_string()) return FilterError(name, "expected an attribute name");
      attribute = p[0].as_string();
      k = 1;
    }
    const bool has_test = p.size() > k;
    if (has_test && !p[k].is_string()) return FilterError(name, "expected a test name");
    Args rest{has_test ? std::vector<Value>(p.begin() + k + 1, p.end()) : std::vector<Value>{},
              args.keyword};
    for (const Value& v : items) {
      const Value x = by_attribute ? AttributePath(v, attribute) : v;
      bool r = x.Truthy();
      if (has_test) SSMKIT_RETURN_IF_ERROR(Test(p[k].as_string(), x, rest, &r));
      if (r == keep_if) kept.push_back(v);
    }
    *out = Value(std::move(kept));
  } else if (name == "attr") {
    if (p.empty() || !p[0].is_string()) return FilterError(name, "expected an attribute name");
    *out = input.is_dict() ? AttributePath(input, p[0].as_string())
                           : Value::MakeUndefined(p[0].as_string());
  } else if (name == "indent") {
    const Value* width = Arg(args, 0, "width");
    const std::string pad = width == nullptr ? "    "
                            : width->is_string()
                                ? width->as_string()
                                : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                  width->is_int() ? width->as_int() : 4, 0, 1024)),
                                              ' ');
    const bool first = BoolArg(args, 1, "first", false);
    const bool blank = BoolArg(args, 2, "blank", false);
    const std::vector<std::string> lines = PySplitLines(input.Str() + "\n");
    std::string r;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) r += "\n";
      const bool indent_line = (i > 0 || first) && (blank || !lines[i].empty());
      r += (indent_line ? pad : "") + lines[i];
    }
    *out = Value(std::move(r));
  } else if (name == "center") {
    const Value* width = Arg(args, 0, "width");
    const int64_t w = width && width->is_int() ? std::clamp<int64_t>(width->as_int(), 0, 4096) : 80;
    const std::string s = input.Str();
    const int64_t n = static_cast<int64_t>(CodePoints(s).size());
    if (n >= w) {
      *out = Value(s);
    } else {
      // Python's str.center: the extra space goes left when the margin and width are odd.
      const int64_t margin = w - n;
      const int64_t left = margin / 2 + (margin & w & 1);
      *out = Value(std::string(static_cast<size_t>(left), ' ') + s +
                   std::string(static_cast<size_t>(margin - left), ' '));
    }
  } else if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : CodePoints(input.Str())) {
      const bool w = IsWordChar(c);
      if (w && !in_word) ++words;
      in_word = w;
    }
    *out = Value(words);
  } else {
    return Status::InvalidArgument("no filter named '" + name + "'");
  }
  return Status::Ok();
}

Status Evaluator::Test(const std::string& name, const Value& v, const Args& args, bool* out) {
  const Value* a = args.positional.empty() ? nullptr : &args.positional[0];
  const Value::Kind k = v.kind();
  if (name == "defined") {
    *out = !v.is_undefined();
  } else if (name == "undefined") {
    *out = v.is_undefined();
  } else if (name == "none") {
    *out = v.is_none();
  } else if (name == "boolean") {
    *out = v.is_bool();
  } else if (name == "true" || name == "false") {
    *out = v.is_bool() && v.as_bool() == (name == "true");
  } else if (name == "integer") {
    *out = k == Value::Kind::kInt;
  } else if (name == "float") {
    *out = k == Value::Kind::kFloat;
  } else if (name == "number") {
    *out = v.is_number();
  } else if (name == "string") {
    *out = v.is_string();
  } else if (name == "mapping") {
    *out = v.is_dict() && !v.as_dict().is_namespace;
  } else if (name == "iterable") {
    *out = v.is_undefined() || v.is_string() || v.is_array() ||
           (v.is_dict() && !v.as_dict().is_namespace);
  } else if (name == "sequence") {
    *out = v.is_string() || v.is_array() || (v.is_dict() && !v.as_dict().is_namespace);
  } else if (name == "callable") {
    *out = v.is_function();
  } else if (name == "escaped") {
    *out = false;
  } else if (name == "even" || name == "odd") {
    if (!v.is_int()) return Status::InvalidArgument("test '" + name + "': expected an integer");
    *out = ((v.as_int() % 2) != 0) == (name == "odd");
  } else if (name == "divisibleby") {
    if (!v.is_int() || a == nullptr || !a->is_int() || a->as_int() == 0) {
      return Status::InvalidArgument("test 'divisibleby': expected integers, a non-zero divisor");
    }
    *out = v.as_int() % a->as_int() == 0;
  } else if (name == "lower" || name == "upper") {
    *out = name == "lower" ? PyIsLower(v.Str()) : PyIsUpper(v.Str());
  } else if (a == nullptr) {
    return Status::InvalidArgument("no test named '" + name + "' (or it needs an argument)");
  } else if (name == "sameas") {
    *out = (v.is_none() && a->is_none()) ||
           (v.is_bool() && a->is_bool() && v.as_bool() == a->as_bool()) ||
           ((v.is_array() || v.is_dict()) && v.kind() == a->kind() && v.Equals(*a) &&
            (v.is_array() ? &v.as_array() == &a->as_array() : &v.as_dict() == &a->as_dict()));
  } else if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    *out = v.Equals(*a) == (name != "ne" && name != "!=");
  } else if (name == "in") {
    return Compare("in", v, *a, out);
  } else if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" ||
             name == ">" || name == "ge" || name == ">=") {
    const std::string op = name == "lt"   ? "<"
                           : name == "le" ? "<="
                           : name == "gt" ? ">"
                           : name == "ge" ? ">="
                                          : name;
    return Compare(op, v, *a, out);
  } else {
    return Status::InvalidArgument("no test named '" + name + "'");
  }
  return Status::Ok();
}

}  // namespace ssmkit::server::jinja

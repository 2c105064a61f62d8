// The Python methods templates call on values: str.strip() and friends, dict.items(), ...;
// mutating methods (list.append, dict.update) are absent, as in transformers' immutable
// sandbox. Case changes follow Python's Unicode mappings (unicode.hpp).
#include <algorithm>

#include "server/jinja/evaluator.hpp"
#include "server/jinja/unicode.hpp"

namespace ssmkit::server::jinja {
namespace {

Status ArgError(const std::string& method, const std::string& what) {
  return Status::InvalidArgument(method + "(): " + what);
}

// Python's str.strip family: `chars` (a string), or whitespace when absent or None.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  const std::vector<char32_t> cps = CodePoints(s);
  std::vector<char32_t> set;
  const bool whitespace = chars == nullptr || chars->is_none() || !chars->is_string();
  if (!whitespace) set = CodePoints(chars->as_string());
  auto strip = [&](char32_t c) {
    return whitespace ? IsPythonSpace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip(cps[b])) ++b;
  while (right && e > b && strip(cps[e - 1])) --e;
  return FromCodePoints(cps, b, e);
}

// Python's str.split(sep, maxsplit).
Status Split(const std::string& s, const Value* sep, int64_t maxsplit, Value* out) {
  Array parts;
  if (sep == nullptr || sep->is_none()) {
    const std::vector<char32_t> cps = CodePoints(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && IsPythonSpace(cps[e - 1])) --e;
        parts.push_back(Value(FromCodePoints(cps, i, e)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !IsPythonSpace(cps[j])) ++j;
      parts.push_back(Value(FromCodePoints(cps, i, j)));
      i = j;
    }
  } else {
    if (!sep->is_string()) return ArgError("split", "the separator must be a string or None");
    const std::string& d = sep->as_string();
    if (d.empty()) return ArgError("split", "empty separator");
    size_t start = 0;
    while (true) {
      const size_t at = s.find(d, start);
      if (at == std::string::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
        parts.push_back(Value(s.substr(start)));
        break;
      }
      parts.push_back(Value(s.substr(start, at - start)));
      start = at + d.size();
    }
  }
  *out = Value(std::move(parts));
  return Status::Ok();
}

// Python's str.replace(old, new, count).
std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {
    const std::vector<char32_t> cps = CodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += FromCodePoints(cps, i, i + 1);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + to;
    start = at + from.size();
    ++done;
  }
  return out + s.substr(start);
}

// Code points before byte offset `at` (Python's indices count characters).
int64_t CharIndex(const std::string& s, size_t at) {
  return static_cast<int64_t>(CodePoints(s.substr(0, at)).size());
}

bool AffixMatch(const std::string& s, const Value& affix, bool prefix, bool* ok) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) return false;
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_array()) {
    *ok = true;
    for (const Value& a : affix.as_array()) {
      if (!a.is_string()) *ok = false;
      if (one(a)) return true;
    }
    return false;
  }
  *ok = affix.is_string();
  return one(affix);
}

Status StringMethod(const std::string& s, const std::string& name, const Args& args, Value* out) {
  const auto& p = args.positional;
  const Value* a0 = p.size() > 0 ? &p[0] : nullptr;
  const Value* a1 = p.size() > 1 ? &p[1] : nullptr;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    *out = Value(Strip(s, a0, name != "rstrip", name != "lstrip"));
  } else if (name == "upper") {
    *out = Value(PyUpper(s));
  } else if (name == "lower") {
    *out = Value(PyLower(s));
  } else if (name == "title") {
    *out = Value(PyTitle(s));
  } else if (name == "capitalize") {
    *out = Value(PyCapitalize(s));
  } else if (name == "split") {
    const Value* sep = a0 != nullptr ? a0 : args.Keyword("sep");
    const Value* maxsplit = a1 != nullptr ? a1 : args.Keyword("maxsplit");
    return Split(s, sep, maxsplit != nullptr && maxsplit->is_int() ? maxsplit->as_int() : -1, out);
  } else if (name == "splitlines") {
    Array lines;
    for (std::string& line : PySplitLines(s)) lines.push_back(Value(std::move(line)));
    *out = Value(std::move(lines));
  } else if (name == "startswith" || name == "endswith") {
    if (a0 == nullptr) return ArgError(name, "takes a prefix");
    bool ok = true;
    const bool r = AffixMatch(s, *a0, name == "startswith", &ok);
    if (!ok) return ArgError(name, "expects a string or a tuple of strings");
    *out = Value(r);
  } else if (name == "replace") {
    if (a0 == nullptr || a1 == nullptr || !a0->is_string() || !a1->is_string()) {
      return ArgError(name, "takes two strings");
    }
    const int64_t count = p.size() > 2 && p[2].is_int() ? p[2].as_int() : -1;
    *out = Value(Replace(s, a0->as_string(), a1->as_string(), count));
  } else if (name == "find" || name == "rfind" || name == "count") {
    if (a0 == nullptr || !a0->is_string()) return ArgError(name, "takes a string");
    const std::string& x = a0->as_string();
    if (name == "count") {
      int64_t n = 0;
      if (x.empty()) {
        n = static_cast<int64_t>(CodePoints(s).size()) + 1;
      } else {
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
      }
      *out = Value(n);
    } else {
      const size_t at = name == "find" ? s.find(x) : s.rfind(x);
      *out = Value(at == std::string::npos ? int64_t{-1} : CharIndex(s, at));
    }
  } else if (name == "join") {
    if (a0 == nullptr) return ArgError(name, "takes an iterable");
    Array items;
    SSMKIT_RETURN_IF_ERROR(Iterate(*a0, &items));
    std::string r;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return ArgError(name, "sequence item " + std::to_string(i) + ": expected str, given " +
                                  items[i].TypeName());
      }
      if (i > 0) r += s;
      r += items[i].as_string();
    }
    *out = Value(std::move(r));
  } else if (name == "removeprefix" || name == "removesuffix") {
    if (a0 == nullptr || !a0->is_string()) return ArgError(name, "takes a string");
    const std::string& x = a0->as_string();
    bool ok = true;
    std::string r = s;
    if (AffixMatch(s, *a0, name == "removeprefix", &ok)) {
      r = name == "removeprefix" ? s.substr(x.size()) : s.substr(0, s.size() - x.size());
    }
    *out = Value(std::move(r));
  } else if (name == "isupper" || name == "islower") {
    *out = Value(name == "isupper" ? PyIsUpper(s) : PyIsLower(s));
  } else {
    // isdigit, isspace, isalpha, isalnum.
    bool r = !s.empty();
    for (char32_t c : CodePoints(s)) {
      const bool digit = c >= '0' && c <= '9';
      if (name == "isdigit") r = r && digit;
      if (name == "isspace") r = r && IsPythonSpace(c);
      if (name == "isalpha") r = r && IsWordChar(c) && !digit && c != '_';
      if (name == "isalnum") r = r && IsWordChar(c) && c != '_';
    }
    *out = Value(r);
  }
  return Status::Ok();
}

bool IsStringMethod(const std::string& n) {
  static const char* kNames[] = {
      "strip",      "lstrip",  "rstrip",     "upper",      "lower",        "title",
      "capitalize", "split",   "splitlines", "startswith", "endswith",     "replace",
      "find",       "rfind",   "count",      "join",       "removeprefix", "removesuffix",
      "isdigit",    "isspace", "isalpha",    "isalnum",    "isupper",      "islower"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

}  // namespace

bool BindMethod(const Value& obj, const std::string& name, Value* out) {
  if (obj.is_string() && IsStringMethod(name)) {
    const std::string s = obj.as_string();
    *out = Value(Function([s, name](const Args& args, Value* result) {
      return StringMethod(s, name, args, result);
    }));
    return true;
  }
  if (obj.is_dict() && !obj.as_dict().is_namespace &&
      (name == "items" || name == "keys" || name == "values" || name == "get")) {
    const Value dict = obj;
    *out = Value(Function([dict, name](const Args& args, Value* result) -> Status {
      const Dict& d = dict.as_dict();
      if (name == "get") {
        if (args.positional.empty() || !args.positional[0].is_string()) {
          *result = args.positional.size() > 1 ? args.positional[1] : Value::None();
          if (args.positional.empty()) return ArgError("get", "takes a key");
          return Status::Ok();
        }
        const Value* v = d.Find(args.positional[0].as_string());
        *result = v != nullptr                 ? *v
                  : args.positional.size() > 1 ? args.positional[1]
                                               : Value::None();
        return Status::Ok();
      }
      Array items;
      for (const auto& [k, v] : d.items) {
        if (name == "items") {
          items.push_back(Value::Tuple({Value(k), v}));
        } else {
          items.push_back(name == "keys" ? Value(k) : v);
        }
      }
      *result = Value(std::move(items));
      return Status::Ok();
    }));
    return true;
  }
  return false;
}

}  // namespace ssmkit::server::jinja

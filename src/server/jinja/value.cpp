#include "server/jinja/value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ssmkit::server::jinja {

const Value* Dict::Find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* Args::Keyword(const std::string& name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return j.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                 ? Value(static_cast<int64_t>(j.get<uint64_t>()))
                 : Value(static_cast<double>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(FromJson(e));
      return Value(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.items.emplace_back(k, FromJson(v));
      return Value(std::move(d));
    }
    default:
      return Value();
  }
}

int64_t Value::as_int() const {
  return kind() == Kind::kBool ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_);
}

double Value::as_double() const {
  return kind() == Kind::kFloat ? std::get<double>(v_) : static_cast<double>(as_int());
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kArray:
      return !as_array().empty();
    case Kind::kDict:
      return as_dict().is_namespace || !as_dict().items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return "list";
    case Kind::kDict:
      return as_dict().is_namespace ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf: [-]D[.DDD]e[+-]XX
  std::string s(buf);
  const bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int exp10 = std::atoi(s.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      std::string whole = digits.substr(0, std::min<size_t>(digits.size(), exp10 + 1));
      whole.append(static_cast<size_t>(exp10 + 1) - whole.size(), '0');
      const std::string frac =
          digits.size() > static_cast<size_t>(exp10 + 1) ? digits.substr(exp10 + 1) : "0";
      out += whole + "." + frac;
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp10 - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + exp;
}

namespace {

void AppendHex(unsigned value, int digits, const char* prefix, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, digits, value);
  *out += buf;
}

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += quote;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      AppendHex(c, 2, "\\x", &out);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f &&
               static_cast<unsigned char>(s[i + 1]) >= 0x80) {
      // U+0080..U+009F, not printable: Python writes \x80...
      AppendHex(static_cast<unsigned char>(s[i + 1]), 2, "\\x", &out);
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kString:
      return StringRepr(as_string());
    case Kind::kUndefined:
      return "Undefined";
    default:
      return Str();
  }
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return FloatRepr(as_double());
    case Kind::kString:
      return as_string();
    case Kind::kArray: {
      std::string out = tuple_ ? "(" : "[";
      bool first = true;
      for (const Value& v : as_array()) {
        if (!first) out += ", ";
        first = false;
        out += v.Repr();
      }
      if (tuple_ && as_array().size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = as_dict().is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += StringRepr(k) + ": " + v.Repr();
      }
      return out + (as_dict().is_namespace ? "}>" : "}");
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind() == Kind::kFloat || o.kind() == Kind::kFloat) return as_double() == o.as_double();
    return as_int() == o.as_int();
  }
  if (kind() != o.kind() || tuple_ != o.tuple_) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return as_string() == o.as_string();
    case Kind::kArray: {
      const Array &a = as_array(), &b = o.as_array();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].Equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict &a = as_dict(), &b = o.as_dict();
      if (a.is_namespace || b.is_namespace) return &a == &b;
      if (a.items.size() != b.items.size()) return false;
      for (const auto& [k, v] : a.items) {
        const Value* w = b.Find(k);
        if (w == nullptr || !v.Equals(*w)) return false;
      }
      return true;
    }
    case Kind::kFunction:
      return &as_function() == &o.as_function();
    default:
      return false;
  }
}

namespace {

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          AppendHex(c, 4, "\\u", out);
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

constexpr int kMaxJsonDepth = 512;

Status Json(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  if (depth > kMaxJsonDepth) return Status::InvalidArgument("tojson: nested too deeply");
  auto newline = [&](int level) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * level), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return Status::Ok();
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : FloatRepr(d);
      return Status::Ok();
    }
    case Value::Kind::kString:
      JsonString(v.as_string(), out);
      return Status::Ok();
    case Value::Kind::kArray: {
      const Array& a = v.as_array();
      if (a.empty()) {
        *out += "[]";
        return Status::Ok();
      }
      *out += "[";
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        SSMKIT_RETURN_IF_ERROR(Json(a[i], indent, sort_keys, depth + 1, out));
      }
      newline(depth);
      *out += "]";
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      if (items.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      *out += "{";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        JsonString(items[i]->first, out);
        *out += ": ";
        SSMKIT_RETURN_IF_ERROR(Json(items[i]->second, indent, sort_keys, depth + 1, out));
      }
      newline(depth);
      *out += "}";
      return Status::Ok();
    }
    default:
      return Status::InvalidArgument(std::string("tojson: Object of type ") + v.TypeName() +
                                     " is not JSON serializable");
  }
}

}  // namespace

Status ToJson(const Value& value, int indent, bool sort_keys, std::string* out) {
  return Json(value, indent, sort_keys, 0, out);
}

std::vector<char32_t> CodePoints(const std::string& s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; ok && k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      ok = (d & 0xc0) == 0x80;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (!ok) {
      // An invalid byte stands for itself, in a range no valid code point uses.
      cps.push_back(0x110000 + c);
      ++i;
      continue;
    }
    cps.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return cps;
}

std::string FromCodePoints(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    const char32_t c = cps[i];
    if (c >= 0x110000) {
      out += static_cast<char>(c - 0x110000);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

}  // namespace ssmkit::server::jinja

#include "model/config_reader.hpp"

#include <limits>

namespace ssmkit::model {

std::string QuoteNonFiniteTokens(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(token);
      if (text.compare(i, n, token) == 0) {
        out += '"';
        out += token;
        out += '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

Status Reader::Int(const char* key, int64_t* v, bool required) const {
  if (!Has(key)) return required ? Missing(key) : Status::Ok();
  const Json& x = j_.at(key);
  if (!x.is_number_integer() && !x.is_number_unsigned()) return Wrong(key, "an integer", x);
  *v = x.get<int64_t>();
  return Status::Ok();
}

Status Reader::Float(const char* key, float* v) const {
  if (!Has(key)) return Status::Ok();
  double d = 0;
  SSMKIT_RETURN_IF_ERROR(FloatValue(key, j_.at(key), &d));
  *v = static_cast<float>(d);
  return Status::Ok();
}

Status Reader::Double(const char* key, double* v) const {
  if (!Has(key)) return Status::Ok();
  return FloatValue(key, j_.at(key), v);
}

Status Reader::Bool(const char* key, bool* v) const {
  if (!Has(key)) return Status::Ok();
  const Json& x = j_.at(key);
  if (!x.is_boolean()) return Wrong(key, "true or false", x);
  *v = x.get<bool>();
  return Status::Ok();
}

Status Reader::String(const char* key, std::string* v) const {
  if (!Has(key)) return Status::Ok();
  const Json& x = j_.at(key);
  if (!x.is_string()) return Wrong(key, "a string", x);
  *v = x.get<std::string>();
  return Status::Ok();
}

Status Reader::TokenId(const char* key, int64_t* v) const {
  if (!Has(key)) return Status::Ok();
  const Json& x = j_.at(key);
  const Json& first = x.is_array() && !x.empty() ? x[0] : x;
  if (!first.is_number_integer() && !first.is_number_unsigned()) return Wrong(key, "a token id", x);
  *v = first.get<int64_t>();
  return Status::Ok();
}

Status Reader::FloatPair(const char* key, float* lo, float* hi) const {
  if (!Has(key)) return Status::Ok();
  const Json& x = j_.at(key);
  if (!x.is_array() || x.size() != 2) return Wrong(key, "a pair [min, max]", x);
  double a = 0, b = 0;
  SSMKIT_RETURN_IF_ERROR(FloatValue(key, x[0], &a));
  SSMKIT_RETURN_IF_ERROR(FloatValue(key, x[1], &b));
  *lo = static_cast<float>(a);
  *hi = static_cast<float>(b);
  return Status::Ok();
}

Status Reader::Expanded(const char* key, double expand, int64_t width, int64_t* product) const {
  const double p = expand * static_cast<double>(width);
  if (!(p >= 1.0 && p < 0x1p62)) {
    return Status::InvalidArgument(file_ + ": \"" + prefix_ + key +
                                   "\" times the model width: expected a product in [1, 2^62), "
                                   "given " +
                                   std::to_string(expand) + " * " + std::to_string(width));
  }
  *product = static_cast<int64_t>(p);
  return Status::Ok();
}

Status Reader::Missing(const char* key) const {
  return Status::InvalidArgument(file_ + ": missing key \"" + prefix_ + key + "\"");
}

Status Reader::Wrong(const char* key, const std::string& expected, const Json& given) const {
  return Status::InvalidArgument(file_ + ": \"" + prefix_ + key + "\": expected " + expected +
                                 ", given " + given.dump());
}

Status Reader::FloatValue(const char* key, const Json& x, double* v) const {
  if (x.is_number()) {
    *v = x.get<double>();
    return Status::Ok();
  }
  // transformers 5 writes inf as {"__float__": "Infinity"}; older versions as Infinity.
  const Json* text = &x;
  if (x.is_object() && x.contains("__float__")) text = &x.at("__float__");
  if (text->is_string()) {
    const std::string s = text->get<std::string>();
    if (s == "Infinity") *v = std::numeric_limits<double>::infinity();
    if (s == "-Infinity") *v = -std::numeric_limits<double>::infinity();
    if (s == "Infinity" || s == "-Infinity") return Status::Ok();
  }
  return Wrong(key, "a number", x);
}

}  // namespace ssmkit::model

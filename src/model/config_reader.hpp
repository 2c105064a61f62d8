// Typed access to the keys of a config.json object, with errors naming the file and the key;
// shared by the config readers of every model family (model/config*.cpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ssmkit/status.hpp"

namespace ssmkit::model {

using Json = nlohmann::json;

// Python's json module writes float('inf') and float('nan') as the bare tokens Infinity,
// -Infinity and NaN. Outside strings they become the strings "Infinity", ... so that the
// JSON parser accepts them; Reader::Float turns them back into numbers.
std::string QuoteNonFiniteTokens(const std::string& text);

class Reader {
 public:
  Reader(const Json& object, std::string file, std::string prefix = "")
      : j_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  const Json& json() const { return j_; }
  const std::string& file() const { return file_; }
  bool Has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  Status Int(const char* key, int64_t* v, bool required = false) const;
  Status Float(const char* key, float* v) const;
  Status Double(const char* key, double* v) const;
  Status Bool(const char* key, bool* v) const;
  Status String(const char* key, std::string* v) const;
  // An integer, or a list of integers (the first is taken): eos_token_id may be either.
  Status TokenId(const char* key, int64_t* v) const;
  // [min, max] floats.
  Status FloatPair(const char* key, float* lo, float* hi) const;
  // *product = expand * width (d_inner from the expansion factor at `key` and the model width),
  // checked before the conversion: an infinite, negative or huge product has no int64 value.
  Status Expanded(const char* key, double expand, int64_t width, int64_t* product) const;
  Status Missing(const char* key) const;
  Status Wrong(const char* key, const std::string& expected, const Json& given) const;
  Status Wrong(const char* key, const std::string& expected) const {
    return Wrong(key, expected, j_.at(key));
  }

 private:
  Status FloatValue(const char* key, const Json& x, double* v) const;

  const Json& j_;
  std::string file_;
  std::string prefix_;
};

}  // namespace ssmkit::model

// The values a Jinja template computes with, as Python's: undefined, None, bool, int, float,
// str (UTF-8; lengths and indices count code points, as Python's do), list, dict (insertion
// ordered), and callables (the globals such as range and namespace, and macros). Lists and
// dicts are shared by reference, as Python's are; a namespace is a dict whose attributes
// `set ns.x = ...` may assign.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit::server::jinja {

class Value;
using Array = std::vector<Value>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  bool is_namespace = false;
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value value);
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* Keyword(const std::string& name) const;
};

using Function = std::function<Status(const Args& args, Value* out)>;

struct Undefined {
  std::string name;  // what was looked up, for the error of using it
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kDict, kFunction };

  Value() : v_(Undefined{}) {}
  static Value None() { return Value(nullptr); }
  // A tuple: a list that prints as (a, b) and is never equal to a list, as Python's.
  static Value Tuple(Array a) {
    Value v(std::move(a));
    v.tuple_ = true;
    return v;
  }
  static Value MakeUndefined(std::string name) { return Value(Undefined{std::move(name)}); }
  explicit Value(Undefined u) : v_(std::move(u)) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::make_shared<Array>(std::move(a))) {}
  Value(Dict d) : v_(std::make_shared<Dict>(std::move(d))) {}
  Value(Function f) : v_(std::make_shared<Function>(std::move(f))) {}

  // JSON (request messages, tokenizer_config.json's tokens) to values: objects keep their order.
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt || kind() == Kind::kBool; }  // bool is int
  bool is_number() const { return is_int() || kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_tuple() const { return tuple_; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_function() const { return kind() == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;    // int or bool
  double as_double() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Array& as_array() const { return *std::get<std::shared_ptr<Array>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python's truth value.
  bool Truthy() const;
  // Python's str(): what {{ value }} prints (undefined prints nothing).
  std::string Str() const;
  // Python's repr() (inside lists and dicts).
  std::string Repr() const;
  // Python's ==.
  bool Equals(const Value& other) const;
  // Python's type name, for errors ("str", "int", "list", "dict", ...).
  const char* TypeName() const;

 private:
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<Array>, std::shared_ptr<Dict>, std::shared_ptr<Function>>
      v_;
  bool tuple_ = false;
};

// Python's repr() of a float: the shortest digits that read back to it ("0.1", "1.0",
// "1e+16", "inf", "nan").
std::string FloatRepr(double d);

// Python's json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys) (indent
// < 0: none), as transformers' tojson filter calls it.
Status ToJson(const Value& value, int indent, bool sort_keys, std::string* out);

// Code points of UTF-8 text (invalid bytes taken one by one), and back.
std::vector<char32_t> CodePoints(const std::string& s);
std::string FromCodePoints(const std::vector<char32_t>& cps, size_t begin, size_t end);
// Python's str.isspace() for one code point.
bool IsPythonSpace(char32_t c);

}  // namespace ssmkit::server::jinja

// Reader of GGUF (llama.cpp's single-file model format, versions 2 and 3):
//   "GGUF", u32 version, u64 tensor count, u64 metadata count,
//   metadata: {string key, u32 value type, value} (strings are u64 length + bytes; arrays are
//             u32 element type + u64 count + elements),
//   tensor infos: {string name, u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml type,
//                  u64 offset into the data section},
//   padding to `general.alignment` (default 32), then the data section.
// Files are memory-mapped; tensors are views into the map. Everything is checked before any
// tensor is used: every length against the bytes left (so a hostile count cannot make a huge
// allocation), types, dimensions (positive, at most 4, element count without overflow, the
// innermost a multiple of a quantized type's block), offsets aligned and inside the data,
// names and keys unique. Errors name the file and the key or tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* GgufTypeName(GgufType type);

// One metadata value. Scalars: integers in `integer` (u64 values above INT64_MAX are kept in
// `integer` as their two's complement and flagged by `is_unsigned`), floats in `real`, bools in
// `integer` (0 / 1), strings in `text`. Arrays: `element_type` and one of `texts`, `integers`,
// `reals` (bools as integers).
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType element_type = GgufType::kU8;  // arrays only
  bool is_unsigned = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;
  std::vector<std::string> texts;
  std::vector<int64_t> integers;
  std::vector<double> reals;

  bool is_integer() const;  // any integer type or bool
  bool is_real() const;     // f32 or f64
  int64_t array_size() const;
};

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;      // as stored (GGML's type ids)
  bool supported = false;      // a type this library reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, ...)
  DType dtype = DType::kF32;   // valid when supported
  std::vector<int64_t> shape;  // outermost first (ne reversed): a (M, K) matrix has ne (K, M)
  const uint8_t* data = nullptr;  // into the mapped file
  int64_t nbytes = 0;             // 0 for an unsupported type (its size is not known)
  uint64_t offset = 0;            // into the data section, as stored
};

// GGML's name of a type id ("q4_K", "f16", ...), or "type <id>".
std::string GgmlTypeName(uint32_t ggml_type);

class GgufFile {
 public:
  // Maps and checks `path`.
  static Status Open(const std::string& path, GgufFile* file);
  // Checks bytes already in memory (kept by the caller for the file's lifetime); `label` names
  // them in messages. Open and the fuzz target use it.
  static Status Parse(const uint8_t* data, size_t size, const std::string& label, GgufFile* file);

  uint32_t version() const { return version_; }
  int64_t alignment() const { return alignment_; }
  const std::string& label() const { return label_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* Find(const std::string& key) const;  // nullptr when absent
  const GgufTensor* FindTensor(const std::string& name) const;

  // Typed lookups: an absent key is an error ("<file>: metadata key 'k' is missing"), as is one
  // of another type ("... is a string, expected an integer").
  Status GetString(const std::string& key, std::string* value) const;
  Status GetInteger(const std::string& key, int64_t* value) const;  // any integer type
  Status GetReal(const std::string& key, double* value) const;      // f32, f64 or an integer
  Status GetBool(const std::string& key, bool* value) const;
  Status GetStrings(const std::string& key, const std::vector<std::string>** values) const;
  Status GetIntegers(const std::string& key, const std::vector<int64_t>** values) const;

 private:
  Status KeyError(const std::string& key, const std::string& what) const;

  MappedFile map_;
  std::string label_;
  uint32_t version_ = 0;
  int64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace ssmkit

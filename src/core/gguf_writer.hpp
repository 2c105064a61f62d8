// Writer of GGUF version 3 files (the format src/core/gguf.hpp reads): metadata key-value
// pairs and tensors, laid out as llama.cpp writes them (tensor data aligned to 32 bytes, in the
// order added). Used by `ssmkit quantize` and by the tests, which also break its output on
// purpose.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/gguf.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit {

class GgufWriter {
 public:
  uint32_t version = 3;
  uint32_t alignment = 32;  // written as general.alignment when not the default

  void AddU32(const std::string& key, uint32_t v);
  void AddI32(const std::string& key, int32_t v);
  void AddU64(const std::string& key, uint64_t v);
  void AddF32(const std::string& key, float v);
  void AddBool(const std::string& key, bool v);
  void AddString(const std::string& key, const std::string& v);
  void AddStrings(const std::string& key, const std::vector<std::string>& v);
  void AddI32s(const std::string& key, const std::vector<int32_t>& v);
  void AddF32s(const std::string& key, const std::vector<float>& v);
  // A value as read from another file (any type, arrays included).
  void AddValue(const std::string& key, const GgufValue& v);

  // A tensor of GGML type id `ggml_type`, shape outermost first (written as ne, innermost
  // first), and its bytes.
  void AddTensor(const std::string& name, uint32_t ggml_type, const std::vector<int64_t>& shape,
                 std::string bytes);

  // The value of the integer key `key` added so far (u8 to i64); false when there is none.
  bool FindInteger(const std::string& key, int64_t* value) const;

  std::string Bytes() const;
  Status Write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  void Kv(const std::string& key, GgufType type, const std::string& value);

  std::vector<std::string> kvs_;
  std::vector<Tensor> tensors_;
};

// GGML's type id of a dtype this library reads (F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, ...).
uint32_t GgmlTypeId(DType dtype);

}  // namespace ssmkit

// Reader of the safetensors format (Hugging Face): an 8-byte little-endian header length, a
// JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then
// the raw little-endian tensor bytes. Files are memory-mapped; tensors are views into the map.
// A checkpoint is one model.safetensors, or shards named by model.safetensors.index.json
// ({"weight_map": {tensor name: shard file}}).
//
// Tensors whose data is not aligned to their element size (the format does not require it) are
// copied to aligned memory; the others are used in place.
// Every header is checked before any tensor is used: the length against the file size, the
// JSON, each entry's dtype, shape and offsets (inside the data, and end - begin equal to the
// shape's element count times the dtype's size). Errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

struct SafetensorsTensor {
  std::string name;
  std::string file;           // the file it lives in, for messages
  std::string dtype_name;     // as written: "F32", "BF16", "F16", "I64", ...
  bool float_dtype = false;   // one of F32, BF16, F16 (the ones a model weight may have)
  DType dtype = DType::kF32;  // valid when float_dtype
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;

  int64_t numel() const;
  std::string shape_string() const;  // "(2, 3)"
  // A contiguous view (float dtypes only).
  Tensor view() const;
};

// The format's name of an unquantized dtype: "F32", "BF16", "F16", "I32", "I64"; nullptr for a
// quantized one, which the format does not hold.
const char* SafetensorsDTypeName(DType dtype);

// A contiguous row-major view of `data` with a shape held in a vector.
Tensor ContiguousView(const void* data, DType dtype, const std::vector<int64_t>& shape);

class SafetensorsCheckpoint {
 public:
  // A directory holding model.safetensors, or model.safetensors.index.json and its shards.
  static Status OpenDirectory(const std::string& dir, SafetensorsCheckpoint* checkpoint);
  // One safetensors file.
  static Status OpenFile(const std::string& path, SafetensorsCheckpoint* checkpoint);

  // nullptr when absent.
  const SafetensorsTensor* Find(const std::string& name) const;
  const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
  // The files read, for messages ("model.safetensors" or the shard list).
  std::string description() const;

 private:
  Status AddFile(const std::string& path, const std::map<std::string, std::string>* expected);
  Status AddFileUnchecked(const std::string& path,
                          const std::map<std::string, std::string>* expected);

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::unique_ptr<uint8_t[]>> copies_;  // aligned copies of misaligned tensors
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace ssmkit

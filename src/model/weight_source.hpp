// The one view the model reads its weights through: tensor name -> (dtype, shape, data). The
// safetensors checkpoint implements it (SafetensorsWeightSource), and a GGUF file
// (model/gguf_model.hpp) under the same names, without touching the blocks or the binding.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

struct WeightTensor {
  std::string name;
  std::string file;           // where it lives, for messages
  std::string dtype_name;     // as stored: "F32", "BF16", "F16", "I64", "q4_K", ...
  bool float_dtype = false;   // F32, BF16 or F16: the dtypes any weight may have
  bool quantized = false;     // a GGML block type (Q8_0, Q4_K, ...): matrices only
  DType dtype = DType::kF32;  // valid when float_dtype or quantized
  std::vector<int64_t> shape;
  const void* data = nullptr;

  int64_t numel() const;
  std::string shape_string() const;  // "(2, 3)"
  Tensor view() const;               // contiguous; float or quantized dtypes
};

// "(2, 3)", "(4,)": a shape as Python writes it, for messages.
std::string ShapeString(const std::vector<int64_t>& shape);
int64_t Numel(const std::vector<int64_t>& shape);

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // nullptr when absent (a lookup in tensors()).
  const WeightTensor* Find(const std::string& name) const;
  // Every tensor, by name (the binder rejects the ones the model does not use).
  virtual const std::map<std::string, WeightTensor>& tensors() const = 0;
  // The files read, for messages.
  virtual std::string description() const = 0;
};

// A safetensors checkpoint directory (model.safetensors, or the shards an index names); the
// tensors are views into the memory-mapped files, which this object keeps open.
class SafetensorsWeightSource final : public WeightSource {
 public:
  static Status Open(const std::string& dir, std::unique_ptr<WeightSource>* source);

  const std::map<std::string, WeightTensor>& tensors() const override { return tensors_; }
  std::string description() const override { return checkpoint_.description(); }

 private:
  SafetensorsCheckpoint checkpoint_;
  std::map<std::string, WeightTensor> tensors_;
};

// Tensors in the caller's memory (Model::FromTensors: a framework's parameters, borrowed, never
// copied): contiguous f32, bf16 or f16, under their checkpoint names.
class MemoryWeightSource final : public WeightSource {
 public:
  static Status Create(const std::map<std::string, Tensor>& tensors,
                       std::unique_ptr<WeightSource>* source);

  const std::map<std::string, WeightTensor>& tensors() const override { return tensors_; }
  std::string description() const override { return "tensors in memory"; }

 private:
  std::map<std::string, WeightTensor> tensors_;
};

}  // namespace ssmkit::model

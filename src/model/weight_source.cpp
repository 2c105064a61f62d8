#include "model/weight_source.hpp"

namespace ssmkit::model {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t WeightTensor::numel() const { return Numel(shape); }

std::string WeightTensor::shape_string() const { return ShapeString(shape); }

Tensor WeightTensor::view() const { return ContiguousView(data, dtype, shape); }

Status SafetensorsWeightSource::Open(const std::string& dir,
                                     std::unique_ptr<WeightSource>* source) {
  auto s = std::make_unique<SafetensorsWeightSource>();
  SSMKIT_RETURN_IF_ERROR(SafetensorsCheckpoint::OpenDirectory(dir, &s->checkpoint_));
  for (const auto& [name, t] : s->checkpoint_.tensors()) {
    WeightTensor w;
    w.name = name;
    w.file = t.file;
    w.dtype_name = t.dtype_name;
    w.float_dtype = t.float_dtype;
    w.dtype = t.dtype;
    w.shape = t.shape;
    w.data = t.data;
    s->tensors_.emplace(name, std::move(w));
  }
  *source = std::move(s);
  return Status::Ok();
}

const WeightTensor* WeightSource::Find(const std::string& name) const {
  const auto it = tensors().find(name);
  return it == tensors().end() ? nullptr : &it->second;
}

}  // namespace ssmkit::model

// MemoryWeightSource (model/weight_source.hpp): the caller's tensors as WeightTensors.
#include <string>

#include "core/safetensors.hpp"
#include "model/weight_source.hpp"

namespace ssmkit::model {

Status MemoryWeightSource::Create(const std::map<std::string, Tensor>& tensors,
                                  std::unique_ptr<WeightSource>* source) {
  auto s = std::make_unique<MemoryWeightSource>();
  for (const auto& [name, t] : tensors) {
    const std::string label = "tensors[" + name + "]";
    if (!t.defined()) return Status::InvalidArgument(label + ": no data");
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      return Status::InvalidArgument(label + ": dtype " + DTypeName(t.dtype) +
                                     ", expected f32, bf16 or f16");
    }
    if (!t.is_contiguous()) return Status::InvalidArgument(label + ": expected contiguous");
    if (t.device != Device::kCpu) return Status::InvalidArgument(label + ": expected CPU memory");
    WeightTensor w;
    w.name = name;
    w.file = "memory";
    w.dtype_name = SafetensorsDTypeName(t.dtype);  // the binder's messages use this spelling
    w.float_dtype = true;
    w.dtype = t.dtype;
    w.shape.assign(t.shape.begin(), t.shape.begin() + t.rank);
    w.data = t.data;
    s->tensors_.emplace(name, std::move(w));
  }
  *source = std::move(s);
  return Status::Ok();
}

}  // namespace ssmkit::model

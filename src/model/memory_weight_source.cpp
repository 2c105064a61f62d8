// MemoryWeightSource (model/weight_source.hpp): the caller's tensors as WeightTensors.
#include <string>

#include "model/weight_source.hpp"

namespace ssmkit::model {
namespace {

// The safetensors spelling of a float dtype, which the binder's messages use.
const char* StoredName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    default:
      return nullptr;
  }
}

}  // namespace

Status MemoryWeightSource::Create(const std::map<std::string, Tensor>& tensors,
                                  std::unique_ptr<WeightSource>* source) {
  auto s = std::make_unique<MemoryWeightSource>();
  for (const auto& [name, t] : tensors) {
    const std::string label = "tensors[" + name + "]";
    if (!t.defined()) return Status::InvalidArgument(label + ": no data");
    const char* stored = StoredName(t.dtype);
    if (stored == nullptr) {
      return Status::InvalidArgument(label + ": dtype " + DTypeName(t.dtype) +
                                     ", expected f32, bf16 or f16");
    }
    if (!t.is_contiguous()) return Status::InvalidArgument(label + ": expected contiguous");
    if (t.device != Device::kCpu) return Status::InvalidArgument(label + ": expected CPU memory");
    WeightTensor w;
    w.name = name;
    w.file = "memory";
    w.dtype_name = stored;
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

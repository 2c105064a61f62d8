#include "ops/check.hpp"

#include <string>

namespace ssmkit::check {

std::string ShapeWithLegend(ShapeSpec shape) {
  std::string s = std::string(shape.legend) + " = (";
  int i = 0;
  for (int64_t d : shape.dims) {
    if (i++) s += ", ";
    s += std::to_string(d);
  }
  return s + (shape.dims.size() == 1 ? ",)" : ")");
}

Status Mismatch(const char* op, const char* name, const std::string& expected,
                const std::string& given) {
  return Status::InvalidArgument(std::string(op) + ": " + name + ": expected " + expected +
                                 ", given " + given);
}

Status RankIn(const char* op, const char* name, const ssmkit::Tensor& t,
              std::initializer_list<int> ranks) {
  std::string expected = "rank ";
  int i = 0;
  for (int r : ranks) {
    if (r == t.rank) return Status::Ok();
    if (i++) expected += " or ";
    expected += std::to_string(r);
  }
  return Mismatch(op, name, expected, "rank " + std::to_string(t.rank) + " " + t.shape_string());
}

Status Devices(const char* op, std::initializer_list<NamedTensor> inputs,
               std::initializer_list<NamedTensor> outputs, Device* device) {
  return Devices(
      op, {std::span(inputs.begin(), inputs.size()), std::span(outputs.begin(), outputs.size())},
      device);
}

Status Devices(const char* op, std::initializer_list<std::span<const NamedTensor>> groups,
               Device* device) {
  int on_cuda = 0, on_cpu = 0;
  for (const auto& list : groups) {
    for (const NamedTensor& n : list) {
      if (n.tensor.defined()) (n.tensor.device == Device::kCuda ? on_cuda : on_cpu) += 1;
    }
  }
  *device = on_cuda > on_cpu ? Device::kCuda : Device::kCpu;
  auto name_of = [](Device d) -> std::string {
    if (d == Device::kCpu) return "a CPU tensor";
    if (d == Device::kCuda) return "a CUDA tensor";
    return "a tensor on unknown device " + std::to_string(static_cast<int>(d));
  };
  for (const auto& list : groups) {
    for (const NamedTensor& n : list) {
      if (n.tensor.defined() && n.tensor.device != *device) {
        return Mismatch(op, n.name, name_of(*device), name_of(n.tensor.device));
      }
    }
  }
  return Status::Ok();
}

Status Tensor(const char* op, const char* name, const ssmkit::Tensor& t, ShapeSpec shape,
              std::initializer_list<DType> dtypes) {
  if (!t.defined())
    return Mismatch(op, name, "a tensor of shape " + ShapeWithLegend(shape), "null");
  bool shape_ok = t.rank == static_cast<int>(shape.dims.size());
  int i = 0;
  for (int64_t d : shape.dims) shape_ok = shape_ok && t.shape[i++] == d;
  if (!shape_ok) return Mismatch(op, name, "shape " + ShapeWithLegend(shape), t.shape_string());
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || d == t.dtype;
  if (!dtype_ok) {  // the message is built only on failure: checks run on every decode step
    std::string allowed;
    for (DType d : dtypes) {
      if (!allowed.empty()) allowed += " or ";
      allowed += DTypeName(d);
    }
    return Mismatch(op, name, "dtype " + allowed, DTypeName(t.dtype));
  }
  for (int d = 0; d < t.rank; ++d) {
    if (t.strides[d] < 0) {
      return Mismatch(
          op, name, "non-negative strides",
          "stride " + std::to_string(t.strides[d]) + " on dimension " + std::to_string(d));
    }
  }
  if (t.rank > 0 && t.shape[t.rank - 1] > 1 && t.strides[t.rank - 1] != 1) {
    return Mismatch(op, name, "stride 1 on the last dimension",
                    "stride " + std::to_string(t.strides[t.rank - 1]));
  }
  return Status::Ok();
}

Status Optional(const char* op, const char* name, const ssmkit::Tensor& t, ShapeSpec shape,
                std::initializer_list<DType> dtypes) {
  return t.defined() ? Tensor(op, name, t, shape, dtypes) : Status::Ok();
}

Status AbsentWith(const char* op, const char* grad_name, const ssmkit::Tensor& grad,
                  const char* input_name) {
  if (!grad.defined()) return Status::Ok();
  return Mismatch(op, grad_name, std::string("no tensor, since ") + input_name + " is absent",
                  "a tensor of shape " + grad.shape_string());
}

Status GradLike(const char* op, const char* grad_name, const ssmkit::Tensor& grad,
                const char* input_name, const ssmkit::Tensor& input) {
  if (!input.defined()) return AbsentWith(op, grad_name, grad, input_name);
  if (!grad.defined()) return Status::Ok();
  const std::string legend = std::string("(as ") + input_name + ")";
  const ShapeSpec spec{legend.c_str(), {input.shape.begin(), input.shape.begin() + input.rank}};
  return Tensor(op, grad_name, grad, spec, {input.dtype});
}

}  // namespace ssmkit::check

#include "ssmkit/tensor.hpp"

namespace ssmkit {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
  }
  return "unknown";
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return 0;
  }
  return 0;
}

bool DTypeIsQuantized(DType dtype) { return DTypeBlockElements(dtype) > 1; }

int64_t DTypeBlockElements(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
    default:
      return 1;
  }
}

int64_t DTypeBlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return 2 + 32;
    case DType::kQ4_0:
      return 2 + 16;
    case DType::kQ4_K:
      return 2 + 2 + 12 + 128;
    case DType::kQ5_K:
      return 2 + 2 + 12 + 32 + 128;
    case DType::kQ6_K:
      return 128 + 64 + 16 + 2;
    case DType::kQ4_1:
      return 2 + 2 + 16;
    case DType::kQ5_0:
      return 2 + 4 + 16;
    case DType::kQ5_1:
      return 2 + 2 + 4 + 16;
    default:
      return DTypeSize(dtype);
  }
}

int64_t DTypeRowBytes(DType dtype, int64_t elements) {
  return elements / DTypeBlockElements(dtype) * DTypeBlockBytes(dtype);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (rank == 1 ? ",)" : ")");
}

Tensor Tensor::Contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device) {
  Tensor t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

}  // namespace ssmkit

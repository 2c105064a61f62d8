// A non-owning tensor view: pointer, dtype, shape and strides (in elements), device.
// Ops read and write through views; they never allocate or free the caller's memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace ssmkit {

// Floating dtypes carry data; the integer ones carry indices (seq_idx, state_batch_indices).
// The quantized ones are llama.cpp's (GGML's) block layouts for weight matrices: a row of K
// elements (K a multiple of the block) is K / DTypeBlockElements blocks of DTypeBlockBytes bytes
// each, the innermost dimension of the shape counting elements, not blocks. Only weights take
// them (a linear layer's matrix, an embedding table); docs/quantization.md gives the layouts.
enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kI32 = 3,
  kI64 = 4,
  kQ8_0 = 5,   // 32 elements: f16 scale, 32 x int8
  kQ4_0 = 6,   // 32 elements: f16 scale, 32 x 4 bit (offset 8)
  kQ4_K = 7,   // 256 elements: f16 scale and min, 8 x 6-bit sub-block scales and mins, 4 bit
  kQ5_K = 8,   // 256 elements: as Q4_K with a fifth bit per element
  kQ6_K = 9,   // 256 elements: f16 scale, 16 x int8 sub-block scales, 6 bit (offset 32)
  kQ4_1 = 10,  // 32 elements: f16 scale and min, 32 x 4 bit
  kQ5_0 = 11,  // 32 elements: f16 scale, 32 x 5 bit (offset 16)
  kQ5_1 = 12,  // 32 elements: f16 scale and min, 32 x 5 bit
};
// The last DType (DTypeFromName walks them all).
inline constexpr DType kLastDType = DType::kQ5_1;
enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

const char* DTypeName(DType dtype);
// Bytes per element of an unquantized dtype; 0 for a quantized one (use DTypeRowBytes).
int64_t DTypeSize(DType dtype);
bool DTypeIsQuantized(DType dtype);
int64_t DTypeBlockElements(DType dtype);  // 1 when not quantized
int64_t DTypeBlockBytes(DType dtype);     // DTypeSize when not quantized
// Bytes of `elements` consecutive elements (a multiple of the block when quantized).
int64_t DTypeRowBytes(DType dtype, int64_t elements);

inline constexpr int kMaxRank = 6;

struct Tensor {
  void* data = nullptr;  // nullptr: the tensor is absent (an optional input or output)
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements, not bytes
  Device device = Device::kCpu;

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  bool is_contiguous() const;        // row-major, densely packed
  std::string shape_string() const;  // "(2, 3, 4)"

  // A densely packed row-major view of `data`.
  static Tensor Contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                           Device device = Device::kCpu);
};

}  // namespace ssmkit

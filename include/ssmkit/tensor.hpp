// A non-owning tensor view: pointer, dtype, shape and strides (in elements), device.
// Ops read and write through views; they never allocate or free the caller's memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace ssmkit {

// Floating dtypes carry data; the integer ones carry indices (seq_idx, state_batch_indices).
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3, kI64 = 4 };
enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

const char* DTypeName(DType dtype);
int64_t DTypeSize(DType dtype);

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

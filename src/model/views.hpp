// Small helpers for the model code: strided f32 tensor views over its buffers, typed buffers for
// code that runs on either device (ActBuffer), and the layout changes between token-major (T, C)
// and channel-major (C, T) activations.
// Dimension legend: T tokens (B * L), C channels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "core/transpose.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

// A view of f32 data with the given shape and strides (in elements).
inline Tensor View(const float* data, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides) {
  Tensor t;
  t.data = const_cast<float*>(data);
  t.dtype = DType::kF32;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  i = 0;
  for (int64_t s : strides) t.strides[i++] = s;
  return t;
}

// A (rows, cols) f32 matrix with row stride ld (row-major).
inline Tensor Rows(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  return View(data, {rows, cols}, {ld, 1});
}

// A (rows, cols) f32 matrix stored column by column, column stride ld: the transpose of a
// row-major (cols, rows) buffer.
inline Tensor Columns(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  return View(data, {rows, cols}, {1, ld});
}

// Activations of one dtype on one device: the decode step carves its views out of it by element
// offsets, so the same code builds f32 views of host memory on the CPU and bf16 views of device
// memory on the GPU (model/gpu_decoder.cpp).
struct ActBuffer {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;

  // The buffer from element `elements` on.
  ActBuffer operator+(int64_t elements) const {
    return {static_cast<char*>(data) + elements * DTypeSize(dtype), dtype, device};
  }
  Tensor View(std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) const {
    Tensor t = model::View(nullptr, shape, strides);
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    return t;
  }
  // A (rows, cols) matrix with row stride ld.
  Tensor Rows(int64_t rows, int64_t cols, int64_t ld) const { return View({rows, cols}, {ld, 1}); }
  // The data as host f32, for the code that runs on the CPU only (the caller checks on_host()).
  float* f32() const { return static_cast<float*>(data); }
  bool on_host() const { return device == Device::kCpu && dtype == DType::kF32; }
};

// Host f32 memory as an ActBuffer.
inline ActBuffer HostF32(const float* data) {
  return {const_cast<float*>(data), DType::kF32, Device::kCpu};
}

}  // namespace ssmkit::model

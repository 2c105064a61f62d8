// Tensor views over the trainer's f32 buffers, and the small loops that glue ops together.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "ssmkit/tensor.hpp"

namespace ssmkit::train {

// An f32 view with explicit strides (in elements). `data` may be const: the ops take views
// of inputs through the same struct and never write them.
inline Tensor F32View(const float* data, std::initializer_list<int64_t> shape,
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

inline Tensor F32Contiguous(const float* data, std::initializer_list<int64_t> shape) {
  return Tensor::Contiguous(data, DType::kF32, shape);
}

// dst[i] += src[i].
void AddInto(float* dst, const float* src, int64_t n);

// A = -exp(A_log), elementwise; dA_log += dA * A (the chain rule through it).
void NegExp(const float* A_log, int64_t n, float* A);
void AccumulateDALog(const float* dA, const float* A, int64_t n, float* dA_log);

// Between token-major rows and channel-major planes, per batch entry:
//   dst[b, c, l] = src[(b * L + l) * ld_src + c]   for c < C         (ToChannels)
//   dst[(b * L + l) * ld_dst + c] = src[b, c, l]                      (ToTokens)
void ToChannels(const float* src, int64_t ld_src, int64_t batch, int64_t seqlen, int64_t channels,
                float* dst);
void ToTokens(const float* src, int64_t batch, int64_t seqlen, int64_t channels, float* dst,
              int64_t ld_dst);

}  // namespace ssmkit::train

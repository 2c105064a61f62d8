// Tensor views over the trainer's f32 buffers, and the small loops that glue ops together.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "model/views.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::train {

using model::View;

// Strided views come from the engine's model::View (src/model/views.hpp); a contiguous one:
inline Tensor F32Contiguous(const float* data, std::initializer_list<int64_t> shape) {
  return Tensor::Contiguous(data, DType::kF32, shape);
}

// Sizes an activation buffer to n floats; allocates only when the size changes (a new batch
// or sequence length), so the steps of a run reuse their buffers.
inline void Resize(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) v.resize(static_cast<size_t>(n));
}

// dst[i] += src[i].
void AddInto(float* dst, const float* src, int64_t n);

// dst[i] = src[i] * scale (dst may be src: in place). A scale of 1 copies the bits.
void ScaleInto(const float* src, int64_t n, float scale, float* dst);

// A = -exp(A_log), elementwise; dA_log += dA * A (the chain rule through it).
void NegExp(const float* A_log, int64_t n, float* A);
void AccumulateDALog(const float* dA, const float* A, int64_t n, float* dA_log);

// Between token-major rows and channel-major planes, per batch entry (split over threads by
// batch entry; ToTokens also writes into a strided destination, e.g. columns of a wider row):
//   dst[b, c, l] = src[(b * L + l) * ld_src + c]   for c < C         (ToChannels)
//   dst[(b * L + l) * ld_dst + c] = src[b, c, l]                      (ToTokens)
void ToChannels(const float* src, int64_t ld_src, int64_t batch, int64_t seqlen, int64_t channels,
                float* dst);
void ToTokens(const float* src, int64_t batch, int64_t seqlen, int64_t channels, float* dst,
              int64_t ld_dst);

}  // namespace ssmkit::train

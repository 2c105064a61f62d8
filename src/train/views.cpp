#include "train/views.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "model/views.hpp"

namespace ssmkit::train {

void AddInto(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void ScaleInto(const float* src, int64_t n, float scale, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
}

void NegExp(const float* A_log, int64_t n, float* A) {
  for (int64_t i = 0; i < n; ++i) A[i] = -std::exp(A_log[i]);
}

void AccumulateDALog(const float* dA, const float* A, int64_t n, float* dA_log) {
  for (int64_t i = 0; i < n; ++i) dA_log[i] += dA[i] * A[i];
}

void ToChannels(const float* src, int64_t ld_src, int64_t batch, int64_t seqlen, int64_t channels,
                float* dst) {
  ParallelFor(batch, [&](int64_t begin, int64_t end, int) {
    for (int64_t b = begin; b < end; ++b) {
      Transpose(src + b * seqlen * ld_src, ld_src, seqlen, channels, dst + b * channels * seqlen,
                seqlen);
    }
  });
}

void ToTokens(const float* src, int64_t batch, int64_t seqlen, int64_t channels, float* dst,
              int64_t ld_dst) {
  ParallelFor(batch, [&](int64_t begin, int64_t end, int) {
    for (int64_t b = begin; b < end; ++b) {
      Transpose(src + b * channels * seqlen, seqlen, channels, seqlen, dst + b * seqlen * ld_dst,
                ld_dst);
    }
  });
}

}  // namespace ssmkit::train

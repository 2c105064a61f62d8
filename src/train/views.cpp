#include "train/views.hpp"

#include <algorithm>
#include <cmath>

#include "core/parallel.hpp"
#include "model/views.hpp"

namespace ssmkit::train {

void AddInto(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
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
      model::TransposeToChannels(src + b * seqlen * ld_src, ld_src, seqlen, channels,
                                 dst + b * channels * seqlen);
    }
  });
}

// Tiles of 32 positions x 32 channels keep the strided side in cache; each (batch entry,
// position tile) is one unit of parallel work.
void ToTokens(const float* src, int64_t batch, int64_t seqlen, int64_t channels, float* dst,
              int64_t ld_dst) {
  constexpr int64_t kTile = 32;
  const int64_t tiles = (seqlen + kTile - 1) / kTile;
  ParallelFor(batch * tiles, [&](int64_t begin, int64_t end, int) {
    for (int64_t job = begin; job < end; ++job) {
      const int64_t b = job / tiles, l0 = (job % tiles) * kTile;
      const int64_t l1 = std::min(seqlen, l0 + kTile);
      for (int64_t c0 = 0; c0 < channels; c0 += kTile) {
        const int64_t c1 = std::min(channels, c0 + kTile);
        for (int64_t l = l0; l < l1; ++l) {
          float* out = dst + (b * seqlen + l) * ld_dst;
          for (int64_t c = c0; c < c1; ++c) out[c] = src[(b * channels + c) * seqlen + l];
        }
      }
    }
  });
}

}  // namespace ssmkit::train

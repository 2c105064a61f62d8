// A tiled transpose of f32 matrices in host memory, for moving between token-major (T, C) and
// channel-major (C, T) layouts.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ssmkit {

// dst (cols, rows) with row stride ldd = the transpose of src (rows, cols) with row stride lds,
// in cache-sized tiles.
inline void Transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst,
                      int64_t ldd) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
      }
    }
  }
}

}  // namespace ssmkit

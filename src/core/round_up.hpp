// Integer rounding of sizes and paddings, for every backend: how many m-sized pieces cover n
// (chunks, tiles, thread blocks), and n rounded up to whole pieces (vectors, cache lines,
// allocation granules). Host code only: the CUDA kernels' own int helpers stay in their files.
#pragma once

#include <cstdint>

namespace ssmkit {

// The number of m-sized pieces that cover n, for n >= 0 and m > 0.
constexpr int64_t CeilDiv(int64_t n, int64_t m) { return (n + m - 1) / m; }

// n rounded up to a multiple of m, for n >= 0 and m > 0.
constexpr int64_t RoundUp(int64_t n, int64_t m) { return CeilDiv(n, m) * m; }

}  // namespace ssmkit

// The bytes of the next block of weight rows, fetched into L2 a few cache lines at each step
// along K of the tiles that multiply the current block, so that memory traffic overlaps the
// multiply-adds (the few-rows kernels: linear_gemv.cpp, linear_bf16_rows.cpp). Spread over the
// steps rather than issued at each tile's start: at T = 8, where one tile of x rows reads a
// block and each start issued ~150 lines at once, a product of m2-130m's in_proj took
// 0.44-0.47 ms that way and 0.28-0.29 ms spread (Zen 4, 2 threads, docs/benchmarks.md); at
// T = 32 the two measured alike.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ssmkit::cpu {

class SpreadPrefetch {
 public:
  // The bytes [begin, end) over `steps` calls of Step.
  SpreadPrefetch(const void* begin, const void* end, int64_t steps)
      : next_(static_cast<const char*>(begin)), end_(static_cast<const char*>(end)) {
    const int64_t lines = (end_ - next_ + 63) / 64;
    lines_per_step_ = (lines + std::max<int64_t>(1, steps) - 1) / std::max<int64_t>(1, steps);
  }

  void Step() {
    for (int64_t i = 0; i < lines_per_step_ && next_ < end_; ++i, next_ += 64) {
      __builtin_prefetch(next_, /*rw=*/0, /*locality=*/2);
    }
  }

 private:
  const char* next_;
  const char* end_;
  int64_t lines_per_step_ = 0;
};

}  // namespace ssmkit::cpu

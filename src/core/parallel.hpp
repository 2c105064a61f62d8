// One parallel_for for the whole library. The range [0, n) is cut into NumThreads()
// contiguous blocks, block t always going to thread t: the split depends only on n and the
// thread count, which is what makes per-thread partial sums reproducible bit for bit.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "ssmkit/threads.hpp"

namespace ssmkit {

// Returns the number of blocks ParallelFor(n, ...) will use.
inline int ParallelBlocks(int64_t n) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(n, NumThreads())));
}

// fn(begin, end, block): block in [0, ParallelBlocks(n)). fn must not throw.
template <class Fn>
void ParallelFor(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int blocks = ParallelBlocks(n);
  if (blocks == 1) {
    fn(int64_t{0}, n, 0);
    return;
  }
#pragma omp parallel for num_threads(blocks) schedule(static, 1)
  for (int t = 0; t < blocks; ++t) {
    const int64_t begin = n * t / blocks;
    const int64_t end = n * (t + 1) / blocks;
    fn(begin, end, t);
  }
}

}  // namespace ssmkit

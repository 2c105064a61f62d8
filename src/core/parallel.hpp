// One parallel_for for the whole library. The range [0, n) is cut into NumThreads()
// contiguous blocks: the split depends only on n and the thread count, which is what makes
// per-block partial sums reproducible bit for bit. The blocks run on the library's own worker
// pool (core/thread_pool.hpp) or on a host's (include/ssmkit/executor.hpp), each in the
// caller's floating-point mode; any thread may run block t, and the bits stay the same.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/executor_run.hpp"
#include "core/float_mode.hpp"
#include "core/thread_pool.hpp"
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
  // Every block computes in the caller's floating-point mode (core/float_mode.hpp: denormals
  // flushed or not), whichever thread runs it, so the bits do not depend on the split.
  const uint64_t mode = CurrentFloatMode();
  auto run_block = [&](int t) {
    ScopedFloatMode in_callers_mode(mode);
    fn(n * t / blocks, n * (t + 1) / blocks, t);
  };
  const auto body = [](void* ctx, int t) { (*static_cast<decltype(run_block)*>(ctx))(t); };
  // A host's thread pool installed on this thread (ScopedExecutor) takes the same blocks.
  if (Executor* executor = CurrentExecutor()) {
    RunBlocks(*executor, blocks, body, &run_block);
  } else {
    RunOnLibraryPool(blocks, body, &run_block);
  }
}

}  // namespace ssmkit

// One parallel_for for the whole library. The range [0, n) is cut into NumThreads()
// contiguous blocks: the split depends only on n and the thread count, which is what makes
// per-block partial sums reproducible bit for bit. The blocks run on the library's own worker
// pool (core/thread_pool.hpp) or on a host's (include/ssmkit/executor.hpp), each in the
// caller's floating-point mode; any thread may run block t, and the bits stay the same.
// ParallelForBalanced, for work whose items are each computed whole by one call, also lets a
// thread done early take chunks of the others' blocks.
#pragma once

#include <algorithm>
#include <atomic>
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

// The chunks of ParallelForBalanced's block of `units` units: halving sizes (1/2, 1/4, ... of
// the block) while a half is at least `min_chunk`, then chunks of min_chunk (the last shorter).
// The boundaries depend only on units and min_chunk.
class HalvingChunks {
 public:
  HalvingChunks(int64_t units, int64_t min_chunk)
      : units_(units), min_(std::max<int64_t>(1, min_chunk)) {
    while ((units_ >> (halvings_ + 1)) >= min_) ++halvings_;
    tail_ = units_ >> halvings_;
  }
  int64_t count() const { return halvings_ + (tail_ + min_ - 1) / min_; }
  // Chunk c's [begin, end) within the block.
  int64_t begin(int64_t c) const {
    return c < halvings_ ? units_ - (units_ >> c) : units_ - tail_ + (c - halvings_) * min_;
  }
  int64_t end(int64_t c) const { return c + 1 < count() ? begin(c + 1) : units_; }

 private:
  int64_t units_, min_, halvings_ = 0, tail_ = 0;
};

// ParallelFor's blocks cut into chunks (HalvingChunks, at least min_chunk long) that a thread
// done with its own block's takes from the other blocks: when the threads run at different
// speeds (a core shared with another process, or slower to reach memory) the faster one does
// more, and no thread waits for the last block by more than a chunk. Each thread takes its own
// block's chunks in order, the largest first, so it streams one run of memory as under
// ParallelFor. fn(begin, end, block) as ParallelFor's, called once per chunk: block is the
// block of the thread that runs the chunk (at most one call per block at a time, for buffers
// per block). The chunk boundaries depend only on n, min_chunk and the thread count, but which
// thread runs a chunk does not: only for work whose results do not depend on that (each
// element computed by one call, whatever the thread). One block (one thread), or more than
// kMaxBalancedBlocks, runs as ParallelFor: one call per block. fn must not throw.
inline constexpr int kMaxBalancedBlocks = 64;
template <class Fn>
void ParallelForBalanced(int64_t n, int64_t min_chunk, Fn&& fn) {
  const int blocks = ParallelBlocks(n);
  if (blocks == 1 || blocks > kMaxBalancedBlocks) return ParallelFor(n, fn);
  struct alignas(64) NextChunk {
    std::atomic<int64_t> value{0};
  };
  NextChunk next[kMaxBalancedBlocks];  // per block: the next of its chunks to take
  ParallelFor(blocks, [&](int64_t first, int64_t last, int block) {
    for (int64_t own = first; own < last; ++own) {
      for (int64_t k = 0; k < blocks; ++k) {
        const int64_t b = (own + k) % blocks, begin = n * b / blocks, end = n * (b + 1) / blocks;
        const HalvingChunks chunks(end - begin, min_chunk);
        for (int64_t c;
             (c = next[b].value.fetch_add(1, std::memory_order_relaxed)) < chunks.count();)
          fn(begin + chunks.begin(c), begin + chunks.end(c), block);
      }
    }
  });
}

}  // namespace ssmkit

// The floating-point mode of the kernels (core/float_mode.hpp): FlushDenormals sets and
// restores this thread's mode, and every block of a parallel region runs in the caller's mode,
// on whichever thread takes it, so a kernel's bits do not depend on the thread count.
#include "core/float_mode.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/parallel.hpp"
#include "gtest/gtest.h"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

bool Flushing() { return (CurrentFloatMode() & kFlushDenormalBits) == kFlushDenormalBits; }

TEST(FloatMode, FlushDenormalsSetsAndRestores) {
  if (kFlushDenormalBits == 0) GTEST_SKIP() << "no denormal mode known on this architecture";
  const uint64_t before = CurrentFloatMode();
  ASSERT_FALSE(Flushing()) << "the test thread starts in the default mode";
  {
    FlushDenormals flush;
    EXPECT_TRUE(Flushing());
    // Flushed, the product of two normal floats below the normal range is zero.
    volatile float tiny = 1e-20f;
    EXPECT_EQ(tiny * tiny, 0.0f);
  }
  EXPECT_EQ(CurrentFloatMode(), before);
  volatile float tiny = 1e-20f;
  EXPECT_GT(tiny * tiny, 0.0f);  // a denormal again
}

struct BlockModes {
  int flushing = 0;          // blocks that ran flushing
  int on_other_threads = 0;  // blocks the calling thread did not run
};

// Each of n blocks waits (up to a second) until all have started, so that the pool's workers
// take some of them rather than the caller running all, then records its mode and thread.
BlockModes RecordBlockModes(int64_t n) {
  std::vector<std::atomic<int>> flushing(static_cast<size_t>(n)), elsewhere(static_cast<size_t>(n));
  std::atomic<int64_t> started{0};
  const std::thread::id caller = std::this_thread::get_id();
  ParallelFor(n, [&](int64_t begin, int64_t end, int) {
    started += end - begin;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (started.load() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    for (int64_t i = begin; i < end; ++i) {
      flushing[static_cast<size_t>(i)] = Flushing() ? 1 : 0;
      elsewhere[static_cast<size_t>(i)] = std::this_thread::get_id() != caller ? 1 : 0;
    }
  });
  BlockModes modes;
  for (int64_t i = 0; i < n; ++i) {
    modes.flushing += flushing[static_cast<size_t>(i)].load();
    modes.on_other_threads += elsewhere[static_cast<size_t>(i)].load();
  }
  return modes;
}

TEST(FloatMode, ParallelBlocksRunInTheCallersMode) {
  if (kFlushDenormalBits == 0) GTEST_SKIP() << "no denormal mode known on this architecture";
  const int threads = NumThreads();
  SetNumThreads(4);
  constexpr int64_t kBlocks = 4;
  for (int round = 0; round < 3; ++round) {
    {
      FlushDenormals flush;
      const BlockModes modes = RecordBlockModes(kBlocks);
      ASSERT_GT(modes.on_other_threads, 0) << "round " << round << ": no worker took a block";
      EXPECT_EQ(modes.flushing, kBlocks) << "round " << round;
    }
    // The workers went back to their own mode: none flushes for a caller that does not.
    const BlockModes modes = RecordBlockModes(kBlocks);
    ASSERT_GT(modes.on_other_threads, 0) << "round " << round << ": no worker took a block";
    EXPECT_EQ(modes.flushing, 0) << "round " << round;
  }
  SetNumThreads(threads);
}

}  // namespace
}  // namespace ssmkit::testing

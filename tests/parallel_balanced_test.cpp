// ParallelForBalanced (src/core/parallel.hpp): the chunks of a block tile it in halving sizes,
// every index runs exactly once in one of those chunks whatever the thread count, no block id
// is in use by two calls at once, and a thread done with its own block takes the chunks of a
// block whose owner is slow.
#include "core/parallel.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

class ParallelBalancedTest : public ::testing::Test {
 protected:
  void TearDown() override { SetNumThreads(0); }
};

TEST_F(ParallelBalancedTest, ChunksTileTheBlockInHalvingSizes) {
  for (int64_t units : {1, 2, 3, 7, 31, 32, 33, 100, 1536, 50280}) {
    for (int64_t min_chunk : {1, 2, 5, 32, 64, 200000}) {
      SCOPED_TRACE(::testing::Message() << "units " << units << " min_chunk " << min_chunk);
      const HalvingChunks chunks(units, min_chunk);
      ASSERT_GE(chunks.count(), 1);
      EXPECT_EQ(chunks.begin(0), 0);
      EXPECT_EQ(chunks.end(chunks.count() - 1), units);
      int64_t previous = units + 1;
      for (int64_t c = 0; c < chunks.count(); ++c) {
        const int64_t size = chunks.end(c) - chunks.begin(c);
        EXPECT_GT(size, 0) << "chunk " << c;
        if (c + 1 < chunks.count()) {
          EXPECT_EQ(chunks.end(c), chunks.begin(c + 1));
          // Every chunk but the last is at least min_chunk (or the whole block), none larger
          // than the one before it.
          EXPECT_GE(size, std::min(units, min_chunk)) << "chunk " << c;
        }
        EXPECT_LE(size, previous) << "chunk " << c;
        previous = size;
      }
      // The first chunk is half the block (rounded up) when halves are long enough.
      if (units / 2 >= min_chunk) EXPECT_EQ(chunks.end(0), units - units / 2);
    }
  }
}

// Runs ParallelForBalanced(n, min_chunk) and checks each call: its range is one chunk of the
// blocks ParallelFor would make (the block itself at one block or past kMaxBalancedBlocks), its
// block id valid and not in use by another call.
std::vector<int> Visits(int64_t n, int64_t min_chunk, bool* as_promised) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  const int blocks = ParallelBlocks(n);
  std::set<std::pair<int64_t, int64_t>> chunks;
  for (int b = 0; b < blocks; ++b) {
    const int64_t begin = n * b / blocks, end = n * (b + 1) / blocks;
    if (blocks == 1 || blocks > kMaxBalancedBlocks) {
      chunks.insert({begin, end});
      continue;
    }
    const HalvingChunks c(end - begin, min_chunk);
    for (int64_t i = 0; i < c.count(); ++i) chunks.insert({begin + c.begin(i), begin + c.end(i)});
  }
  std::vector<std::atomic<int>> in_use(static_cast<size_t>(blocks));
  std::atomic<bool> ok{true};
  ParallelForBalanced(n, min_chunk, [&](int64_t begin, int64_t end, int block) {
    if (block < 0 || block >= blocks || chunks.count({begin, end}) != 1) {
      ok = false;
      return;
    }
    if (in_use[static_cast<size_t>(block)].fetch_add(1) != 0) ok = false;
    for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)].fetch_add(1);
    in_use[static_cast<size_t>(block)].fetch_sub(1);
  });
  *as_promised = ok;
  std::vector<int> out;
  for (auto& v : visits) out.push_back(v.load());
  return out;
}

TEST_F(ParallelBalancedTest, EveryIndexOnceInItsChunksForEveryThreadCount) {
  for (int threads : {1, 2, 3, 5, 8, 17, 65}) {
    SetNumThreads(threads);
    for (int64_t n : {1, 2, 3, 7, 16, 100, 1001, 3072}) {
      for (int64_t min_chunk : {1, 4, 32}) {
        SCOPED_TRACE(::testing::Message()
                     << "threads " << threads << " n " << n << " min_chunk " << min_chunk);
        bool as_promised = false;
        EXPECT_EQ(Visits(n, min_chunk, &as_promised), std::vector<int>(static_cast<size_t>(n), 1));
        EXPECT_TRUE(as_promised);
      }
    }
  }
}

// Block 1's first chunk (half of it) sleeps: whichever thread runs it, the rest of block 1 must
// be taken by the thread running block 0 (calls with block id 0 inside block 1's range) instead
// of waiting for the sleeper.
TEST_F(ParallelBalancedTest, ADoneThreadTakesTheChunksOfASlowBlock) {
  SetNumThreads(2);
  const int64_t n = 1000, half = n / 2;
  std::atomic<int64_t> taken{0};
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  ParallelForBalanced(n, 10, [&](int64_t begin, int64_t end, int block) {
    if (begin == half) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (block == 0 && begin >= half) taken.fetch_add(end - begin);
    for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[static_cast<size_t>(i)].load(), 1) << i;
  // Block 1 is [500, 1000): its first chunk [500, 750) sleeps; the other 250 indices go to block
  // 0's thread (all 500 when that thread reached block 1 before any other did).
  EXPECT_GE(taken.load(), n - half - (n - half + 1) / 2);
}

}  // namespace
}  // namespace ssmkit::testing

// The library's worker pool behind ParallelFor (src/core/thread_pool.hpp): every block runs
// exactly once whatever the thread count, blocks really run in parallel, callers on many host
// threads at once and nested loops are served, a forked child gets working loops, and idle
// workers sleep instead of spinning.
#include "core/thread_pool.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/parallel.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

class ThreadPoolTest : public ::testing::Test {
 protected:
  void TearDown() override { SetNumThreads(0); }
};

// How many times ParallelFor(n) visited each index, and whether each block got the range the
// split promises.
std::vector<int> Visits(int64_t n, bool* blocks_as_promised) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<bool> ok{true};
  const int blocks = ParallelBlocks(n);
  ParallelFor(n, [&](int64_t begin, int64_t end, int block) {
    if (begin != n * block / blocks || end != n * (block + 1) / blocks) ok = false;
    for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)].fetch_add(1);
  });
  *blocks_as_promised = ok;
  std::vector<int> out;
  for (auto& v : visits) out.push_back(v.load());
  return out;
}

TEST_F(ThreadPoolTest, EveryIndexOnceForEveryThreadCount) {
  // 300: more blocks than the pool has workers (255), so some blocks have no home thread.
  for (int threads : {1, 2, 3, 5, 8, 17, 300}) {
    SetNumThreads(threads);
    for (int64_t n : {1, 2, 3, 7, 16, 100, 1001}) {
      SCOPED_TRACE(::testing::Message() << "threads " << threads << " n " << n);
      bool as_promised = false;
      EXPECT_EQ(Visits(n, &as_promised), std::vector<int>(static_cast<size_t>(n), 1));
      EXPECT_TRUE(as_promised);
    }
  }
}

// Block 0 waits until block 1 has started: only a second thread can start it, since the
// caller is busy in block 0. A pool that ran the blocks one after another would never finish
// block 0: the wait gives up after 60 s and this returns false.
bool BlocksRanInParallel() {
  std::atomic<bool> second_started{false}, gave_up{false};
  ParallelFor(2, [&](int64_t, int64_t, int block) {
    if (block == 1) {
      second_started = true;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!second_started) {
      if (std::chrono::steady_clock::now() > deadline) {
        gave_up = true;
        return;
      }
      std::this_thread::yield();
    }
  });
  return !gave_up;
}

TEST_F(ThreadPoolTest, BlocksRunInParallel) {
  SetNumThreads(2);
  for (int round = 0; round < 50; ++round) ASSERT_TRUE(BlocksRanInParallel()) << "round " << round;
}

// Many host threads calling at once (a server's sessions, Python threads, BEAM schedulers):
// one gets the pool, the others run their blocks themselves; every sum is right.
TEST_F(ThreadPoolTest, ConcurrentCallersEachGetTheirSums) {
  SetNumThreads(3);
  constexpr int kCallers = 8, kCalls = 300;
  constexpr int64_t n = 997;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int call = 0; call < kCalls; ++call) {
        std::vector<int64_t> partial(static_cast<size_t>(ParallelBlocks(n)), 0);
        ParallelFor(n, [&](int64_t begin, int64_t end, int block) {
          for (int64_t i = begin; i < end; ++i) partial[static_cast<size_t>(block)] += i + c;
        });
        int64_t sum = 0;
        for (int64_t p : partial) sum += p;
        if (sum != n * (n - 1) / 2 + n * c) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ThreadPoolTest, NestedLoopsRunInsideTheirBlock) {
  SetNumThreads(4);
  constexpr int64_t outer = 6, inner = 50;
  std::vector<std::atomic<int>> visits(outer * inner);
  ParallelFor(outer, [&](int64_t b0, int64_t b1, int) {
    for (int64_t o = b0; o < b1; ++o) {
      ParallelFor(inner, [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) visits[static_cast<size_t>(o * inner + i)].fetch_add(1);
      });
    }
  });
  for (auto& v : visits) EXPECT_EQ(v.load(), 1);
}

// A child forked after the pool started (Python's multiprocessing, a server's workers) has
// none of its parent's worker threads; its loops must still run, in parallel.
TEST_F(ThreadPoolTest, ForkedChildRunsParallelLoops) {
  SetNumThreads(2);
  // The parent's worker exists and has run a block, so it is past its start-up when the fork
  // comes: a thread starting under ASan holds the sanitizer allocator's lock for a moment, and
  // GCC 12's runtime does not release it in the child, whose own workers would then block.
  ASSERT_TRUE(BlocksRanInParallel());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool parallel = BlocksRanInParallel();
    bool child_ok = false;
    const bool visits_ok = Visits(1000, &child_ok) == std::vector<int>(1000, 1);
    _exit(parallel && visits_ok && child_ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Between calls the workers spin for kSpinMicros, then sleep: a process idle for half a second
// after a parallel loop uses next to no CPU (a spinning worker would use the whole 0.5 s).
TEST_F(ThreadPoolTest, IdleWorkersSleep) {
  SetNumThreads(4);
  bool as_promised = false;
  Visits(1000, &as_promised);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past every worker's spin
  const double before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LT(ProcessCpuSeconds() - before, 0.1);
}

}  // namespace
}  // namespace ssmkit::testing

// The library's worker pool (thread_pool.hpp): one job at a time, bounded spinning then futex
// sleeps (C++20 atomic wait / notify) on both sides.
//
// Blocks have homes: the caller runs block 0 and worker w block w + 1 when each gets to it,
// and whoever is done early takes the blocks still unclaimed, the next ones after its home
// first. A job's blocks then stay on the same cores from call to call (ParallelFor makes one
// block per thread), so data a block reads and writes every call (a decode step's state, a
// small network's weights) stays in that core's cache. With blocks claimed in order from a
// shared counter, whichever thread came first took block 0: on an Intel Xeon (2 MB of L2 a
// core) the m2-130m decode step (786 KB of state) took 15-17 us on 2 threads against 18 us on
// one; with homes, 10 us.
//
// The job word packs the job's generation (48 bits) and its block count (16). Block k is
// claimed for generation g by a compare-and-swap of claimed_[k] from a smaller generation to
// g, so a thread holding a stale word (an earlier job) claims nothing: every block of that
// job was claimed before the next job was published, and generations only grow. The job's
// body and context are read after a successful claim; they cannot have been replaced by then,
// since the next job is published only after every block of this one, the claimed one
// included, has finished.
#include "core/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ssmkit {
namespace {

using Body = void (*)(void* ctx, int block);

constexpr int kBlockBits = 16;
constexpr uint64_t kBlockMask = (uint64_t{1} << kBlockBits) - 1;
constexpr int kMaxWorkers = 255;
// Blocks past kMaxWorkers + 1 have no home: whoever is free claims them. A call with more
// blocks than this (a thread count above it) runs on the caller alone. Tuned for memory only
// (one cache line per block).
constexpr int kMaxBlocks = 1024;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Spins until done() holds or kSpinMicros have passed; returns done().
template <class Done>
bool SpinUntil(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 1;; ++i) {
    if (done()) return true;
    CpuRelax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

uint64_t Generation(uint64_t word) { return word >> kBlockBits; }
int BlockCount(uint64_t word) { return static_cast<int>(word & kBlockMask); }

class Pool {
 public:
  // False when the pool is serving another call or `blocks` is beyond what a word holds.
  bool TryRun(int blocks, Body body, void* ctx) {
    if (blocks > kMaxBlocks || busy_.test_and_set(std::memory_order_acquire)) return false;
    EnsureWorkers(std::min(blocks - 1, kMaxWorkers));
    done_.store(0, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    const uint64_t generation = ++last_generation_;
    const uint64_t word = (generation << kBlockBits) | static_cast<uint64_t>(blocks);
    job_.store(word, std::memory_order_release);
    generation_.store(static_cast<uint32_t>(generation));
    if (sleepers_.load() > 0) generation_.notify_all();
    Drain(word, 0);
    WaitForBlocks(static_cast<uint32_t>(blocks));
    busy_.clear(std::memory_order_release);
    return true;
  }

 private:
  // Called by the caller holding busy_.
  void EnsureWorkers(int wanted) {
    if (workers_ >= wanted) return;
    // Workers take no signals: a host (Python, the BEAM, a game) expects them on its threads.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    for (; workers_ < wanted; ++workers_) {
      try {
        // The worker starts from the generation before the job about to be published, so it
        // joins that job however late the OS starts it.
        std::thread([this, seen = static_cast<uint32_t>(last_generation_), home = workers_ + 1] {
          WorkerLoop(seen, home);
        }).detach();
      } catch (const std::system_error&) {
        break;  // no more threads: the blocks nobody claims run on the caller
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  [[noreturn]] void WorkerLoop(uint32_t seen, int home) {
    for (;;) {
      if (!SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1);
        while (generation_.load() == seen) generation_.wait(seen);
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load(std::memory_order_acquire);
      Drain(job_.load(std::memory_order_acquire), home);
    }
  }

  // Claims and runs the blocks of `word`'s job no other thread has claimed: `home` first, then
  // the ones after it in turn.
  void Drain(uint64_t word, int home) {
    const uint64_t generation = Generation(word);
    const int blocks = BlockCount(word);
    for (int i = 0; i < blocks; ++i) {
      const int block = (home + i) % blocks;
      if (!Claim(block, generation)) continue;
      body_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), block);
      if (done_.fetch_add(1) + 1 == static_cast<uint32_t>(blocks) && caller_sleeping_.load()) {
        done_.notify_one();
      }
    }
  }

  bool Claim(int block, uint64_t generation) {
    std::atomic<uint64_t>& claimed = claimed_[static_cast<size_t>(block)].generation;
    uint64_t seen = claimed.load(std::memory_order_acquire);
    while (seen < generation) {
      if (claimed.compare_exchange_weak(seen, generation, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        return true;
      }
    }
    return false;
  }

  // The caller's wait for blocks other threads claimed. The seq_cst store of caller_sleeping_
  // before its last look at done_, against the finisher's seq_cst increment of done_ before
  // its look at caller_sleeping_, means one of them sees the other: no lost wake-up.
  void WaitForBlocks(uint32_t blocks) {
    if (SpinUntil([&] { return done_.load(std::memory_order_acquire) == blocks; })) return;
    caller_sleeping_.store(true);
    for (uint32_t done = done_.load(); done != blocks; done = done_.load()) done_.wait(done);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }

  // One cache line per block: the threads claiming neighbouring blocks do not share one.
  struct alignas(64) ClaimedBy {
    std::atomic<uint64_t> generation{0};
  };

  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  uint64_t last_generation_ = 0;  // written by the caller holding busy_
  std::atomic<uint64_t> job_{0};
  std::array<ClaimedBy, kMaxBlocks> claimed_{};
  // The futex idle workers sleep on: the generation's low 32 bits.
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> done_{0};  // blocks of the current job finished
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<Body> body_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  int workers_ = 0;  // written by the caller holding busy_
};

// Never destroyed: detached workers may still be asleep in it when the process exits.
std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_pool_once;

// Also run in a forked child, which has none of the parent's workers (and perhaps a job the
// parent was running frozen mid-way): it starts over with a pool of its own.
void MakePool() { g_pool.store(new Pool); }

Pool& ThePool() {
  std::call_once(g_pool_once, [] {
    MakePool();
    pthread_atfork(nullptr, nullptr, MakePool);
  });
  return *g_pool.load();
}

}  // namespace

void RunOnLibraryPool(int blocks, Body body, void* ctx) {
  if (blocks <= 1 || !ThePool().TryRun(blocks, body, ctx)) {
    for (int block = 0; block < blocks; ++block) body(ctx, block);
  }
}

}  // namespace ssmkit

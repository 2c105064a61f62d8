// The library's worker pool (thread_pool.hpp): one job at a time, blocks claimed from a shared
// word, bounded spinning then futex sleeps (C++20 atomic wait / notify) on both sides.
//
// The claim word packs the job's generation (32 bits), its block count (16) and the next
// unclaimed block (16). A thread claims block k of generation g by a compare-and-swap from
// (g, blocks, k) to (g, blocks, k + 1), so a thread holding a stale word (an earlier job) can
// never claim anything: its swap fails. The job's body and context are read after a successful
// claim; they cannot have been replaced by then, since the next job is published only after
// every block of this one, the claimed one included, has finished.
#include "core/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>
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

constexpr int kFieldBits = 16;
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
constexpr int kMaxBlocks = static_cast<int>(kFieldMask);  // more run on the caller alone
constexpr int kMaxWorkers = 255;

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

uint64_t Generation(uint64_t word) { return word >> (2 * kFieldBits); }
int BlockCount(uint64_t word) { return static_cast<int>((word >> kFieldBits) & kFieldMask); }
int NextBlock(uint64_t word) { return static_cast<int>(word & kFieldMask); }

class Pool {
 public:
  // False when the pool is serving another call or `blocks` is beyond what a word holds.
  bool TryRun(int blocks, Body body, void* ctx) {
    if (blocks > kMaxBlocks || busy_.test_and_set(std::memory_order_acquire)) return false;
    EnsureWorkers(std::min(blocks - 1, kMaxWorkers));
    done_.store(0, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    const uint32_t generation = ++last_generation_;
    const uint64_t word =
        (uint64_t{generation} << (2 * kFieldBits)) | (static_cast<uint64_t>(blocks) << kFieldBits);
    claim_.store(word, std::memory_order_release);
    generation_.store(generation);
    if (sleepers_.load() > 0) generation_.notify_all();
    Drain(word);
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
        std::thread([this, seen = last_generation_] { WorkerLoop(seen); }).detach();
      } catch (const std::system_error&) {
        break;  // no more threads: the blocks nobody claims run on the caller
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  [[noreturn]] void WorkerLoop(uint32_t seen) {
    for (;;) {
      if (!SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1);
        while (generation_.load() == seen) generation_.wait(seen);
        sleepers_.fetch_sub(1);
      }
      seen = generation_.load(std::memory_order_acquire);
      Drain(claim_.load(std::memory_order_acquire));
    }
  }

  // Claims and runs blocks of `word`'s job until none is left unclaimed or a new job appears.
  void Drain(uint64_t word) {
    const uint64_t generation = Generation(word);
    while (Generation(word) == generation && NextBlock(word) < BlockCount(word)) {
      if (!claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;  // `word` now holds the current claim word
      }
      const int blocks = BlockCount(word);
      body_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), NextBlock(word));
      if (done_.fetch_add(1) + 1 == static_cast<uint32_t>(blocks) && caller_sleeping_.load()) {
        done_.notify_one();
      }
      word = claim_.load(std::memory_order_acquire);
    }
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

  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  uint32_t last_generation_ = 0;  // written by the caller holding busy_
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> generation_{0};  // the futex idle workers sleep on
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

// ParallelFor's blocks run on a host's thread pool (include/ssmkit/executor.hpp).
//
// Every worker, the calling thread included, claims the next unclaimed block from a shared
// counter until none is left. The caller then waits only for blocks already claimed, which are
// running, never for a scheduled task to start: if the pool is busy (or is the caller's own
// pool, all of whose threads wait), the caller ends up running every block itself. A task that
// starts after the call has returned finds the counter spent and touches nothing but the shared
// state it co-owns.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/executor_run.hpp"

namespace ssmkit {
namespace {

thread_local Executor* t_executor = nullptr;

struct BlockRun {
  Executor* executor = nullptr;
  int blocks = 0;
  void (*body)(void* ctx, int block) = nullptr;
  void* ctx = nullptr;
  std::atomic<int> next{0};
  std::atomic<int> done{0};
  std::mutex mutex;
  std::condition_variable all_done;
};

void Drain(BlockRun& run) {
  ScopedExecutor scope(run.executor);  // a nested ParallelFor goes to the same pool
  for (int block = run.next.fetch_add(1); block < run.blocks; block = run.next.fetch_add(1)) {
    run.body(run.ctx, block);
    if (run.done.fetch_add(1) + 1 == run.blocks) {
      std::lock_guard<std::mutex> lock(run.mutex);
      run.all_done.notify_all();
    }
  }
}

}  // namespace

ScopedExecutor::ScopedExecutor(Executor* executor) : previous_(t_executor) {
  t_executor = executor;
}

ScopedExecutor::~ScopedExecutor() { t_executor = previous_; }

Executor* CurrentExecutor() { return t_executor; }

void RunBlocks(Executor& executor, int blocks, void (*body)(void* ctx, int block), void* ctx) {
  auto run = std::make_shared<BlockRun>();
  run->executor = &executor;
  run->blocks = blocks;
  run->body = body;
  run->ctx = ctx;
  try {
    for (int i = 1; i < blocks; ++i) executor.Schedule([run] { Drain(*run); });
  } catch (...) {
    // A pool that cannot take more tasks: the blocks not taken run on this thread.
  }
  Drain(*run);
  std::unique_lock<std::mutex> lock(run->mutex);
  run->all_done.wait(lock, [&] { return run->done.load() == blocks; });
}

}  // namespace ssmkit

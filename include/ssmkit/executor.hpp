// A host's thread pool for the library's parallel loops. By default every op splits its work
// over NumThreads() threads of the library's own pool. A host that owns a thread pool of its own
// (XLA's intra-op pool in the JAX FFI handlers, an Erlang or Tokio runtime) can install it for the
// calls made on one thread, so that its threads and ours do not fight over the cores.
//
// The work split does not change: ParallelFor still cuts [0, n) into the same NumThreads()
// blocks, so results stay bit-identical to the library's own pool. Only who runs each block
// changes.
#pragma once

#include <functional>

namespace ssmkit {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `task` at some later time on any thread of the pool (or right away on the calling
  // thread). The library never waits for a scheduled task to start: the calling thread claims
  // any block no pool thread has taken yet, so a busy or single-threaded pool cannot deadlock.
  virtual void Schedule(std::function<void()> task) = 0;
};

// Installs `executor` for the ParallelFor calls made by this thread while the object lives
// (and by the pool threads while they run those calls' blocks). Nests; not movable.
class ScopedExecutor {
 public:
  explicit ScopedExecutor(Executor* executor);
  ~ScopedExecutor();
  ScopedExecutor(const ScopedExecutor&) = delete;
  ScopedExecutor& operator=(const ScopedExecutor&) = delete;

 private:
  Executor* previous_;
};

// The executor installed on this thread, or nullptr (the library's own pool).
Executor* CurrentExecutor();

}  // namespace ssmkit

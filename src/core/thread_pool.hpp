// The library's own worker threads, which run ParallelFor's blocks when no host executor is
// installed (include/ssmkit/executor.hpp).
//
// Why not OpenMP: libgomp's team barriers spin for ~300k iterations before they sleep, so on a
// machine whose cores other processes also use, a thread waiting at a barrier burns the time
// slice its partner needs, and a 2-thread op ran 16-40x slower than on one thread
// (docs/benchmarks.md, "Shared cores"). A library runs beside games, servers, the BEAM, XLA and
// torch; it cannot ask them to set OMP_WAIT_POLICY. Here every wait spins for a bounded time
// (kSpinMicros) and then sleeps on a futex, and the calling thread claims every block no worker
// has started, so a worker that the OS has not scheduled costs the call nothing: at worst the
// caller runs all blocks itself, as one thread would.
#pragma once

namespace ssmkit {

// Runs body(ctx, block) for every block in [0, blocks) on the calling thread and the pool's
// workers, and returns when all have finished. Each block has a home thread (block 0 the
// caller, block w + 1 worker w) that runs it unless another thread, done early, got to it
// first; results never depend on which thread ran a block. A call made while the pool is
// serving another call (a second host thread, or a ParallelFor nested inside a block) runs its
// blocks on the calling thread. body must not throw.
void RunOnLibraryPool(int blocks, void (*body)(void* ctx, int block), void* ctx);

// How long an idle worker, or a caller whose last block runs elsewhere, spins before it
// sleeps. Long enough to cover the gap between the ops of one decode step, short enough that a
// waiting thread gives its core back to whoever else needs it. Tuned for speed; does not
// affect results.
inline constexpr int kSpinMicros = 50;

}  // namespace ssmkit

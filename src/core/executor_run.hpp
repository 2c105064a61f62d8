// The part of the executor hook that ParallelFor calls (include/ssmkit/executor.hpp).
#pragma once

#include "ssmkit/executor.hpp"

namespace ssmkit {

// Runs body(ctx, block) for every block in [0, blocks) on `executor`'s threads and the calling
// thread, and returns when all have finished. body must not throw.
void RunBlocks(Executor& executor, int blocks, void (*body)(void* ctx, int block), void* ctx);

}  // namespace ssmkit

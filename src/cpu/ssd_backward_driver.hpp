// The backward driver shared by both CPU SSD algorithms: packs B and C, splits the work into
// tasks (b, g, head block) (TaskSplit), runs an algorithm's per-task work on every thread with
// per-thread gradient partials, then reduces the partials in a fixed order into dB, dC, dA,
// ddt_bias and dD. The algorithms differ only in the per-task work.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to a multiple of 16.
#pragma once

#include <cstdint>
#include <functional>

#include "cpu/ssd_common.hpp"

namespace ssmkit::cpu::ssd {

// Where one task writes its share of the gradients that are summed over tasks or batch rows.
struct TaskGrads {
  float* dB;        // (L, Nn): this task's dB partial, zeroed before the task runs
  float* dC;        // (L, Nn): this task's dC partial, zeroed before the task runs
  float* dA;        // (B, H): entry b * H + h for each head h of the task
  float* ddt_bias;  // (B, H): as dA
  float* dD;        // (B, H, P): row b * H + h for each head h of the task
};

// One task: heads [h_begin, h_end) of group g in batch row b.
struct BackwardTask {
  const PackedBC& B;  // (B, G, L, Nn) rows
  const PackedBC& C;
  int64_t b, g, h_begin, h_end;
  TaskGrads grads;
};

// Runs `task` on every task of the split, from ParallelFor's threads (concurrently, so it must
// keep its scratch per thread), then reduces the partials into p's gradients. dx, ddt, dz and
// dinitial_states are the task's to write: each belongs to one head.
void RunBackwardTasks(const SsdBwdParams& p, const std::function<void(const BackwardTask&)>& task);

}  // namespace ssmkit::cpu::ssd

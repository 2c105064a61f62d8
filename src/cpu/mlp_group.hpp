// A group of MLPs, each applied to its own rows: the kernel under both ops. A dense MLP is a
// group of one (a chunk of its rows); a mixture of experts is a group of its active experts
// (each on the rows gathered for it) plus the shared expert. All members' work runs in the
// same parallel regions, split over threads by cost, so many small experts keep every thread
// busy as well as one large MLP.
// Dimension legend: R rows of a member, d model width, F a member's hidden width.
#pragma once

#include <cstdint>
#include <span>

#include "params/mlp_params.hpp"
#include "ssmkit/mlp.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

struct MlpMember {
  MlpWeightParams weights;
  int64_t rows = 0;          // R >= 1
  const float* x = nullptr;  // (R, d)
  int64_t x_stride = 0;
  const float* gate_add = nullptr;  // (R, F) or null
  int64_t gate_add_stride = 0;
  const float* up_add = nullptr;  // (R, F) or null
  int64_t up_add_stride = 0;

  // Forward: y = (down(h)) * down_multiplier.
  float* y = nullptr;  // (R, d)
  int64_t y_stride = 0;

  // Backward. The gradient reaching this member's output is rw[r] dy[r, :], rw = 1 when
  // row_weight is null (MoE routing weights otherwise).
  const float* dy = nullptr;  // (R, d)
  int64_t dy_stride = 0;
  const float* row_weight = nullptr;  // (R) or null
  float* drow_weight = nullptr;  // (R), with row_weight: overwritten by <dy[r], y_unweighted[r]>
  float* dx = nullptr;           // (R, d) or null: overwritten
  int64_t dx_stride = 0;
  float* dgate_add = nullptr;  // (R, F) or null: overwritten
  int64_t dgate_add_stride = 0;
  float* dup_add = nullptr;  // (R, F) or null: overwritten
  int64_t dup_add_stride = 0;
  MlpWeightGradParams grads;  // null entries not wanted
};

// y of every member. Internal workspace (the calling thread's, kept between calls).
Status MlpGroupForward(int64_t d, const MlpOptions& options, std::span<const MlpMember> members);

// The gradients of every member. Weight gradients are added to what the grads hold when
// `accumulate`, overwritten otherwise.
Status MlpGroupBackward(int64_t d, const MlpOptions& options, std::span<const MlpMember> members,
                        bool accumulate);

// Rows per chunk for a member of hidden width F: bounds the workspace whatever T is. Tuned
// for speed only.
int64_t MlpChunkRows(int64_t d, int64_t hidden);

}  // namespace ssmkit::cpu

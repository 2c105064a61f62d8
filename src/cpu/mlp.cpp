// CPU MLP: the rows in chunks of MlpChunkRows, each chunk a group of one member (the whole
// kernel is in mlp_group.cpp). Dimension legend: T rows, d model width, F hidden width.
// Weight gradients are overwritten by the first chunk and accumulated by the next ones, in
// chunk order (the chunks depend only on the shapes: deterministic).
#include <algorithm>

#include "cpu/mlp.hpp"
#include "cpu/mlp_group.hpp"

namespace ssmkit::cpu {
namespace {

// The member for rows [t0, t0 + rows) of p.
MlpMember ChunkMember(const MlpParams& p, int64_t t0, int64_t rows) {
  MlpMember m;
  m.weights = p.weights;
  m.rows = rows;
  m.x = p.x + t0 * p.x_stride;
  m.x_stride = p.x_stride;
  if (p.gate_add != nullptr) m.gate_add = p.gate_add + t0 * p.gate_add_stride;
  m.gate_add_stride = p.gate_add_stride;
  if (p.up_add != nullptr) m.up_add = p.up_add + t0 * p.up_add_stride;
  m.up_add_stride = p.up_add_stride;
  return m;
}

}  // namespace

Status MlpForward(const MlpParams& p) {
  const int64_t chunk = MlpChunkRows(p.model, p.weights.hidden);
  for (int64_t t0 = 0; t0 < p.rows; t0 += chunk) {
    MlpMember m = ChunkMember(p, t0, std::min(chunk, p.rows - t0));
    m.y = p.out + t0 * p.out_stride;
    m.y_stride = p.out_stride;
    SSMKIT_RETURN_IF_ERROR(MlpGroupForward(p.model, p.options, {&m, 1}));
  }
  return Status::Ok();
}

Status MlpBackward(const MlpBackwardParams& p) {
  const int64_t chunk = MlpChunkRows(p.model, p.weights.hidden);
  for (int64_t t0 = 0; t0 < p.rows; t0 += chunk) {
    MlpMember m = ChunkMember(p, t0, std::min(chunk, p.rows - t0));
    m.dy = p.dout + t0 * p.dout_stride;
    m.dy_stride = p.dout_stride;
    if (p.dx != nullptr) m.dx = p.dx + t0 * p.dx_stride;
    m.dx_stride = p.dx_stride;
    if (p.dgate_add != nullptr) m.dgate_add = p.dgate_add + t0 * p.dgate_add_stride;
    m.dgate_add_stride = p.dgate_add_stride;
    if (p.dup_add != nullptr) m.dup_add = p.dup_add + t0 * p.dup_add_stride;
    m.dup_add_stride = p.dup_add_stride;
    m.grads = p.grads;
    SSMKIT_RETURN_IF_ERROR(MlpGroupBackward(p.model, p.options, {&m, 1}, /*accumulate=*/t0 > 0));
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu

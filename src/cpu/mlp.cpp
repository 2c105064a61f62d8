// CPU MLP: the rows in chunks of MlpChunkRows, each chunk a group of one member (the whole
// kernel is in mlp_group.cpp). Dimension legend: T rows, d model width, F hidden width.
// Weight gradients are overwritten by the first chunk and accumulated by the next ones, in
// chunk order (the chunks depend only on the shapes: deterministic).
#include <algorithm>

#include "cpu/mlp.hpp"
#include "cpu/mlp_group.hpp"

namespace ssmkit::cpu {
namespace {

// Row t0 of a row-strided matrix, or null for an absent one.
template <class T>
T* RowAt(T* m, int64_t t0, int64_t stride) {
  return m != nullptr ? m + t0 * stride : nullptr;
}

// The member for rows [t0, t0 + rows) of p.
MlpMember ChunkMember(const MlpParams& p, int64_t t0, int64_t rows) {
  MlpMember m;
  m.weights = p.weights;
  m.rows = rows;
  m.x_stride = p.x_stride;
  m.x = RowAt(p.x, t0, p.x_stride);
  m.gate_add_stride = p.gate_add_stride;
  m.gate_add = RowAt(p.gate_add, t0, p.gate_add_stride);
  m.up_add_stride = p.up_add_stride;
  m.up_add = RowAt(p.up_add, t0, p.up_add_stride);
  return m;
}

}  // namespace

Status MlpForward(const MlpParams& p) {
  const int64_t chunk = MlpChunkRows(p.model, p.weights.hidden);
  for (int64_t t0 = 0; t0 < p.rows; t0 += chunk) {
    MlpMember m = ChunkMember(p, t0, std::min(chunk, p.rows - t0));
    m.y_stride = p.out_stride;
    m.y = RowAt(p.out, t0, p.out_stride);
    SSMKIT_RETURN_IF_ERROR(MlpGroupForward(p.model, p.options, {&m, 1}));
  }
  return Status::Ok();
}

Status MlpBackward(const MlpBackwardParams& p) {
  const int64_t chunk = MlpChunkRows(p.model, p.weights.hidden);
  for (int64_t t0 = 0; t0 < p.rows; t0 += chunk) {
    MlpMember m = ChunkMember(p, t0, std::min(chunk, p.rows - t0));
    m.dy_stride = p.dout_stride;
    m.dy = RowAt(p.dout, t0, p.dout_stride);
    m.dx_stride = p.dx_stride;
    m.dx = RowAt(p.dx, t0, p.dx_stride);
    m.dgate_add_stride = p.dgate_add_stride;
    m.dgate_add = RowAt(p.dgate_add, t0, p.dgate_add_stride);
    m.dup_add_stride = p.dup_add_stride;
    m.dup_add = RowAt(p.dup_add, t0, p.dup_add_stride);
    m.grads = p.grads;
    SSMKIT_RETURN_IF_ERROR(MlpGroupBackward(p.model, p.options, {&m, 1}, /*accumulate=*/t0 > 0));
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu

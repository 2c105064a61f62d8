// The elementwise passes of the MLP kernels over a block of hidden values (Highway, dispatched
// at run time). Dimension legend: R rows of the block, C hidden features of the block (a
// column range of F). Every matrix is row-strided with contiguous columns.
#pragma once

#include <cstdint>

#include "ssmkit/mlp.hpp"

namespace ssmkit::cpu {

struct HiddenBlock {
  int64_t rows = 0, cols = 0;  // R, C
  float* gate = nullptr;       // (R, C): gate(x) + bias; null when ungated
  int64_t gate_stride = 0;
  const float* gate_add = nullptr;  // (R, C) or null
  int64_t gate_add_stride = 0;
  float* up = nullptr;  // (R, C): up(x) + bias
  int64_t up_stride = 0;
  const float* up_add = nullptr;  // (R, C) or null
  int64_t up_add_stride = 0;
};

// h = act(a) u (gated; a = (gate + gate_add) gm, u = up + up_add) or act(u) (ungated), into
// h (R, C), which may be the gate or up matrix itself (same stride). keep_pre: also write a
// back into gate and u into up (the backward needs them); h must then be a third matrix.
void ActivateForward(const HiddenBlock& b, const MlpOptions& options, float* h, int64_t h_stride,
                     bool keep_pre);

// From a, u (as ActivateForward left them with keep_pre) and dh (R, C): gated, du = dh act(a)
// into up and dg = dh u act'(a) gm into gate; ungated, du = dh act'(u) into up.
void ActivateBackward(const HiddenBlock& b, const MlpOptions& options, const float* dh,
                      int64_t dh_stride);

// Routing weights in the backward: drw[r] += sum_c h[r, c] dh[r, c], then h and dh rows are
// scaled by rw[r]. Each row's dot product is summed in a fixed order (deterministic).
void DotAndScaleRows(int64_t rows, int64_t cols, float* h, int64_t h_stride, float* dh,
                     int64_t dh_stride, const float* rw, float* drw);

}  // namespace ssmkit::cpu

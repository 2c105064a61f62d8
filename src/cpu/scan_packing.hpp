// Packing shared by the CPU selective-scan forward and backward: B, C and A are re-laid out
// once per call as f32 rows of Np floats (N rounded up to the vector width, zero padded), so
// the step loop reads one aligned vector run per time step whatever the input form and dtype.
// Dimension legend: B batch, D channels, L length, N state size, Np padded N, G groups.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/selective_scan_params.hpp"

namespace ssmkit::cpu {

inline int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// B or C packed as (Bv, G, Lv, Np): Bv = batch and Lv = L for the variable forms, 1 for the
// constant form (where G = D). Padded lanes are zero, so they add nothing to any sum.
struct PackedBC {
  std::vector<float> data;
  int64_t groups = 1, padded_state = 0, rows_per_group = 1;  // rows_per_group = Lv
  bool is_variable = false;
  int64_t channels_per_group = 1;

  // The first of this (b, d)'s rows; the row of step l is row + l * TimeStep().
  const float* Row(int64_t b, int64_t d) const {
    // The common forms skip the 64-bit divide, which costs more than a decode step's update.
    const int64_t g = groups == 1 ? 0 : (channels_per_group == 1 ? d : d / channels_per_group);
    const int64_t bv = is_variable ? b : 0;
    return data.data() + ((bv * groups + g) * rows_per_group) * padded_state;
  }
  int64_t TimeStep() const { return is_variable ? padded_state : 0; }
};

PackedBC PackBC(const BCView& v, const SelectiveScanParams& p, int64_t padded_state);

// One (b, d) row's per-step scalars in f32, each padded to a multiple of the vector width.
struct RowBuffers {
  std::vector<float> u, delta_in, dt, dtu, ddt_ddelta, y, z;  // (Lp)
  explicit RowBuffers(int64_t padded_len)
      : u(padded_len), delta_in(padded_len), dt(padded_len), dtu(padded_len),
        ddt_ddelta(padded_len), y(padded_len), z(padded_len) {}
};

// One row's gradient scratch for the backward, padded like RowBuffers.
struct RowGrads {
  std::vector<float> dout, dy, dz, du, ddelta;  // (Lp)
  explicit RowGrads(int64_t padded_len)
      : dout(padded_len), dy(padded_len), dz(padded_len), du(padded_len), ddelta(padded_len) {}
};

// Channel d's (B, D, N) state row (h0, a final state or a gradient of one) to dst[n * step],
// zeros where the tensor is absent; step 1 fills a row's own (Np) buffer, step W a column of an
// (N, W) channel tile.
inline void LoadState(const F32View& v, int64_t b, int64_t d, int64_t N, float* dst, int64_t step) {
  for (int64_t n = 0; n < N; ++n) {
    dst[n * step] = v.data ? v.data[b * v.stride_batch + d * v.stride_dim + n * v.stride_state] : 0.0f;
  }
}

// The reverse of LoadState, when the tensor is present.
inline void StoreState(const F32View& v, int64_t b, int64_t d, int64_t N, const float* src, int64_t step) {
  if (!v.data) return;
  for (int64_t n = 0; n < N; ++n) v.data[b * v.stride_batch + d * v.stride_dim + n * v.stride_state] = src[n * step];
}

// A (D, N) as (D, Np), zero padded.
std::vector<float> PackA(const F32View& A, const SelectiveScanParams& p, int64_t padded_state);

}  // namespace ssmkit::cpu

// Packing shared by the CPU selective-scan forward and backward: B, C and A are re-laid out
// once per call as f32 rows of Np floats (N rounded up to the vector width, zero padded), so
// the step loop reads one aligned vector run per time step whatever the input form and dtype.
// Dimension legend: B batch, D channels, L length, N state size, Np padded N, G groups.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/round_up.hpp"
#include "cpu/thread_scratch.hpp"
#include "params/selective_scan_params.hpp"

namespace ssmkit::cpu {

// Np, the padded length of a packed B, C or A row, for vector width `lanes`: a whole number of
// vectors, and at least N rounded up to 4, because the channel-tiled paths step the states in
// groups of 4 (scan_block-inl.h, PaddedStates) and read that many entries of every row. On the
// 1-lane HWY_SCALAR target the two differ: with Np = N those reads ran into the next step's row.
inline int64_t PackedStateStride(int64_t dstate, int64_t lanes) {
  return RoundUp(dstate, std::max<int64_t>(lanes, 4));
}

// Row (b, d) of a (B, D, N) state view v (final_state, dinitial_state, a chunk-state entry)
// from the first N floats of h; nothing when v is absent.
inline void StoreStateRow(const F32View& v, int64_t b, int64_t d, const float* h, int64_t N) {
  if (!v.data) return;
  float* row = v.data + b * v.stride_batch + d * v.stride_dim;
  for (int64_t n = 0; n < N; ++n) row[n * v.stride_state] = h[n];
}

// options.chunk_length = 0: the chunked forward's chunk and the backward's checkpoint interval.
inline constexpr int64_t kDefaultCheckpointInterval = kDefaultScanChunkLength;

// Whether the channel-tiled paths apply (scan_block-inl.h): B and C both variable (one row per
// step shared by a tile's channels), and, when their group counts differ, one grouping nested
// in the other.
inline bool TilesApply(const SelectiveScanParams& p) {
  return p.B.is_variable && p.C.is_variable &&
         std::max(p.B.groups, p.C.groups) % std::min(p.B.groups, p.C.groups) == 0;
}

// B or C packed as (Bv, G, Lv, Np): Bv = batch and Lv = L for the variable forms, 1 for the
// constant form (where G = D). Padded lanes are zero, so they add nothing to any sum.
struct PackedBC {
  float* data = nullptr;  // in the calling thread's scratch `slot`
  int64_t size = 0;       // floats
  int64_t groups = 1, padded_state = 0, rows_per_group = 1;  // rows_per_group = Lv
  bool is_variable = false;
  int64_t channels_per_group = 1;

  // The first of this (b, d)'s rows; the row of step l is row + l * TimeStep().
  const float* Row(int64_t b, int64_t d) const {
    // The common forms skip the 64-bit divide, which costs more than a decode step's update.
    const int64_t g = groups == 1 ? 0 : (channels_per_group == 1 ? d : d / channels_per_group);
    const int64_t bv = is_variable ? b : 0;
    return data + ((bv * groups + g) * rows_per_group) * padded_state;
  }
  int64_t TimeStep() const { return is_variable ? padded_state : 0; }
};

PackedBC PackBC(const BCView& v, const SelectiveScanParams& p, int64_t padded_state,
                ScratchSlot slot);

// One (b, d) row's per-step scalars in f32, each padded to a multiple of the vector width.
struct RowBuffers {
  std::vector<float> u, delta_in, dt, dtu, ddt_ddelta, y, z;  // (Lp)
  explicit RowBuffers(int64_t padded_len)
      : u(padded_len),
        delta_in(padded_len),
        dt(padded_len),
        dtu(padded_len),
        ddt_ddelta(padded_len),
        y(padded_len),
        z(padded_len) {}
};

// One row's gradient scratch for the backward, padded like RowBuffers.
struct RowGrads {
  std::vector<float> dout, dy, dz, du, ddelta;  // (Lp)
  explicit RowGrads(int64_t padded_len)
      : dout(padded_len), dy(padded_len), dz(padded_len), du(padded_len), ddelta(padded_len) {}
};

// A (D, N) as (D, Np), zero padded, in the calling thread's scratch slot kScanPackedA.
const float* PackA(const F32View& A, const SelectiveScanParams& p, int64_t padded_state);

}  // namespace ssmkit::cpu

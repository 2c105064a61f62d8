// The channel-tiled selective scan shared by forward and backward.
// Dimension legend: L length, N state size, W vector width (channels per tile), Q chunk.
//
// W consecutive channels of one (b, group) advance together, one vector holding state index n
// for all W channels. Every sum runs down the vectors (y += C[l][n] * h[n]) with no horizontal
// reduction per step, and the N state chains are independent, so the loop is bound by exp
// throughput rather than latency. It applies when the channels of a group come in multiples of
// W and B, C are variable (then shared by the tile's channels).
#if defined(SSMKIT_CPU_SCAN_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SCAN_TILE_INL_H_
#undef SSMKIT_CPU_SCAN_TILE_INL_H_
#else
#define SSMKIT_CPU_SCAN_TILE_INL_H_
#endif

#include <algorithm>
#include <vector>

#include "cpu/scan_packing.hpp"
#include "cpu/simd_math-inl.h"
#include "hwy/highway.h"
#include "ops/selective_scan_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct TileScan {
  const float* A;    // (N, W) decay rates, n-major
  const float* B;    // (L, Np) packed rows of the tile's (b, group)
  const float* C;    // (L, Np)
  int64_t bstep, cstep;
  const float* dt;   // (L, W)
  const float* dtu;  // (L, W)
  float* y;          // (L, W) C.h, before D*u and the gate
  float* h;          // (N, W) in: h0; out: h[L-1]
  int64_t L, N;
  float* checkpoints;  // (ceil(L/Q), N, W) the state entering each chunk, or nullptr
  int64_t chunk;       // Q
};

// kN > 0: the state sits in kN registers (the common N = 16); kN = 0: any N, state in memory.
template <int kN>
void ScanTileSequentialN(const TileScan& t) {
  using DF = hn::ScalableTag<float>;
  using VF = hn::Vec<DF>;
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  const int64_t N = kN > 0 ? kN : t.N;
  VF h_reg[kN > 0 ? kN : 1];
  if constexpr (kN > 0) {
    for (int n = 0; n < kN; ++n) h_reg[n] = hn::LoadU(df, t.h + n * W);
  }
  const float* Bl = t.B;
  const float* Cl = t.C;
  for (int64_t l = 0; l < t.L; ++l, Bl += t.bstep, Cl += t.cstep) {
    if (t.checkpoints && l % t.chunk == 0) {
      float* saved = t.checkpoints + (l / t.chunk) * N * W;
      if constexpr (kN > 0) {
        for (int n = 0; n < kN; ++n) hn::StoreU(h_reg[n], df, saved + n * W);
      } else {
        std::copy(t.h, t.h + N * W, saved);
      }
    }
    const VF dt = hn::LoadU(df, t.dt + l * W), dtu = hn::LoadU(df, t.dtu + l * W);
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);  // two sums: half the add chain
    for (int64_t n = 0; n < N; ++n) {
      const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, t.A + n * W)));
      const VF x = hn::Mul(dtu, hn::Set(df, Bl[n]));
      VF h;
      if constexpr (kN > 0) {
        h = h_reg[n] = hn::MulAdd(a, h_reg[n], x);
      } else {
        h = hn::MulAdd(a, hn::LoadU(df, t.h + n * W), x);
        hn::StoreU(h, df, t.h + n * W);
      }
      if (n & 1) {
        acc1 = hn::MulAdd(hn::Set(df, Cl[n]), h, acc1);
      } else {
        acc0 = hn::MulAdd(hn::Set(df, Cl[n]), h, acc0);
      }
    }
    hn::StoreU(hn::Add(acc0, acc1), df, t.y + l * W);
  }
  if constexpr (kN > 0) {
    for (int n = 0; n < kN; ++n) hn::StoreU(h_reg[n], df, t.h + n * W);
  }
}

inline void ScanTileSequential(const TileScan& t) {
  if (t.N == 16) return ScanTileSequentialN<16>(t);
  ScanTileSequentialN<0>(t);
}

// Longest L for the tiled paths: their per-thread buffers grow as W * L.
constexpr int64_t kMaxTiledLength = 1 << 16;

inline bool TilesFit(const SelectiveScanParams& p, int64_t W) {
  return p.B.is_variable && p.C.is_variable && (p.dim / p.B.groups) % W == 0 &&
         (p.dim / p.C.groups) % W == 0 && p.seqlen <= kMaxTiledLength;
}

// rows[j].*field[l] -> tile[l * W + j], l < len (W = rows.size()).
template <class Row>
void RowsToTile(const std::vector<Row>& rows, std::vector<float> Row::*field, int64_t len, float* tile) {
  const int64_t W = static_cast<int64_t>(rows.size());
  for (int64_t j = 0; j < W; ++j) {
    const float* row = (rows[j].*field).data();
    for (int64_t l = 0; l < len; ++l) tile[l * W + j] = row[l];
  }
}

template <class Row>
void TileToRows(const float* tile, int64_t len, std::vector<Row>& rows, std::vector<float> Row::*field) {
  const int64_t W = static_cast<int64_t>(rows.size());
  for (int64_t j = 0; j < W; ++j) {
    float* row = (rows[j].*field).data();
    for (int64_t l = 0; l < len; ++l) row[l] = tile[l * W + j];
  }
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SCAN_TILE_INL_H_

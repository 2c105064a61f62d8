// Pieces of the sequential SSD shared by its forward (ssd_sequential_forward.cpp) and backward
// (ssd_sequential_backward.cpp): the scaled recurrence's rebasing and forward scales, the tile
// shape choice and the prefetch of the next head's rows.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
//
// Dimension legend: B batch, L length, H heads, P head dim, T time block.
//
// A is one scalar per head, so the decay a_t = exp(dt_t A) is the same for the whole (P, N)
// state of a step. The kernels run a scaled recurrence that moves it out of the inner loop:
//   h_t = alpha_t S_t,  alpha_t = a_t alpha_{t-1},  S_t = S_{t-1} + (dt_t x_t / alpha_t) B_t^T
//   y_t = alpha_t (C_t . S_t) + D x_t
// so a step costs 2 FMAs per state element (update, readout) instead of mul + 2 FMAs. When
// alpha leaves [2^-32, 2^32] the state is rebased (S *= alpha, alpha = 1): S stays within
// 2^32 of h, far from f32 overflow, and the rounding is that of the plain recurrence. A
// sequence reset (seq_idx) is a rebase by 0.
#if defined(SSMKIT_CPU_SSD_SEQUENTIAL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SSD_SEQUENTIAL_INL_H_
#undef SSMKIT_CPU_SSD_SEQUENTIAL_INL_H_
#else
#define SSMKIT_CPU_SSD_SEQUENTIAL_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstdint>

#include "cpu/ssd_common.hpp"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Where the scaled state is rebased (numerics: keeps S within 2^32 of h).
constexpr float kRebaseLow = 0x1p-32f;
constexpr float kRebaseHigh = 0x1p32f;

inline bool NeedsRebase(float scale) { return !(scale >= kRebaseLow && scale <= kRebaseHigh); }

// Vectors per tile row: the largest of 4, 2, 1 that divides the row's nV vectors and is at
// most `most` (the forward's or the backward's widest tile).
inline int TileVectors(int64_t nV, int most) {
  if (most >= 4 && nV % 4 == 0) return 4;
  return most >= 2 && nV % 2 == 0 ? 2 : 1;
}

// One step of a scale recurrence (forward alpha, adjoint beta) whose next value is `next`:
// a reset drops the carried state (mult 0, scale 1), a scale leaving the rebase bounds is
// folded into the state (mult next, scale 1), any other carries on (mult 1, scale next).
inline void ScaleStep(bool reset, float next, float* mult, float* scale) {
  if (reset) {
    *mult = 0.0f;
    *scale = 1.0f;
  } else if (NeedsRebase(next)) {
    *mult = next;
    *scale = 1.0f;
  } else {
    *mult = 1.0f;
    *scale = next;
  }
}

// Forward scales: before step t's update the state is multiplied by mult[t] (1 = no-op;
// a rebase factor; 0 at a reset), and after it h_t = alpha[t] * S. decay, mult, alpha: (L).
inline void ForwardScales(const SsdParams& p, int64_t b, const float* decay, float* mult,
                          float* alpha) {
  float prev = 1.0f;
  for (int64_t t = 0; t < p.seqlen; ++t) {
    ScaleStep(ssd::ResetAt(p, b, t), prev * decay[t], &mult[t], &alpha[t]);
    prev = alpha[t];
  }
}

// The steps t of [0, T) whose state is rescaled first (mult[t] != 1), ascending, into steps;
// returns how many. The tiles run the steps between two of them without a test per step.
inline int64_t RescaleSteps(const float* mult, int64_t T, int64_t* steps) {
  int64_t count = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (mult[t] != 1.0f) steps[count++] = t;
  }
  return count;
}

// States per line: one 64-byte cache line of f32 (the forward's run of B and C below).
constexpr int64_t kBcLine = 16;

// The B and C rows of group g of batch row b over steps [t0, t0 + T) into bc (Nn / run, T, 2,
// run): for each run of `run` states (a multiple of 16 dividing Nn), step t's B values, then
// its C values. A tile as wide as a run (or narrower, within one) walks 2 run floats a step,
// contiguous, so that its block of B and C stays in L1 for the next tiles of the run. In rows
// of 2 Nn floats (run = Nn; 1 KiB a step at N = 128) a tile's two lines a step fell in 8 of a
// 32 KiB L1's 64 sets, 16 lines a set over 64 steps: more than its 8 ways, and each tile
// re-read its B and C from L2.
inline void CopyBlockBCRuns(const ssd::PackedBC& Bp, const ssd::PackedBC& Cp, int64_t b, int64_t g,
                            int64_t t0, int64_t T, int64_t Nn, int64_t run, float* bc) {
  const hn::CappedTag<float, kBcLine> d;  // divides every run (a multiple of 16)
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t t = 0; t < T; ++t) {
    const float* B = Bp.Row(b, g, t0 + t);
    const float* C = Cp.Row(b, g, t0 + t);
    for (int64_t n = 0; n < Nn; n += run) {
      float* at = bc + (n / run * T + t) * 2 * run;
      // Vectors, not std::copy: a memmove call per run of 16 floats cost ~1.5% of the forward.
      for (int64_t i = 0; i < run; i += lanes) {
        hn::StoreU(hn::LoadU(d, B + n + i), d, at + i);
        hn::StoreU(hn::LoadU(d, C + n + i), d, at + run + i);
      }
    }
  }
}

// A tile of kR x kC state vectors in registers: rows `ld` floats apart from `at`.
template <int kR, int kC>
HWY_INLINE void LoadTile(const float* at, int64_t ld, VF (&v)[kR][kC]) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int i = 0; i < kR; ++i)
    for (int j = 0; j < kC; ++j) v[i][j] = hn::LoadU(df, at + i * ld + j * lanes);
}

template <int kR, int kC>
HWY_INLINE void StoreTile(const VF (&v)[kR][kC], int64_t ld, float* at) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int i = 0; i < kR; ++i)
    for (int j = 0; j < kC; ++j) hn::StoreU(v[i][j], df, at + i * ld + j * lanes);
}

// The tile times m (a rescale: ScaleStep's mult).
template <int kR, int kC>
HWY_INLINE void ScaleTile(float m, VF (&v)[kR][kC]) {
  const VF mv = hn::Set(DF(), m);
  for (int i = 0; i < kR; ++i)
    for (int j = 0; j < kC; ++j) v[i][j] = hn::Mul(v[i][j], mv);
}

// The first term of a tile's partial sum that earlier tiles may have begun in memory at dst:
// a b when this tile is the first (it then stores the sum), else a b + *dst. Starting the
// chain from *dst rather than adding it after the chain's last multiply-add takes an add, and
// its latency, off the chain's end (docs/benchmarks.md: the AVX2 forward 3-6% faster).
HWY_INLINE VF StartSum(VF a, VF b, bool first, const float* dst) {
  return first ? hn::Mul(a, b) : hn::MulAdd(a, b, hn::LoadU(DF(), dst));
}

// Rows [t0, t0 + T) of head h of up to four (B, L, H, P) operands (null or absent views
// are skipped), prefetched a slice at a time between the tiles of the head before. Asked
// for all at once, the misses queue up and stall the core about as long as the loads
// themselves would (m2-130m forward 4% and backward 5-10% faster this way, 1 and 2 threads).
class RowPrefetch {
 public:
  // t0 < 0: nothing to prefetch.
  RowPrefetch(std::array<const SsdSeqView*, 4> views, int64_t P, int64_t L, int64_t b, int64_t h,
              int64_t t0, int64_t T)
      : views_(views), P_(P), L_(L), b_(b), h_(h), t0_(t0), T_(T), next_(t0) {}

  // The rows spread over `slices` calls of Step: call k prefetches rows up to
  // t0 + T (k + 1) / slices, counted without a division per call (two integer divisions a
  // tile were ~1% of the forward's samples on AVX2).
  void Spread(int64_t slices) {
    slices_ = slices;
    carry_ = 0;
    next_ = t0_;
    lines_per_step_ = (lines_end_ - lines_next_ + 64 * slices - 1) / (64 * slices) * 64;
  }

  // Also the lines of [from, from + bytes), spread over the same calls (before Spread).
  void AlsoLines(const void* from, int64_t bytes) {
    lines_next_ = reinterpret_cast<uintptr_t>(from) & ~uintptr_t{63};
    lines_end_ = reinterpret_cast<uintptr_t>(from) + bytes;
  }

  void Step() {
    for (const uintptr_t stop = std::min(lines_end_, lines_next_ + lines_per_step_);
         lines_next_ < stop; lines_next_ += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(lines_next_), /*rw=*/0, /*locality=*/2);
    }
    if (t0_ < 0) return;
    int64_t end = next_;
    for (carry_ += T_; carry_ >= slices_; carry_ -= slices_) ++end;
    for (const SsdSeqView* v : views_) {
      if (v) ssd::PrefetchRows(*v, P_, L_, b_, h_, next_, end - next_);
    }
    next_ = end;
  }

 private:
  std::array<const SsdSeqView*, 4> views_;
  int64_t P_, L_, b_, h_, t0_, T_;
  int64_t slices_ = 1, carry_ = 0, next_;
  uintptr_t lines_next_ = 0, lines_end_ = 0, lines_per_step_ = 0;
};

// The rows a head loop over [h0, h1), time block by time block (step T, negative going back),
// reads after head h's block at t0: the next head's, or after the last head the first head's
// in the next block.
inline RowPrefetch NextHeadRows(std::array<const SsdSeqView*, 4> views, int64_t P, int64_t L,
                                int64_t b, int64_t h, int64_t h0, int64_t h1, int64_t t0,
                                int64_t step) {
  const int64_t T = step < 0 ? -step : step;
  if (h + 1 < h1) return RowPrefetch(views, P, L, b, h + 1, t0, T);
  const int64_t next = t0 + step;
  return RowPrefetch(views, P, L, b, h0, next < L ? next : -1, T);
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SSD_SEQUENTIAL_INL_H_

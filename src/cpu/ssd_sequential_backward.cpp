// CPU SSD, sequential algorithm, backward: the recurrence one step at a time, SIMD over the
// state (the scaled recurrence of ssd_sequential-inl.h), in two sweeps per head.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to 16, Pr P padded to the tile height, T time block, K checkpoint spacing.
//
// Per (b, h), with g_t = dLoss/dh_t and dy = dout * silu(z):
//   forward sweep:  h_t again, and dC_t += h_t^T dy_t (summed over the heads of a group)
//   adjoint sweep:  g_t = dy_t C_t^T + a_{t+1} g_{t+1}, scaled the same way backwards in time
//                   (g_t = beta_t G_t), giving gB_t = g_t B_t (P), dB_t += dt_t g_t^T x_t,
//                   dx_t = D dy_t + dt_t gB_t
//   dt and A without <g_t, h_{t-1}> (which would need every state): with Lambda_t the
//   cumulative log-decay, dLoss/dLambda_t = <dy_t, C_t h_t> + [t = L-1] <dfinal, h_t>
//   - dt_t <x_t, gB_t>, and dLoss/dlog(a_u) = sum_{t >= u in u's sequence} dLoss/dLambda_t;
//   then ddt_u = A dLoss/dlog(a_u) + <x_u, gB_u>, dA = sum_u dt_u dLoss/dlog(a_u).
// Nothing of size (L, P, N) is stored.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/aligned_floats.hpp"
#include "core/dtype.hpp"
#include "cpu/ssd_backward_driver.hpp"
#include "cpu/ssd_common.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/ssd_sequential_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/ssd_reduce-inl.h"
#include "cpu/ssd_sequential-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using ssd::PackedBC;
using ssd::RoundUp;

// Tuned for speed per target, do not affect correctness: state vectors held in registers per
// tile (32 vector registers on AVX-512, 16 on AVX2) and the most n-vectors per tile. The 1 x 4
// tile stored its dB and gB partial sums for every 4 state vectors; 4 rows x 2 vectors (8 state
// registers) made fwd+bwd 142-148 ms against 225-226 (2 x 4: 175-179, 8 x 1: 156-159) on AVX2
// (Zen 3, one thread, A/B interleaved, three rounds).
constexpr int kBwdStateRegs = HWY_MAX_BYTES >= 64 ? 16 : 8;
constexpr int kBwdTileVectors = HWY_MAX_BYTES >= 64 ? 4 : 2;
// Time block: on Zen 4 (AVX-512) 32 ran m2-130m fwd+bwd ~2% slower than 64. On AVX2 a Zen 3
// once ran it faster with 32 (72.3-74.9 ms against 75.4-80.7, an earlier version of these
// tiles); the Zen 4 forced to AVX2, with the current tiles, runs the backward 4-7% faster with
// 64 (and checkpoints 128 apart) than with 32 (64 apart), calls alternated in one process.
constexpr int64_t kBwdBlock = 64;
// Steps between the state checkpoints (a multiple of kBwdBlock).
// Numerics: the sum giving dLoss/dlog(a) runs over at most this many steps; the rest comes
// exactly from <g, h> at the next checkpoint (see DecayGrads). On Zen 4, 128 against 64:
// m2-130m backward 6-10% faster on 2 threads (half the checkpoint traffic, 12 MB written and
// read back per thread instead of 24), and over 25 runs of SsdGrad.LongSequence (L = 1024) the
// relative error of dA and ddt_bias went from mean 2.4e-6 / max 1.35e-5 to mean 3.7e-6 / max
// 2.5e-5.
constexpr int64_t kCheckpointSteps = 2 * kBwdBlock;
constexpr int64_t kMaxCheckpoints = 64;

// The backward keeps checkpoints per head (up to kMaxCheckpoints states), so fewer heads go
// together than in the forward: 12 (m2-130m on 2 threads: one run of 12 heads per thread) ran
// fwd+bwd ~2.5% faster than 8 (runs of 8 and 4), at 12 MB of checkpoints per thread at L = 2048.
constexpr int64_t kBwdHeadsTogether = 12;

// Adjoint scales, backwards in time: before adding dy_t C_t^T the adjoint state is
// multiplied by mult[t] (the carry a_{t+1} folded with a rebase; 0 across a reset), and
// g_t = beta[t] * G after it. decay, mult, beta: (L).
void AdjointScales(const SsdParams& p, int64_t b, const float* decay, float* mult, float* beta) {
  const int64_t L = p.seqlen;
  mult[L - 1] = 1.0f;
  beta[L - 1] = 1.0f;
  for (int64_t t = L - 2; t >= 0; --t) {
    ScaleStep(ssd::ResetAt(p, b, t + 1), beta[t + 1] * decay[t + 1], &mult[t], &beta[t]);
  }
}

// Tiles: states (Pr, Nn), vectors over n. Tiles of kP rows x kV vectors. Per-row sums
// over n (C . S for y, B . G for gB) are left as one partial vector per (step, row) in
// `pvec` and summed across lanes in batches (SumLanesOfEach) once a row block is done.
//
// As in the forward (ssd_sequential_forward.cpp), a step's FMAs come with broadcasts, loads
// and stores that compete with them for the core's dispatch: B and C share one row, x and dy
// one pointer, the steps where the state is rescaled are listed once per head and block, and
// whether a tile stores or adds its sums is a template argument, not a test every step. On
// the AMD EPYC (Zen 4) forced to AVX2, every operand in L1, the adjoint's 4 x 2 tile went
// from 18.4 to ~13.3 cycles a step (12 for its 24 FMAs).

struct BwdTileArgs {
  const float* bc;         // (T, 2 Nn): B's row (Nn), then C's
  const float* x;          // (T, Pr): x scaled (forward sweep) or plain (adjoint sweep)
  int64_t dy_off;          // x + dy_off: (T, Pr) dy (forward sweep) or dy / beta (adjoint sweep)
  const float* mult;       // (T)
  const int64_t* rescale;  // the steps t with mult[t] != 1, ascending
  int64_t rescales;
  float* nbuf;  // (T, Nn), accumulated over row blocks: dC (forward sweep) or dB (adjoint)
  float* pvec;  // (T, kP, lanes), accumulated over column tiles: partial C . S or B . G
  float* S;     // (Pr, Nn)
  int64_t T, Pr, Nn;
};

// Where a tile's sums go: the first row block stores nbuf and the first column tile stores
// pvec, the others add to them (no buffer is cleared beforehand).
struct BwdTileFirst {
  bool rows, cols;
};

// Forward sweep over steps [t, stop): S[p] += xs[p] B;  dC += dy[p] S[p];  and with kY,
// y[p] += C . S[p].
template <int kP, int kV, bool kY, bool kFirstRows, bool kFirstCols>
HWY_INLINE void BwdForwardSteps(const BwdTileArgs& a, int64_t t, int64_t stop, int64_t p0,
                                int64_t n0, VF (&S)[kP][kV]) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Pr = a.Pr, Nn = a.Nn, dy_off = a.dy_off;
  const float* HWY_RESTRICT bc = a.bc + t * 2 * Nn + n0;
  const float* HWY_RESTRICT xt = a.x + t * Pr + p0;
  float* HWY_RESTRICT nt = a.nbuf + t * Nn + n0;
  float* HWY_RESTRICT pv = a.pvec + t * kP * lanes;
  const float* end = bc + (stop - t) * 2 * Nn;
  for (; bc != end; bc += 2 * Nn, xt += Pr, nt += Nn, pv += kP * lanes) {
    VF bv[kV], dc[kV];
    for (int j = 0; j < kV; ++j) bv[j] = hn::LoadU(df, bc + j * lanes);
    for (int i = 0; i < kP; ++i) {
      const VF xv = hn::Set(df, xt[i]);
      const VF dyv = hn::Set(df, xt[dy_off + i]);
      VF yacc = hn::Zero(df);  // set by the first j (kY)
      for (int j = 0; j < kV; ++j) {
        S[i][j] = hn::MulAdd(xv, bv[j], S[i][j]);
        dc[j] = i > 0 ? hn::MulAdd(dyv, S[i][j], dc[j])
                      : StartSum(dyv, S[i][j], kFirstRows, nt + j * lanes);
        if (kY) {
          const VF cv = hn::LoadU(df, bc + Nn + j * lanes);
          yacc = j > 0 ? hn::MulAdd(cv, S[i][j], yacc)
                       : StartSum(cv, S[i][j], kFirstCols, pv + i * lanes);
        }
      }
      if (kY) hn::StoreU(yacc, df, pv + i * lanes);
    }
    for (int j = 0; j < kV; ++j) hn::StoreU(dc[j], df, nt + j * lanes);
  }
}

// Adjoint sweep over steps (stop, t], backwards in time: G[p] += dy[p] C;  dB += x[p] G[p];
// gB[p] += B . G[p].
//
// Row by row, a step holds the tile, B, C, both dB sums and a row's dy, x and gB sum: 17
// vectors for AVX2's 4 x 2 tile, one more than its 16 registers, and GCC kept one dB sum on
// the stack, a store and a reload per row (the Zen 3's adjoint tile at ~75% of the forward
// tile's rate per multiply-add). On the targets of the 4 x 2 tile (AVX2, SSE4, NEON) the dB
// sums are taken after every row's update instead (14 vectors live, then 11): the same sums in
// the same order, and the Zen 3's backward 5% faster on one thread.
constexpr bool kDbAfterRows = HWY_MAX_BYTES < 64;
template <int kP, int kV, bool kFirstRows, bool kFirstCols>
HWY_INLINE void BwdAdjointSteps(const BwdTileArgs& a, int64_t t, int64_t stop, int64_t p0,
                                int64_t n0, VF (&G)[kP][kV]) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Pr = a.Pr, Nn = a.Nn, dy_off = a.dy_off;
  // At step t + 1 (at most one past the block's rows), stepped back before each step so that
  // they never point before the block.
  const float* HWY_RESTRICT bc = a.bc + (t + 1) * 2 * Nn + n0;
  const float* HWY_RESTRICT xt = a.x + (t + 1) * Pr + p0;
  float* HWY_RESTRICT nt = a.nbuf + (t + 1) * Nn + n0;
  float* HWY_RESTRICT pv = a.pvec + (t + 1) * kP * lanes;
  for (int64_t k = t - stop; k > 0; --k) {
    bc -= 2 * Nn;
    xt -= Pr;
    nt -= Nn;
    pv -= kP * lanes;
    VF bv[kV], cv[kV], db[kV];
    for (int j = 0; j < kV; ++j) {
      bv[j] = hn::LoadU(df, bc + j * lanes);
      cv[j] = hn::LoadU(df, bc + Nn + j * lanes);
    }
    // The dB sums of a row, or of all rows after the G updates (kDbAfterRows).
    const auto add_db = [&](int i) {
      const VF xv = hn::Set(df, xt[i]);
      for (int j = 0; j < kV; ++j) {
        db[j] = i > 0 ? hn::MulAdd(xv, G[i][j], db[j])
                      : StartSum(xv, G[i][j], kFirstRows, nt + j * lanes);
      }
    };
    for (int i = 0; i < kP; ++i) {
      const VF dyv = hn::Set(df, xt[dy_off + i]);
      VF gb;
      for (int j = 0; j < kV; ++j) {
        G[i][j] = hn::MulAdd(dyv, cv[j], G[i][j]);
        gb = j > 0 ? hn::MulAdd(bv[j], G[i][j], gb)
                   : StartSum(bv[j], G[i][j], kFirstCols, pv + i * lanes);
      }
      hn::StoreU(gb, df, pv + i * lanes);
      if (!kDbAfterRows) add_db(i);
    }
    if (kDbAfterRows) {
      for (int i = 0; i < kP; ++i) add_db(i);
    }
    for (int j = 0; j < kV; ++j) hn::StoreU(db[j], df, nt + j * lanes);
  }
}

// Calls steps.template operator()<kFirstRows, kFirstCols>() with first's flags as constants.
template <class Steps>
HWY_INLINE void WithFirstFlags(BwdTileFirst first, const Steps& steps) {
  if (first.rows) {
    if (first.cols) {
      steps.template operator()<true, true>();
    } else {
      steps.template operator()<true, false>();
    }
  } else if (first.cols) {
    steps.template operator()<false, true>();
  } else {
    steps.template operator()<false, false>();
  }
}

// Forward sweep of one tile through the block, in runs of steps between rescales.
template <int kP, int kV, bool kY>
HWY_NOINLINE void BwdForwardTile(const BwdTileArgs& a, int64_t p0, int64_t n0, BwdTileFirst first) {
  VF S[kP][kV];
  LoadTile(a.S + p0 * a.Nn + n0, a.Nn, S);
  int64_t t = 0;
  for (int64_t k = 0;; ++k) {
    const int64_t stop = k < a.rescales ? a.rescale[k] : a.T;
    WithFirstFlags(first, [&]<bool kFirstRows, bool kFirstCols>() {
      BwdForwardSteps<kP, kV, kY, kFirstRows, kFirstCols>(a, t, stop, p0, n0, S);
    });
    if (k == a.rescales) break;
    ScaleTile(a.mult[stop], S);
    t = stop;
  }
  StoreTile(S, a.Nn, a.S + p0 * a.Nn + n0);
}

// Adjoint sweep of one tile back through the block, in runs of steps between rescales (the
// last rescale first).
template <int kP, int kV>
HWY_NOINLINE void BwdAdjointTile(const BwdTileArgs& a, int64_t p0, int64_t n0, BwdTileFirst first) {
  VF G[kP][kV];
  LoadTile(a.S + p0 * a.Nn + n0, a.Nn, G);
  int64_t t = a.T - 1;
  for (int64_t k = a.rescales;; --k) {
    // Steps (stop, t] need no rescale; step stop, when there is one, is rescaled first.
    const int64_t stop = k > 0 ? a.rescale[k - 1] : -1;
    WithFirstFlags(first, [&]<bool kFirstRows, bool kFirstCols>() {
      BwdAdjointSteps<kP, kV, kFirstRows, kFirstCols>(a, t, stop, p0, n0, G);
    });
    if (k == 0) break;
    ScaleTile(a.mult[stop], G);
    t = stop;
  }
  StoreTile(G, a.Nn, a.S + p0 * a.Nn + n0);
}

// The tile shape of the backward: kV vectors of n (TileVectors of Nn / lanes) and
// kP = kBwdStateRegs / kV rows of p.
int BwdTileVectors(int64_t Nn) {
  return TileVectors(Nn / static_cast<int64_t>(hn::Lanes(DF())), kBwdTileVectors);
}
int64_t BwdTileRows(int kV) { return kBwdStateRegs / kV; }

// pbuf[t][p0 + i] = lane sum of pvec[t][i] for the T x kP vectors of a row block.
template <int kP>
void FoldRowBlock(const BwdTileArgs& a, int64_t p0, float* pbuf) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), items = a.T * kP;
  HWY_ALIGN float sums[64];
  VF v[64];
  for (int64_t first = 0; first < items; first += lanes) {
    const int64_t n = std::min(lanes, items - first);
    for (int64_t k = 0; k < lanes; ++k)
      v[k] = k < n ? hn::LoadU(df, a.pvec + (first + k) * lanes) : hn::Zero(df);
    hn::Store(SumLanesOfEach(df, v), df, sums);
    // Item (t, i) goes to pbuf[t][p0 + i]: runs of up to kP consecutive floats (an index
    // computed per item had the compiler emit a scatter). A whole batch of whole rows (the
    // usual case: kP divides the lanes) takes copies of kP floats, a size the compiler knows.
    if (n == lanes && lanes % kP == 0) {
      for (int64_t g = 0; g < lanes / kP; ++g) {
        float* HWY_RESTRICT dst = pbuf + (first / kP + g) * a.Pr + p0;
        for (int i = 0; i < kP; ++i) dst[i] = sums[g * kP + i];
      }
      continue;
    }
    for (int64_t k = 0; k < n;) {
      const int64_t item = first + k, i = item % kP, run = std::min(kP - i, n - k);
      std::copy(sums + k, sums + k + run, pbuf + (item / kP) * a.Pr + p0 + i);
      k += run;
    }
  }
}

// Both sweeps over one time block: every row block, all its column tiles, then its sums;
// `next` is prefetched a slice per tile.
template <int kV, bool kAdjoint, bool kY>
void BwdTiles(const BwdTileArgs& a, float* pbuf, RowPrefetch& next) {
  constexpr int kP = kBwdStateRegs / kV;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t tiles = a.Pr / kP * (a.Nn / (kV * lanes));
  next.Spread(tiles);
  for (int64_t p0 = 0; p0 < a.Pr; p0 += kP) {
    for (int64_t n0 = 0; n0 < a.Nn; n0 += kV * lanes) {
      next.Step();
      const BwdTileFirst first{p0 == 0, n0 == 0};
      if (kAdjoint) {
        BwdAdjointTile<kP, kV>(a, p0, n0, first);
      } else {
        BwdForwardTile<kP, kV, kY>(a, p0, n0, first);
      }
    }
    if (kAdjoint || kY) FoldRowBlock<kP>(a, p0, pbuf);
  }
}

template <bool kAdjoint, bool kY>
void BwdTilesAnyShape(const BwdTileArgs& a, int kV, float* pbuf, RowPrefetch& next) {
  if (kV == 4) {
    BwdTiles<4, kAdjoint, kY>(a, pbuf, next);
  } else if (kV == 2) {
    BwdTiles<2, kAdjoint, kY>(a, pbuf, next);
  } else {
    BwdTiles<1, kAdjoint, kY>(a, pbuf, next);
  }
}

// Per-head state of the backward, kept across time blocks.
struct BwdHead {
  std::vector<float> dt, dt_grad, decay, fmult, alpha, amult, beta, cdc, xg;  // (L)
  std::vector<float> skip, dD;    // (Pr): D[h, p] (0 without D), the dD sums
  AlignedFloats S;                // (Pr, Nn): the state, then the adjoint state
  AlignedFloats checkpoints;      // (L / K, Pr, Nn) from Checkpoint(): h before each checkpoint
  std::vector<double> dlog_a_at;  // (L / K + 1): exact dLoss/dlog(a) there
  double final_term = 0.0;        // <dfinal, h_{L-1}>
};

// Checkpoint c of a head, 64-byte aligned for streaming stores (Pr * Nn is a multiple of 16
// floats, the buffer starts on a cache line).
float* Checkpoint(BwdHead& hd, int64_t c, int64_t size) { return hd.checkpoints.data() + c * size; }

// The buffers the tiles load and store vectors from start on cache lines (AlignedFloats): in a
// std::vector (16-byte aligned) vectors straddle two lines, at a cost that depends on where the
// allocator put them (the forward's note).
struct BwdScratch {
  std::vector<BwdHead> heads;
  std::vector<float> scale, row;  // one time block
  std::vector<int64_t> rescale;   // one time block: RescaleSteps
  // (T, 2 Nn): B and C rows of the block (BwdTileArgs), as CopyBlockBCRuns lays out one run
  // of Nn. Runs of a column tile's width (the forward's layout) measured no faster here.
  AlignedFloats bc;
  AlignedFloats rows;              // xs, dy, dys: (T, Pr) each, at kXs, kDy, kDys
  AlignedFloats nbuf, pbuf, pvec;  // one time block
  // The (T, Pr) row buffers of a block, one allocation so that the tiles reach x and dy
  // through one pointer (BwdTileArgs::dy_off).
  static constexpr int kXs = 0, kDy = 1, kDys = 2;
  int64_t rows_size = 0;  // T * Pr
  float* Rows(int which) { return rows.data() + which * rows_size; }
  const float* Rows(int which) const { return rows.data() + which * rows_size; }
};

// Steps between the backward's state checkpoints: kCheckpointSteps, stretched so that a
// head keeps at most kMaxCheckpoints of them (memory (kMaxCheckpoints, P, N) per head).
int64_t CheckpointSteps(int64_t L) {
  return std::max(kCheckpointSteps,
                  RoundUp((L + kMaxCheckpoints - 1) / kMaxCheckpoints, kBwdBlock));
}

// One call of BackwardHeads: heads [h0, h1) of batch row b, all of group g, and the shape
// its phases share.
struct BwdRun {
  const SsdBwdParams& p;
  const PackedBC& Bp;
  const PackedBC& Cp;
  int64_t b, g, h0, h1;
  int64_t L, P, N, Nn;
  int kV;      // tile vectors of n (BwdTileVectors)
  int64_t kP;  // tile rows of p (BwdTileRows)
  // P padded to whole vectors (a multiple of kP too), so the per-step loops over p run on
  // whole vectors.
  int64_t Pr;
  int64_t K;  // steps between checkpoints (CheckpointSteps)
};

BwdRun MakeBwdRun(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t h0, int64_t h1) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t Nn = RoundUp(p.dstate, 16);
  const int kV = BwdTileVectors(Nn);
  const int64_t kP = BwdTileRows(kV);
  return {.p = p,
          .Bp = task.B,
          .Cp = task.C,
          .b = task.b,
          .g = task.g,
          .h0 = h0,
          .h1 = h1,
          .L = p.seqlen,
          .P = p.headdim,
          .N = p.dstate,
          .Nn = Nn,
          .kV = kV,
          .kP = kP,
          .Pr = RoundUp(p.headdim, std::max(kP, lanes)),
          .K = CheckpointSteps(p.seqlen)};
}

// Sizes the time-block buffers for r's shape. The per-head state is grown, never shrunk: a run
// of fewer heads must not free the others' checkpoints (MBs, page faults on every call when
// runs of 8 and 4 heads alternate).
void SizeBlockScratch(const BwdRun& r, BwdScratch& s) {
  const int64_t T = kBwdBlock, Pr = r.Pr, lanes = static_cast<int64_t>(hn::Lanes(DF()));
  if (static_cast<int64_t>(s.heads.size()) < r.h1 - r.h0) s.heads.resize(r.h1 - r.h0);
  s.scale.resize(T);
  s.rows_size = T * Pr;
  s.rows.Grow(3 * T * Pr);
  s.bc.Grow(T * 2 * r.Nn);
  s.rescale.resize(T);
  s.nbuf.Grow(T * r.Nn);
  s.pbuf.Grow(T * Pr);
  s.pvec.Grow(T * r.kP * lanes);
  s.row.resize(Pr);
}

// What both sweeps of head h read over the whole sequence: dt, d dt / d dt_in and the decays,
// the forward and adjoint scales, D; and its state set to the initial state (zeros without).
void StartHead(const BwdRun& r, int64_t h, BwdHead& hd) {
  const SsdBwdParams& p = r.p;
  const int64_t L = r.L, P = r.P, N = r.N, Nn = r.Nn, Pr = r.Pr;
  const int64_t checkpoints = (L + r.K - 1) / r.K;
  for (auto* v : {&hd.dt, &hd.dt_grad, &hd.decay, &hd.fmult, &hd.alpha, &hd.amult, &hd.beta,
                  &hd.cdc, &hd.xg}) {
    v->resize(L);
  }
  hd.skip.assign(Pr, 0.0f);
  for (int64_t i = 0; i < P && p.D.data; ++i) {
    hd.skip[i] = p.D.data[h * p.D.stride_head + (p.d_per_channel ? i * p.D.stride_p : 0)];
  }
  hd.dD.assign(Pr, 0.0f);
  hd.S.Assign(Pr * Nn);
  hd.checkpoints.Grow(checkpoints * Pr * Nn);
  hd.dlog_a_at.assign(checkpoints + 1, 0.0);
  ssd::DtRow(p, r.b, h, 0, L, hd.dt.data(), hd.dt_grad.data(), hd.decay.data());
  ForwardScales(p, r.b, hd.decay.data(), hd.fmult.data(), hd.alpha.data());
  AdjointScales(p, r.b, hd.decay.data(), hd.amult.data(), hd.beta.data());
  if (p.initial_states.data) {
    const SsdStateView& v = p.initial_states;
    const float* src = v.data + r.b * v.stride_batch + h * v.stride_head;
    for (int64_t i = 0; i < P; ++i)
      std::copy(src + i * v.stride_p, src + i * v.stride_p + N, hd.S.data() + i * Nn);
  }
}

// Checkpoint t0 / K: h_{t0-1} = alpha S, for the adjoint sweep's exact dLoss/dlog(a_t0).
void StoreCheckpoint(const BwdRun& r, int64_t t0, BwdHead& hd) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), size = r.Pr * r.Nn;
  const auto al = hn::Set(df, hd.alpha[t0 - 1]);
  float* ck = Checkpoint(hd, t0 / r.K, size);
  // Streaming stores: the checkpoints (MBs) are read back only in the adjoint sweep; a normal
  // store would first read every line in (fwd+bwd 1-2% faster, A/B).
  for (int64_t i = 0; i < size; i += lanes)
    hn::Stream(hn::Mul(al, hn::LoadU(df, hd.S.data() + i)), df, ck + i);
}

// Adds this head's dC over steps [t0, t0 + Tn) to the task's partial dC_part (L, Nn), and
// keeps <dy_t, C_t h_t> in hd.cdc. nbuf (Tn, Nn): sum_p dy[p] S[p] from the tiles, which
// alpha turns into the head's dC_t.
void AddHeadDC(const BwdRun& r, int64_t t0, int64_t Tn, const float* nbuf, BwdHead& hd,
               float* dC_part) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), Nn = r.Nn;
  for (int64_t t = 0; t < Tn; ++t) {
    const auto al = hn::Set(df, hd.alpha[t0 + t]);
    float* HWY_RESTRICT dCt = dC_part + (t0 + t) * Nn;
    const float* HWY_RESTRICT nt = nbuf + t * Nn;
    const float* HWY_RESTRICT Ct = r.Cp.Row(r.b, r.g, t0 + t);  // zeros from N to Nn
    auto cdc = hn::Zero(df);
    for (int64_t n = 0; n < Nn; n += lanes) {  // v = this head's dC_t; dC += v
      const auto v = hn::Mul(al, hn::LoadU(df, nt + n));
      hn::StoreU(hn::Add(hn::LoadU(df, dCt + n), v), df, dCt + n);
      cdc = hn::MulAdd(hn::LoadU(df, Ct + n), v, cdc);
    }
    hd.cdc[t0 + t] = hn::GetLane(hn::SumOfLanes(df, cdc));  // <dy_t, C_t h_t>
  }
}

// dz of head h over steps [t0, t0 + Tn) from y = alpha (C . S) + D x, the pre-gate output;
// s.pbuf (Tn, Pr) holds C . S from the tiles and is overwritten with y. x is read again:
// s.xs holds dt x / alpha.
void StoreHeadDz(const BwdRun& r, int64_t h, int64_t t0, int64_t Tn, const BwdHead& hd,
                 BwdScratch& s) {
  const SsdBwdParams& p = r.p;
  const int64_t P = r.P, Pr = r.Pr;
  for (int64_t t = 0; t < Tn; ++t) {
    const float al = hd.alpha[t0 + t];
    RowToF32(p.x.data, p.x.dtype, p.x.Offset(r.b, t0 + t, h), P, s.row.data());
    for (int64_t i = 0; i < P; ++i)
      s.pbuf.data()[t * Pr + i] = al * s.pbuf.data()[t * Pr + i] + hd.skip[i] * s.row[i];
  }
  ssd::StoreDz(p, r.b, h, t0, Tn, s.pbuf.data(), Pr);
}

// The tiles' arguments for either sweep of head hd over steps [t0, t0 + Tn): B and C rows in
// s.bc, x rows in s.Rows(kXs), the sweep's dy rows s.Rows(dy) and scales mult (L), and the
// block buffers of s.
BwdTileArgs SweepTileArgs(const BwdRun& r, int64_t t0, int64_t Tn, int dy, const float* mult,
                          BwdHead& hd, BwdScratch& s) {
  const int64_t rescales = RescaleSteps(mult + t0, Tn, s.rescale.data());
  return {s.bc.data(),
          s.Rows(BwdScratch::kXs),
          (dy - BwdScratch::kXs) * s.rows_size,
          mult + t0,
          s.rescale.data(),
          rescales,
          s.nbuf.data(),
          s.pvec.data(),
          hd.S.data(),
          Tn,
          r.Pr,
          r.Nn};
}

// Forward sweep, head h, time block at t0: the states again (checkpointed every K steps),
// this head's dC into dC_part (L, Nn), <dy_t, C_t h_t>, and dz when asked for.
void ForwardSweepBlock(const BwdRun& r, int64_t h, int64_t t0, float* dC_part, BwdScratch& s) {
  const SsdBwdParams& p = r.p;
  const int64_t T = kBwdBlock, Tn = std::min(T, r.L - t0), P = r.P, Pr = r.Pr;
  BwdHead& hd = s.heads[h - r.h0];
  if (t0 % r.K == 0 && t0 > 0) StoreCheckpoint(r, t0, hd);
  for (int64_t t = 0; t < Tn; ++t) s.scale[t] = hd.dt[t0 + t] / hd.alpha[t0 + t];
  ssd::LoadScaledX(p.x, P, r.b, h, t0, Tn, s.scale.data(), s.Rows(BwdScratch::kXs), Pr, Pr);
  ssd::LoadDy(p, r.b, h, t0, Tn, nullptr, s.Rows(BwdScratch::kDy), Pr, Pr);
  const BwdTileArgs a = SweepTileArgs(r, t0, Tn, BwdScratch::kDy, hd.fmult.data(), hd, s);
  RowPrefetch next =
      NextHeadRows({&p.x, &p.dout, &p.z, nullptr}, P, r.L, r.b, h, r.h0, r.h1, t0, T);
  const bool with_y = p.z.data && p.dz.data;
  if (with_y) {
    BwdTilesAnyShape<false, true>(a, r.kV, s.pbuf.data(), next);
  } else {
    BwdTilesAnyShape<false, false>(a, r.kV, s.pbuf.data(), next);
  }
  AddHeadDC(r, t0, Tn, s.nbuf.data(), hd, dC_part);
  if (with_y) StoreHeadDz(r, h, t0, Tn, hd, s);
}

// Between the sweeps: <dfinal, h_{L-1}>, the final state's share of dLoss/dLambda_{L-1}, while
// S still holds the last state; then S becomes the adjoint state, starting from dfinal.
void StartAdjointState(const BwdRun& r, int64_t h, BwdHead& hd) {
  const DF df;
  const SsdBwdParams& p = r.p;
  const int64_t P = r.P, N = r.N, Nn = r.Nn;
  hd.final_term = 0.0;
  if (p.dfinal_states.data) {
    const SsdStateView& v = p.dfinal_states;
    const float* src = v.data + r.b * v.stride_batch + h * v.stride_head;
    for (int64_t i = 0; i < P; ++i)
      hd.final_term += DotF64(df, src + i * v.stride_p, hd.S.data() + i * Nn, N);
    hd.final_term *= hd.alpha[r.L - 1];
  }
  std::fill(hd.S.data(), hd.S.data() + hd.S.size(), 0.0f);
  if (p.dfinal_states.data) {
    const SsdStateView& v = p.dfinal_states;
    const float* src = v.data + r.b * v.stride_batch + h * v.stride_head;
    for (int64_t i = 0; i < P; ++i)
      std::copy(src + i * v.stride_p, src + i * v.stride_p + N, hd.S.data() + i * Nn);
  }
}

// The adjoint sweep's rows of head h over steps [t0, t0 + Tn): x into s.xs, dy into s.dy and
// dy / beta, the scaled adjoint's input, into s.dys (Tn, Pr each).
void LoadAdjointRows(const BwdRun& r, int64_t h, int64_t t0, int64_t Tn, const BwdHead& hd,
                     BwdScratch& s) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), Pr = r.Pr;
  ssd::LoadScaledX(r.p.x, r.P, r.b, h, t0, Tn, nullptr, s.Rows(BwdScratch::kXs), Pr, Pr);
  ssd::LoadDy(r.p, r.b, h, t0, Tn, nullptr, s.Rows(BwdScratch::kDy), Pr, Pr);
  for (int64_t t = 0; t < Tn; ++t) {
    const auto inv_beta = hn::Set(df, 1.0f / hd.beta[t0 + t]);
    for (int64_t i = 0; i < Pr; i += lanes) {
      hn::StoreU(hn::Mul(inv_beta, hn::LoadU(df, s.Rows(BwdScratch::kDy) + t * Pr + i)), df,
                 s.Rows(BwdScratch::kDys) + t * Pr + i);
    }
  }
}

// From the adjoint tiles' gB = B . G (s.pbuf) and dB sums (s.nbuf) of head h over steps
// [t0, t0 + Tn): writes dx = D dy + dt g B, keeps <x_t, g_t B_t> in hd.xg, and adds
// dt beta nbuf, this head's dB_t, to the task's partial dB_part (L, Nn).
void StoreDxAddDB(const BwdRun& r, int64_t h, int64_t t0, int64_t Tn, BwdHead& hd, BwdScratch& s,
                  float* dB_part) {
  const DF df;
  const SsdBwdParams& p = r.p;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), P = r.P, Pr = r.Pr, Nn = r.Nn;
  // Locals, restrict: stores through dx_row would otherwise make the compiler reload every
  // pointer from the vectors for each vector of a row.
  const float* HWY_RESTRICT skip = hd.skip.data();
  // An f32 dx is written in place (its rows are P floats; a vector past P would overrun them,
  // so that needs P a multiple of the vector); otherwise through s.row and RowFromF32.
  const bool in_place = p.dx.data && p.dx.dtype == DType::kF32 && P == Pr;
  for (int64_t t = 0; t < Tn; ++t) {
    float* HWY_RESTRICT dx_row =
        in_place ? static_cast<float*>(p.dx.data) + p.dx.Offset(r.b, t0 + t, h) : s.row.data();
    const float bt = hd.beta[t0 + t], dt = hd.dt[t0 + t];
    const float* HWY_RESTRICT xt = s.Rows(BwdScratch::kXs) + t * Pr;
    const float* HWY_RESTRICT dyt = s.Rows(BwdScratch::kDy) + t * Pr;
    const float* HWY_RESTRICT gB = s.pbuf.data() + t * Pr;
    const auto btv = hn::Set(df, bt), dtv = hn::Set(df, dt);
    auto xg = hn::Zero(df);
    for (int64_t i = 0; i < Pr; i += lanes) {
      const auto gv = hn::Mul(btv, hn::LoadU(df, gB + i));  // g_t B_t
      const auto dyv = hn::LoadU(df, dyt + i), xv = hn::LoadU(df, xt + i);
      hn::StoreU(hn::MulAdd(hn::LoadU(df, skip + i), dyv, hn::Mul(dtv, gv)), df, dx_row + i);
      xg = hn::MulAdd(xv, gv, xg);
    }
    hd.xg[t0 + t] = hn::GetLane(hn::SumOfLanes(df, xg));  // <x_t, g_t B_t>
    if (p.dx.data && !in_place) {
      RowFromF32(dx_row, P, p.dx.data, p.dx.dtype, p.dx.Offset(r.b, t0 + t, h));
    }
    const auto scale = hn::Set(df, dt * bt);
    float* dBt = dB_part + (t0 + t) * Nn;
    const float* nt = s.nbuf.data() + t * Nn;
    for (int64_t n = 0; n < Nn; n += lanes) {
      hn::StoreU(hn::MulAdd(scale, hn::LoadU(df, nt + n), hn::LoadU(df, dBt + n)), df, dBt + n);
    }
  }
}

// dD += sum_t dy_t x_t over a block of Tn steps, in registers over the block (the same order
// as a running sum in memory, without a load waiting on the previous step's store).
void AddHeadDD(const BwdRun& r, int64_t Tn, const BwdScratch& s, BwdHead& hd) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), Pr = r.Pr;
  float* HWY_RESTRICT dD = hd.dD.data();
  for (int64_t i = 0; i < Pr; i += lanes) {
    auto acc = hn::LoadU(df, dD + i);
    for (int64_t t = 0; t < Tn; ++t)
      acc = hn::MulAdd(hn::LoadU(df, s.Rows(BwdScratch::kDy) + t * Pr + i),
                       hn::LoadU(df, s.Rows(BwdScratch::kXs) + t * Pr + i), acc);
    hn::StoreU(acc, df, dD + i);
  }
}

// Adjoint sweep, head h, time block at t0 (last block first): the adjoint state back through
// the block, dx, this head's dB into dB_part (L, Nn), <x_t, g_t B_t>, dD, and at a checkpoint
// the exact dLoss/dlog(a_t0) = a_t0 <g_t0, h_{t0-1}> (g_t0 = beta G).
void AdjointSweepBlock(const BwdRun& r, int64_t h, int64_t t0, float* dB_part, BwdScratch& s) {
  const DF df;
  const SsdBwdParams& p = r.p;
  const int64_t T = kBwdBlock, Tn = std::min(T, r.L - t0), Pr = r.Pr, Nn = r.Nn;
  BwdHead& hd = s.heads[h - r.h0];
  LoadAdjointRows(r, h, t0, Tn, hd, s);
  const BwdTileArgs a = SweepTileArgs(r, t0, Tn, BwdScratch::kDys, hd.amult.data(), hd, s);
  RowPrefetch next =
      NextHeadRows({&p.x, &p.dout, &p.z, &p.dx}, r.P, r.L, r.b, h, r.h0, r.h1, t0, -T);
  const bool at_checkpoint = t0 % r.K == 0 && t0 > 0;
  // The checkpoint read below was written with streaming stores: in memory, not in a cache.
  if (at_checkpoint) next.AlsoLines(Checkpoint(hd, t0 / r.K, Pr * Nn), Pr * Nn * sizeof(float));
  BwdTilesAnyShape<true, false>(a, r.kV, s.pbuf.data(), next);
  StoreDxAddDB(r, h, t0, Tn, hd, s, dB_part);
  AddHeadDD(r, Tn, s, hd);
  if (at_checkpoint) {
    const double dot = DotF64(df, hd.S.data(), Checkpoint(hd, t0 / r.K, Pr * Nn), Pr * Nn);
    hd.dlog_a_at[t0 / r.K] = ssd::ResetAt(p, r.b, t0) ? 0.0 : dot * hd.beta[t0] * hd.decay[t0];
  }
}

// dinitial_states of head h: g_{-1} = a_0 g_0, with S the adjoint state after the sweep.
void StoreDinitialState(const BwdRun& r, int64_t h, const BwdHead& hd) {
  const SsdStateView& v = r.p.dinitial_states;
  float* dst = v.data + r.b * v.stride_batch + h * v.stride_head;
  const float scale = hd.decay[0] * hd.beta[0];
  for (int64_t i = 0; i < r.P; ++i)
    for (int64_t n = 0; n < r.N; ++n) dst[i * v.stride_p + n] = scale * hd.S.data()[i * r.Nn + n];
}

// ddt of head h (written) and its sums dA, ddt_bias over the sequence, through
// dLoss/dlog(a_u) = sum of dLoss/dLambda_t over t >= u in u's sequence. From a checkpoint e on,
// the sum is replaced by the exact dLoss/dlog(a_e), so that f32 rounding of the terms
// accumulates over at most K steps.
void DecayGrads(const BwdRun& r, int64_t h, const BwdHead& hd, double* dA_sum,
                double* ddt_bias_sum) {
  const SsdBwdParams& p = r.p;
  const int64_t L = r.L, K = r.K, b = r.b;
  const float A = p.A.data[h * p.A.stride_head];
  double acc = 0.0, dA = 0.0, ddt_bias = 0.0;
  for (int64_t t = L - 1; t >= 0; --t) {
    if ((t + 1) % K == 0 && t + 1 < L) acc = hd.dlog_a_at[(t + 1) / K];
    acc += static_cast<double>(hd.cdc[t]) - static_cast<double>(hd.dt[t]) * hd.xg[t] +
           (t == L - 1 ? hd.final_term : 0.0);
    const bool reset = ssd::ResetAt(p, b, t);
    const double dlog_a = reset ? 0.0 : acc;  // a reset discards a_t
    if (reset) acc = 0.0;
    dA += dlog_a * hd.dt[t];
    const float ddt = static_cast<float>((dlog_a * A + hd.xg[t]) * hd.dt_grad[t]);
    ddt_bias += ddt;
    if (p.ddt.data)
      StoreFromF32(p.ddt.data, p.ddt.dtype, b * p.ddt.stride_batch + t * p.ddt.stride_seq + h, ddt);
  }
  *dA_sum = dA;
  *ddt_bias_sum = ddt_bias;
}

// After both sweeps: head h's dinitial_states, ddt, and its dA, ddt_bias, dD partials.
void FinishHead(const BwdRun& r, int64_t h, const BwdHead& hd, const ssd::TaskGrads& grads) {
  const SsdBwdParams& p = r.p;
  if (p.dinitial_states.data) StoreDinitialState(r, h, hd);
  double dA = 0.0, ddt_bias = 0.0;
  DecayGrads(r, h, hd, &dA, &ddt_bias);
  const int64_t bh = r.b * p.nheads + h;
  std::copy(hd.dD.begin(), hd.dD.begin() + r.P, grads.dD + bh * r.P);
  grads.dA[bh] = static_cast<float>(dA);
  grads.ddt_bias[bh] = static_cast<float>(ddt_bias);
}

// Heads [r.h0, r.h1) of batch row r.b (one group), time block by time block: accumulates
// their dB, dC into the task partials and writes their dx, ddt, dz, dinitial_states and
// their dA, ddt_bias, dD partials.
void BackwardHeads(const BwdRun& r, const ssd::TaskGrads& grads, BwdScratch& s) {
  const int64_t L = r.L, T = kBwdBlock;
  SizeBlockScratch(r, s);
  for (int64_t h = r.h0; h < r.h1; ++h) StartHead(r, h, s.heads[h - r.h0]);
  for (int64_t t0 = 0; t0 < L; t0 += T) {
    CopyBlockBCRuns(r.Bp, r.Cp, r.b, r.g, t0, std::min(T, L - t0), r.Nn, r.Nn, s.bc.data());
    for (int64_t h = r.h0; h < r.h1; ++h) ForwardSweepBlock(r, h, t0, grads.dC, s);
  }
  for (int64_t h = r.h0; h < r.h1; ++h) StartAdjointState(r, h, s.heads[h - r.h0]);
  for (int64_t t0 = (L - 1) / T * T; t0 >= 0; t0 -= T) {
    CopyBlockBCRuns(r.Bp, r.Cp, r.b, r.g, t0, std::min(T, L - t0), r.Nn, r.Nn, s.bc.data());
    for (int64_t h = r.h0; h < r.h1; ++h) AdjointSweepBlock(r, h, t0, grads.dB, s);
  }
  for (int64_t h = r.h0; h < r.h1; ++h) FinishHead(r, h, s.heads[h - r.h0], grads);
}

void SequentialBackwardImpl(const SsdBwdParams& p) {
  ssd::RunBackwardTasks(p, [&p](const ssd::BackwardTask& task) {
    thread_local BwdScratch s;  // kept between calls: no page faults per call
    for (int64_t h = task.h_begin; h < task.h_end; h += kBwdHeadsTogether) {
      const int64_t h1 = std::min(task.h_end, h + kBwdHeadsTogether);
      BackwardHeads(MakeBwdRun(p, task, h, h1), task.grads, s);
    }
  });
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu::ssd {

HWY_EXPORT(SequentialBackwardImpl);

void SequentialBackward(const SsdBwdParams& p) { HWY_DYNAMIC_DISPATCH(SequentialBackwardImpl)(p); }

}  // namespace ssmkit::cpu::ssd
#endif  // HWY_ONCE

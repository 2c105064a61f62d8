// CPU SSD, sequential algorithm, forward: the recurrence one step at a time, SIMD over the
// state (the scaled recurrence of ssd_sequential-inl.h), and for short sequences (decode) the
// plain recurrence.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to 16, Pp P padded to the vector width, T time block.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/aligned_floats.hpp"
#include "core/parallel.hpp"
#include "cpu/ssd_common.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/ssd_sequential_forward.cpp"
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
// tile (32 vector registers on AVX-512, 16 on AVX2) and the most p-vectors per tile. On
// AVX-512 a 4 x 4 tile (16 state registers) is the fastest on the AMD EPYC (Zen 4) of
// docs/targets.md: m2-130m forward on one thread 20.6-21.0 ms against 22.2-22.9 ms for 8 x 4,
// whose 32 state vectors spill to the stack every step there (16 x 2: 21.0-21.4 ms). On AVX2
// (Zen 3, one thread, A/B interleaved, three rounds): the 2 x 4 tile's state, x and y vectors
// do not fit in 16 registers (the compiler re-read x for every state row); 4 x 2 holds them:
// 33.3-34.0 ms against 36.1-37.7.
constexpr int kFwdStateRegs = HWY_MAX_BYTES >= 64 ? 16 : 8;
constexpr int kFwdTileVectors = HWY_MAX_BYTES >= 64 ? 4 : 2;
constexpr int64_t kFwdBlock = 64;
// Sequences this short take the transpose-free plain recurrence (ForwardHeadShort).
constexpr int64_t kShortSequence = 8;

// ---------------------------------------------------------------------------------------
// Forward: state (Nn, Pp), vectors over p. Per step and tile of kN states x kPV vectors:
//   S[n] += xs * B[n];  y += C[n] * S[n]      (xs = dt x / alpha)
// y needs no horizontal sum: its lanes are the p of the output.
//
// A step of the tile is 2 kN kPV FMAs beside 2 kN broadcasts, kPV loads and kPV stores, so
// its other instructions decide whether the FMA units stay busy (AVX2's 4 x 2 tile: 16 FMAs
// in ~38 instructions, near the 6 a cycle the core dispatches). Hence B and C share one run of
// lines and xs and y one row (one pointer each to advance), the steps where the state is rescaled
// are found once per head and block instead of tested every step, and the first tile of a
// column has its own loop (it stores y, the others add to it). On the AMD EPYC (Zen 4) forced
// to AVX2, with every operand in L1: 8.8 cycles a step against 11.0 before (8 for the FMAs).

struct FwdTileArgs {
  const float* bc;         // (Nn / 16, T, 2, 16): CopyBlockBCRuns' lines of B and C
  float* xy;               // (T, ld): xs (Pp), then y (Pp), accumulated over the tiles of a column
  const float* mult;       // (T)
  const int64_t* rescale;  // the steps t with mult[t] != 1, ascending
  int64_t rescales;
  float* S;  // (Nn, Pp)
  int64_t T, Nn, Pp, ld;
};

// xy's row stride: a line more than its 2 Pp floats. At 2 Pp = 128 (512 bytes) a tile's lines
// of x and y over a block's 64 steps would fall in 16 of L1's 64 sets, 8 a set, beside the
// lines of B and C.
inline int64_t XyStride(int64_t Pp) { return 2 * Pp + kBcLine; }

// `steps` steps of a tile whose state is S, from the lines at bc and the rows at xy (offset
// to the tile's first state and vector).
template <int kN, int kPV, bool kFirst>
HWY_INLINE void FwdSteps(const float* HWY_RESTRICT bc, float* HWY_RESTRICT xy, int64_t steps,
                         int64_t Pp, int64_t ld, VF (&S)[kN][kPV]) {
  static_assert(kBcLine % kN == 0, "a tile's states lie in one line");
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const float* end = bc + steps * 2 * kBcLine;
  for (; bc != end; bc += 2 * kBcLine, xy += ld) {
    VF xv[kPV], y[kPV];
    for (int j = 0; j < kPV; ++j) xv[j] = hn::LoadU(df, xy + j * lanes);
    for (int i = 0; i < kN; ++i) {
      const VF bi = hn::Set(df, bc[i]), ci = hn::Set(df, bc[kBcLine + i]);
      for (int j = 0; j < kPV; ++j) {
        S[i][j] = hn::MulAdd(xv[j], bi, S[i][j]);
        y[j] = i > 0 ? hn::MulAdd(ci, S[i][j], y[j])
                     : StartSum(ci, S[i][j], kFirst, xy + Pp + j * lanes);
      }
    }
    for (int j = 0; j < kPV; ++j) hn::StoreU(y[j], df, xy + Pp + j * lanes);
  }
}

// The tile of states [n0, n0 + kN) and p-vectors from p0 through the T steps. The first tile
// of a column (first) stores y, the others add to it.
template <int kN, int kPV>
HWY_NOINLINE void FwdTile(const FwdTileArgs& a, int64_t n0, int64_t p0, bool first) {
  const int64_t Pp = a.Pp;
  VF S[kN][kPV];
  LoadTile(a.S + n0 * Pp + p0, Pp, S);
  int64_t t = 0;
  for (int64_t k = 0;; ++k) {  // runs of steps between rescales
    const int64_t stop = k < a.rescales ? a.rescale[k] : a.T;
    const float* bc = a.bc + (n0 / kBcLine * a.T + t) * 2 * kBcLine + n0 % kBcLine;
    float* xy = a.xy + t * a.ld + p0;
    if (first) {
      FwdSteps<kN, kPV, true>(bc, xy, stop - t, Pp, a.ld, S);
    } else {
      FwdSteps<kN, kPV, false>(bc, xy, stop - t, Pp, a.ld, S);
    }
    if (k == a.rescales) break;
    ScaleTile(a.mult[stop], S);
    t = stop;
  }
  StoreTile(S, Pp, a.S + n0 * Pp + p0);
}

template <int kPV>
void FwdTiles(const FwdTileArgs& a, RowPrefetch& next) {
  constexpr int kN = std::min(16, kFwdStateRegs / kPV);  // divides Nn (a multiple of 16)
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t tiles = a.Pp / (kPV * lanes) * (a.Nn / kN);
  next.Spread(tiles);
  for (int64_t p0 = 0; p0 < a.Pp; p0 += kPV * lanes)
    for (int64_t n0 = 0; n0 < a.Nn; n0 += kN) {
      next.Step();
      FwdTile<kN, kPV>(a, n0, p0, n0 == 0);
    }
}

// Heads processed together, time block by time block: neighbouring heads share the pages
// and cache lines of x and out, which a head-by-head walk over L (rows H*P apart) would
// miss every step. Tuned for speed, does not affect correctness.
constexpr int64_t kHeadsTogether = 16;

// The buffers the tiles load and store vectors from start on cache lines: in a std::vector
// (16-byte aligned) every other AVX2 vector of xs and y straddles two lines, and the forward
// ran 15-20% slower or not depending on where the allocator put them.
struct FwdHead {
  std::vector<float> dt, decay, mult, alpha;  // (L)
  AlignedFloats S;                            // (Nn, Pp)
};

struct FwdScratch {
  std::vector<FwdHead> heads;
  std::vector<float> scale;      // (T)
  AlignedFloats bc, xy;          // FwdTileArgs' lines and rows
  std::vector<int64_t> rescale;  // (<= T)
};

// Heads [h0, h1) of batch row b.
void ForwardHeads(const SsdParams& p, const PackedBC& Bp, const PackedBC& Cp, int64_t b, int64_t h0,
                  int64_t h1, FwdScratch& s) {
  const DF df;
  const int64_t L = p.seqlen, P = p.headdim, N = p.dstate, Nn = RoundUp(N, 16);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), Pp = RoundUp(P, lanes),
                nPV = Pp / lanes;
  if (static_cast<int64_t>(s.heads.size()) < h1 - h0) s.heads.resize(h1 - h0);  // never shrunk
  s.scale.resize(kFwdBlock);
  s.bc.Grow(kFwdBlock * 2 * Nn);
  const int64_t ld = XyStride(Pp);
  s.xy.Grow(kFwdBlock * ld);
  s.rescale.resize(kFwdBlock);
  for (int64_t h = h0; h < h1; ++h) {
    FwdHead& hd = s.heads[h - h0];
    for (auto* v : {&hd.dt, &hd.decay, &hd.mult, &hd.alpha}) v->resize(L);
    hd.S.Assign(Nn * Pp);
    ssd::DtRow(p, b, h, 0, L, hd.dt.data(), nullptr, hd.decay.data());
    ForwardScales(p, b, hd.decay.data(), hd.mult.data(), hd.alpha.data());
    if (p.initial_states.data) {
      const SsdStateView& v = p.initial_states;
      const float* src = v.data + b * v.stride_batch + h * v.stride_head;
      for (int64_t i = 0; i < P; ++i)
        for (int64_t n = 0; n < N; ++n) hd.S.data()[n * Pp + i] = src[i * v.stride_p + n];
    }
  }
  for (int64_t t0 = 0; t0 < L; t0 += kFwdBlock) {
    const int64_t T = std::min(kFwdBlock, L - t0);
    int64_t rows_of = -1;  // the group whose B and C rows s.bc holds
    for (int64_t h = h0; h < h1; ++h) {
      FwdHead& hd = s.heads[h - h0];
      const int64_t g = h / p.heads_per_group();
      if (g != rows_of) {
        CopyBlockBCRuns(Bp, Cp, b, g, t0, T, Nn, kBcLine, s.bc.data());
        rows_of = g;
      }
      for (int64_t t = 0; t < T; ++t) s.scale[t] = hd.dt[t0 + t] / hd.alpha[t0 + t];
      const int64_t rescales = RescaleSteps(hd.mult.data() + t0, T, s.rescale.data());
      ssd::LoadScaledX(p.x, P, b, h, t0, T, s.scale.data(), s.xy.data(), ld, Pp);
      RowPrefetch next =
          NextHeadRows({&p.x, &p.out, &p.z, nullptr}, P, L, b, h, h0, h1, t0, kFwdBlock);
      const FwdTileArgs a{s.bc.data(),
                          s.xy.data(),
                          hd.mult.data() + t0,
                          s.rescale.data(),
                          rescales,
                          hd.S.data(),
                          T,
                          Nn,
                          Pp,
                          ld};
      const int kPV = TileVectors(nPV, kFwdTileVectors);
      if (kPV == 4) {
        FwdTiles<4>(a, next);
      } else if (kPV == 2) {
        FwdTiles<2>(a, next);
      } else {
        FwdTiles<1>(a, next);
      }
      // h = alpha S
      ssd::StoreOutput(p, b, h, t0, T, s.xy.data() + Pp, ld, hd.alpha.data() + t0);
    }
  }
  if (!p.final_states.data) return;
  for (int64_t h = h0; h < h1; ++h) {
    const FwdHead& hd = s.heads[h - h0];
    const SsdStateView& v = p.final_states;
    float* dst = v.data + b * v.stride_batch + h * v.stride_head;
    const float al = hd.alpha[L - 1];
    for (int64_t i = 0; i < P; ++i)
      for (int64_t n = 0; n < N; ++n) dst[i * v.stride_p + n] = al * hd.S.data()[n * Pp + i];
  }
}

// ---------------------------------------------------------------------------------------
// Short sequences (decode): the plain recurrence with the state as (P, Nn), the layout of
// initial_states and final_states, so nothing is transposed; vectors over n:
//   h[p] = a h[p] + (dt x_p) B;   y_p = C . h[p]   (lane sums of 16 rows at a time)
// For a few steps the transposes of the tiled kernel (2 P N scattered accesses per head)
// cost more than the extra multiply and the lane sums here.

struct ShortScratch {
  std::vector<float> dt, decay, S, dtx, y;  // (L), (L), (P, Nn), (P), (L, P)
};

void ForwardHeadShort(const SsdParams& p, const PackedBC& Bp, const PackedBC& Cp, int64_t b,
                      int64_t h, ShortScratch& s) {
  const DF df;
  const int64_t L = p.seqlen, P = p.headdim, N = p.dstate, Nn = RoundUp(N, 16);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t g = h / p.heads_per_group();
  s.dt.resize(L);
  s.decay.resize(L);
  s.dtx.resize(P);
  s.y.resize(L * P);
  if (static_cast<int64_t>(s.S.size()) != P * Nn) s.S.assign(P * Nn, 0.0f);
  ssd::DtRow(p, b, h, 0, L, s.dt.data(), nullptr, s.decay.data());
  // With N a multiple of 16 the first step reads initial_states and the last writes
  // final_states in place (decode moves the state once); otherwise they go through S.
  // Without initial_states the first step starts from zero and reads no state at all.
  const bool in_place = N == Nn;
  const SsdStateView& h0v = p.initial_states;
  const SsdStateView& hfv = p.final_states;
  const float* h0 = h0v.data ? h0v.data + b * h0v.stride_batch + h * h0v.stride_head : nullptr;
  float* hf = hfv.data ? hfv.data + b * hfv.stride_batch + h * hfv.stride_head : nullptr;
  if (h0 && !in_place) {  // rows of N into S, its padding zero
    std::fill(s.S.begin(), s.S.end(), 0.0f);
    for (int64_t i = 0; i < P; ++i)
      std::copy(h0 + i * h0v.stride_p, h0 + i * h0v.stride_p + N, s.S.data() + i * Nn);
  }
  VF acc[64];
  for (int64_t t = 0; t < L; ++t) {
    const VF a = hn::Set(df, ssd::ResetAt(p, b, t) ? 0.0f : s.decay[t]);
    ssd::LoadScaledX(p.x, P, b, h, t, 1, s.dt.data() + t, s.dtx.data(), P, P);
    const float* Bt = Bp.Row(b, g, t);
    const float* Ct = Cp.Row(b, g, t);
    for (int64_t p0 = 0; p0 < P; p0 += lanes) {
      const int64_t rows = std::min(lanes, P - p0);
      for (int64_t i = 0; i < lanes; ++i) {
        acc[i] = hn::Zero(df);
        if (i >= rows) continue;
        float* row = s.S.data() + (p0 + i) * Nn;
        const float* in = in_place && t == 0 && h0 ? h0 + (p0 + i) * h0v.stride_p : row;
        float* out = in_place && t == L - 1 && hf ? hf + (p0 + i) * hfv.stride_p : row;
        const VF xv = hn::Set(df, s.dtx[p0 + i]);
        const bool from_zero = t == 0 && !h0;
        for (int64_t n = 0; n < Nn; n += lanes) {
          const VF bx = hn::Mul(xv, hn::LoadU(df, Bt + n));
          const VF hv = from_zero ? bx : hn::MulAdd(a, hn::LoadU(df, in + n), bx);
          hn::StoreU(hv, df, out + n);
          acc[i] = hn::MulAdd(hn::LoadU(df, Ct + n), hv, acc[i]);
        }
      }
      HWY_ALIGN float sums[64];
      hn::Store(SumLanesOfEach(df, acc), df, sums);
      std::copy(sums, sums + rows, s.y.data() + t * P + p0);
    }
  }
  ssd::StoreOutput(p, b, h, 0, L, s.y.data(), P);
  if (hf && !in_place) {
    for (int64_t i = 0; i < P; ++i)
      std::copy(s.S.data() + i * Nn, s.S.data() + i * Nn + N, hf + i * hfv.stride_p);
  }
}

void SequentialForwardImpl(const SsdParams& p) {
  ssd::PackedBC Bp, Cp;
  ssd::PackBC(p, p.B, &Bp);
  ssd::PackBC(p, p.C, &Cp);
  const int64_t H = p.nheads;
  if (p.seqlen <= kShortSequence) {
    ParallelFor(p.batch * H, [&](int64_t begin, int64_t end, int) {
      thread_local ShortScratch s;
      for (int64_t task = begin; task < end; ++task)
        ForwardHeadShort(p, Bp, Cp, task / H, task % H, s);
    });
    return;
  }
  ParallelFor(p.batch * H, [&](int64_t begin, int64_t end, int) {
    thread_local FwdScratch s;  // kept between calls: no page faults per call
    // Runs of at most kHeadsTogether heads of one batch row.
    for (int64_t first = begin; first < end;) {
      const int64_t b = first / H, h0 = first % H;
      const int64_t h1 = std::min({H, h0 + kHeadsTogether, end - b * H});
      ForwardHeads(p, Bp, Cp, b, h0, h1, s);
      first = b * H + h1;
    }
  });
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu::ssd {

HWY_EXPORT(SequentialForwardImpl);

void SequentialForward(const SsdParams& p) { HWY_DYNAMIC_DISPATCH(SequentialForwardImpl)(p); }

}  // namespace ssmkit::cpu::ssd
#endif  // HWY_ONCE

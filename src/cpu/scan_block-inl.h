// The channel-tiled selective scan, forward pieces shared by forward and backward.
// Dimension legend: B batch, D channels, L length, N state size, Nq N rounded up to 4, Np N
// rounded up to W, W vector width (channels per tile, and steps per time block), G groups.
//
// A tile is up to W consecutive channels of one (b, group): they read the same B and C rows, so
// one vector holds state index n of W channels and B_l[n], C_l[n] are broadcasts. Every sum runs
// down the vectors (y += C_l[n] h[n]), with no horizontal reduction per step, and the Nq state
// chains are independent, so the step loop is bound by instruction throughput: per state element
// 11 vector ops on AVX-512 (8 for the decay 2^(dt A log2 e), then dt*u*B, the state FMA and the
// C FMA).
//
// Time advances in blocks of W steps. The per-step scalars (dt = softplus(delta + bias), dt * u)
// are computed in row layout (vectors along time, contiguous loads), turned into step layout by
// one in-register W x W transpose, and y goes back the same way before the gate.
#if defined(SSMKIT_CPU_SCAN_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SCAN_BLOCK_INL_H_
#undef SSMKIT_CPU_SCAN_BLOCK_INL_H_
#else
#define SSMKIT_CPU_SCAN_BLOCK_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/round_up.hpp"
#include "cpu/scan_packing.hpp"
#include "cpu/simd_math-inl.h"
#include "cpu/transpose-inl.h"
#include "hwy/highway.h"
#include "params/selective_scan_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using BlockTag = hn::ScalableTag<float>;
using BlockVec = hn::Vec<BlockTag>;
inline constexpr int64_t kBlockWidth = static_cast<int64_t>(hn::MaxLanes(BlockTag()));

inline constexpr float kLog2E = 1.44269504088896341f;

// States are kept in registers in blocks of up to 16 (state rows padded to a multiple of 4).
inline int64_t PaddedStates(int64_t dstate) { return RoundUp(dstate, 4); }

// What a tile reads besides the per-step rows.
struct TileRefs {
  const float* A2;  // (Nq, W) A[d0 + j, n] * log2(e), zero rows for n >= N
  bool decays;      // every dt A2 <= 0 (dt a softplus, A2 <= 0): a decay's exponent is never
                    // above 0
  const float* B;   // (L, Np) packed rows of the tile's (b, group)
  const float* C;   // (L, Np)
  int64_t Np, Nq;
};

// Cache lines to request a few at a time while a step loop computes: the rows the next
// super-block (forward) or chunk (backward, whose chunk-major order visits each row in runs of
// Q steps, too short for the hardware prefetcher) reads, so that their memory time overlaps
// this one's arithmetic; a burst of hundreds of prefetches would stall on the line-fill
// buffers instead.
struct PrefetchQueue {
  std::vector<const char*> lines;
  size_t next = 0, per_step = 0;
  void Clear() {
    lines.clear();
    next = 0;
  }
  // Rows d0 .. d0 + count - 1 of v over steps [l0, l0 + len).
  void AddRows(const SeqView& v, int64_t b, int64_t d0, int64_t count, int64_t l0, int64_t len) {
    if (!v.data) return;
    const int64_t size = DTypeSize(v.dtype);
    const char* first =
        static_cast<const char*>(v.data) + (b * v.stride_batch + d0 * v.stride_dim + l0) * size;
    for (int64_t j = 0; j < count; ++j) {
      const char* row = first + j * v.stride_dim * size;
      const char* end = row + len * size;
      for (const char* line = row; line < end; line += 64) lines.push_back(line);
      if ((reinterpret_cast<uintptr_t>(end - 1) & ~uintptr_t{63}) !=
          (reinterpret_cast<uintptr_t>(end - 64) & ~uintptr_t{63})) {
        lines.push_back(end - 1);  // a row whose end straddles one more line
      }
    }
  }
  // Spreads what is queued over `steps` calls of Issue().
  void Spread(int64_t steps) {
    per_step = (lines.size() - next + steps - 1) / std::max<int64_t>(1, steps);
  }
  HWY_INLINE void Issue() {
    const size_t end = std::min(lines.size(), next + per_step);
    for (; next < end; ++next) __builtin_prefetch(lines[next]);
  }
  void Drain() {
    for (; next < lines.size(); ++next) __builtin_prefetch(lines[next]);
  }
};

// kN states of the tile through `len` steps:
//   a = 2^(dt A2[n]),  h[n] = a h[n] + dt u B_l[n],  y_l += sum_n C_l[n] h[n]
// dt, u, y are (len, W) in step layout (lanes = channels); B, C point at step 0's rows
// (stride Np), already offset to the first of the kN states; h is (kN, W). Each step issues
// pf's next prefetches. kDecays: TileRefs::decays.
template <int kN, bool kDecays>
HWY_INLINE void StepStates(const float* HWY_RESTRICT A2, const float* HWY_RESTRICT B,
                           const float* HWY_RESTRICT C, int64_t Np, const float* HWY_RESTRICT dt,
                           const float* HWY_RESTRICT u, float* HWY_RESTRICT h, int64_t len,
                           float* HWY_RESTRICT y, PrefetchQueue& pf) {
  const BlockTag df;
  constexpr int64_t W = kBlockWidth;
  BlockVec state[kN];
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) state[n] = hn::LoadU(df, h + n * W);
  for (int64_t l = 0; l < len; ++l, B += Np, C += Np) {
    pf.Issue();
    const BlockVec dt_l = hn::LoadU(df, dt + l * W);
    const BlockVec dtu_l = hn::Mul(dt_l, hn::LoadU(df, u + l * W));
    BlockVec acc0 = hn::LoadU(df, y + l * W), acc1 = hn::Zero(df);
    HWY_UNROLL(16)
    for (int n = 0; n < kN; ++n) {
      const BlockVec a = Exp2Fast<kDecays>(df, hn::Mul(dt_l, hn::LoadU(df, A2 + n * W)));
      state[n] = hn::MulAdd(a, state[n], hn::Mul(dtu_l, hn::Set(df, B[n])));
      if (n % 2 == 0) {
        acc0 = hn::MulAdd(hn::Set(df, C[n]), state[n], acc0);
      } else {
        acc1 = hn::MulAdd(hn::Set(df, C[n]), state[n], acc1);
      }
    }
    hn::StoreU(hn::Add(acc0, acc1), df, y + l * W);
  }
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) hn::StoreU(state[n], df, h + n * W);
}

// fn(n0, std::integral_constant<int, kN>) for each block of up to kMax (16, 8 or 4) of the Nq
// states (a multiple of 4).
template <int kMax, class Fn>
HWY_INLINE void ForStateBlocks(int64_t Nq, Fn&& fn) {
  for (int64_t n0 = 0; n0 < Nq; n0 += kMax) {
    switch (std::min<int64_t>(kMax, Nq - n0)) {
      case 4:
        fn(n0, std::integral_constant<int, 4>());
        break;
      case 8:
        fn(n0, std::integral_constant<int, 8>());
        break;
      case 12:
        fn(n0, std::integral_constant<int, 12>());
        break;
      default:
        fn(n0, std::integral_constant<int, kMax>());
        break;
    }
  }
}

// fn(std::bool_constant<decays>()): a step loop's kDecays (TileRefs::decays) as a template
// argument.
template <class Fn>
HWY_INLINE void WithDecays(bool decays, Fn&& fn) {
  if (decays) {
    fn(std::true_type());
  } else {
    fn(std::false_type());
  }
}

// States a step loop keeps in registers. On AVX2 (16 registers) the compiler stores and
// reloads most of 16 states every step, yet blocks of 8 ran no faster alone in L1 (the loads
// and stores issue beside the arithmetic, which bounds the loop) and re-read dt, u and y per
// block. Tuned for speed, does not affect results.
inline constexpr int kStepStates = 16;

// All Nq states of the tile through `len` steps (B, C at the first step's rows), starting from
// y_l = D u_l (skip: (W) per channel).
HWY_INLINE void StepTile(const TileRefs& t, const float* B, const float* C, const float* dt,
                         const float* u, const float* skip, float* h, int64_t len, float* y,
                         PrefetchQueue& pf) {
  const BlockTag df;
  const BlockVec D = hn::LoadU(df, skip);
  for (int64_t l = 0; l < len; ++l) {
    hn::StoreU(hn::Mul(D, hn::LoadU(df, u + l * kBlockWidth)), df, y + l * kBlockWidth);
  }
  ForStateBlocks<kStepStates>(t.Nq, [&](int64_t n0, auto kN) {
    WithDecays(t.decays, [&](auto decays) {
      StepStates<decltype(kN)::value, decltype(decays)::value>(
          t.A2 + n0 * kBlockWidth, B + n0, C + n0, t.Np, dt, u, h + n0 * kBlockWidth, len, y, pf);
    });
  });
}

// Steps per super-block: a tile's rows are prepared, scanned and finished this many steps at a
// time. Each row is read and written in contiguous runs (what the hardware prefetcher follows
// best: with runs of 128 steps the m1-130m forward ran 2x slower, memory-latency bound), and
// the super-block's buffers (5 x W x S floats, 640 KiB on AVX-512) stay in L2.
// Tuned for speed, does not affect results.
inline constexpr int64_t kSuperBlock = 1024;

// A tile's per-step values for one super-block of up to S steps. Row layout: [channel j][step],
// lanes = steps; step layout: [step][channel j], lanes = channels.
struct SuperBlock {
  int64_t S;   // steps held, a multiple of W
  float* u;    // (W, S) row layout
  float* row;  // (W, S) row layout scratch: dt, later y
  float* dt;   // (S, W) step layout
  float* ut;   // (S, W) step layout u
  float* y;    // (S, W) step layout C.h
  float* one;  // (S) one row of scratch
  // Room for `steps` steps (rounded up to W).
  SuperBlock(int64_t steps, ScratchSlot slot) {
    S = RoundUp(steps, kBlockWidth);
    const int64_t size = kBlockWidth * S;
    u = ThreadScratch(slot, 5 * size + S);
    row = u + size;
    dt = row + size;
    ut = dt + size;
    y = ut + size;
    one = y + size;
  }
};

inline int64_t PadToBlock(int64_t len) { return RoundUp(len, kBlockWidth); }

// Row layout (W, S) -> step layout (S, W) over `padded` steps (a multiple of W), or back.
inline HWY_NOINLINE void RowsToSteps(const float* rows, int64_t S, int64_t padded, float* steps) {
  const BlockTag df;
  for (int64_t l = 0; l < padded; l += kBlockWidth) {
    BlockVec v[kBlockWidth];
    for (int64_t j = 0; j < kBlockWidth; ++j) v[j] = hn::LoadU(df, rows + j * S + l);
    TransposeSquare(df, v);
    for (int64_t i = 0; i < kBlockWidth; ++i) hn::StoreU(v[i], df, steps + (l + i) * kBlockWidth);
  }
}

inline HWY_NOINLINE void StepsToRows(const float* steps, int64_t S, int64_t padded, float* rows) {
  const BlockTag df;
  for (int64_t l = 0; l < padded; l += kBlockWidth) {
    BlockVec v[kBlockWidth];
    for (int64_t i = 0; i < kBlockWidth; ++i) v[i] = hn::LoadU(df, steps + (l + i) * kBlockWidth);
    TransposeSquare(df, v);
    for (int64_t j = 0; j < kBlockWidth; ++j) hn::StoreU(v[j], df, rows + j * S + l);
  }
}

// Row (b, d) of a (B, D, L) operand over steps [l0, l0 + len) into dst as f32, zeros up to
// the next multiple of W. An f32 row of at least W steps ends with one vector store: its last
// len % W values moved down from the whole vector ending at len, zeros above. The passes that
// read dst back load whole vectors at multiples of W, and a load spanning several smaller
// stores (a copy's tail, then the zero fill) waits for them to reach the cache.
HWY_INLINE void LoadRow(const SeqView& v, int64_t b, int64_t d, int64_t l0, int64_t len,
                        float* dst) {
  const BlockTag df;
  const int64_t offset = b * v.stride_batch + d * v.stride_dim + l0;
  if (v.dtype != DType::kF32 || len < kBlockWidth) {
    RowToF32Simd(df, v.data, v.dtype, offset, len, dst);
    std::fill(dst + len, dst + PadToBlock(len), 0.0f);
    return;
  }
  const float* src = static_cast<const float*>(v.data) + offset;
  int64_t l = 0;
  for (; l + kBlockWidth <= len; l += kBlockWidth) hn::StoreU(hn::LoadU(df, src + l), df, dst + l);
  const int64_t rest = len - l;
  if (rest == 0) return;
  const hn::RebindToSigned<BlockTag> di;
  const auto from =
      hn::Min(hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(l + kBlockWidth - len))),
              hn::Set(di, static_cast<int32_t>(kBlockWidth - 1)));
  const BlockVec last = hn::LoadU(df, src + len - kBlockWidth);
  hn::StoreU(hn::IfThenElseZero(hn::FirstN(df, static_cast<size_t>(rest)),
                                hn::TableLookupLanes(last, hn::IndicesFromVec(df, from))),
             df, dst + l);
}

// u and dt = softplus(delta + bias) of the tile's channels over one super-block, in row and in
// step layout; channels past `count` and steps past `len` are zero. With `dsp` (W, S), also
// d dt / d delta in row layout: sigmoid(delta + bias), 1 above 20 or without softplus.
inline HWY_NOINLINE void PrepareBlock(const SelectiveScanParams& p, int64_t b, int64_t d0,
                                      int64_t count, int64_t l0, int64_t len, SuperBlock& s,
                                      float* dsp = nullptr) {
  const BlockTag df;
  const int64_t padded = PadToBlock(len);
  for (int64_t j = 0; j < kBlockWidth; ++j) {
    float* u = s.u + j * s.S;
    float* dt = s.row + j * s.S;
    if (j >= count) {
      std::fill(u, u + padded, 0.0f);
      std::fill(dt, dt + padded, 0.0f);
      if (dsp) std::fill(dsp + j * s.S, dsp + j * s.S + padded, 0.0f);
      continue;
    }
    const int64_t d = d0 + j;
    LoadRow(p.u, b, d, l0, len, u);
    LoadRow(p.delta, b, d, l0, len, dt);
    const BlockVec bias =
        hn::Set(df, p.delta_bias.data ? p.delta_bias.data[d * p.delta_bias.stride_dim] : 0.0f);
    if (dsp) {
      float* row = dsp + j * s.S;
      for (int64_t l = 0; l < padded; l += kBlockWidth) {
        const BlockVec x = hn::Add(hn::LoadU(df, dt + l), bias);
        const BlockVec one = hn::Set(df, 1.0f);
        const BlockVec grad = p.delta_softplus ? hn::IfThenElse(hn::Gt(x, hn::Set(df, 20.0f)), one,
                                                                SigmoidFast(df, x))
                                               : one;
        hn::StoreU(grad, df, row + l);
      }
    }
    if (p.delta_softplus) {
      for (int64_t l = 0; l < padded; l += kBlockWidth) {
        hn::StoreU(SoftplusFast(df, hn::Add(hn::LoadU(df, dt + l), bias)), df, dt + l);
      }
    } else {
      for (int64_t l = 0; l < padded; l += kBlockWidth) {
        hn::StoreU(hn::Add(hn::LoadU(df, dt + l), bias), df, dt + l);
      }
    }
  }
  RowsToSteps(s.row, s.S, padded, s.dt);
  RowsToSteps(s.u, s.S, padded, s.ut);
}

// s.y (step layout: C.h + D u) -> out = y * silu(z) per channel row, in out's dtype.
HWY_INLINE void FinishBlock(const SelectiveScanParams& p, int64_t b, int64_t d0, int64_t count,
                            int64_t l0, int64_t len, const SuperBlock& s) {
  const BlockTag df;
  const int64_t padded = PadToBlock(len);
  std::fill(s.y + len * kBlockWidth, s.y + padded * kBlockWidth, 0.0f);  // steps never taken
  StepsToRows(s.y, s.S, padded, s.row);
  for (int64_t j = 0; j < count; ++j) {
    const int64_t d = d0 + j;
    float* y = s.row + j * s.S;
    if (p.z.data) {
      LoadRow(p.z, b, d, l0, len, s.one);
      for (int64_t l = 0; l < padded; l += kBlockWidth) {
        const BlockVec z = hn::LoadU(df, s.one + l);
        hn::StoreU(hn::Mul(hn::LoadU(df, y + l), hn::Mul(z, SigmoidFast(df, z))), df, y + l);
      }
    }
    RowFromF32Simd(df, y, len, p.out.data, p.out.dtype,
                   b * p.out.stride_batch + d * p.out.stride_dim + l0);
  }
}

// Channels d0 .. d0 + count - 1 of a (B, D, N) state, or zeros where absent, into an (Nq, W)
// tile (lanes = channels; padded rows and lanes zero).
inline void LoadTileStates(const F32View& v, int64_t b, int64_t d0, int64_t count, int64_t N,
                           int64_t Nq, float* tile) {
  std::fill(tile, tile + Nq * kBlockWidth, 0.0f);
  if (!v.data) return;
  for (int64_t j = 0; j < count; ++j) {
    const float* row = v.data + b * v.stride_batch + (d0 + j) * v.stride_dim;
    for (int64_t n = 0; n < N; ++n) tile[n * kBlockWidth + j] = row[n * v.stride_state];
  }
}

inline void StoreTileStates(const float* tile, const F32View& v, int64_t b, int64_t d0,
                            int64_t count, int64_t N) {
  if (!v.data) return;
  for (int64_t j = 0; j < count; ++j) {
    float* row = v.data + b * v.stride_batch + (d0 + j) * v.stride_dim;
    for (int64_t n = 0; n < N; ++n) row[n * v.stride_state] = tile[n * kBlockWidth + j];
  }
}

// A2 of channels d0 .. d0 + count - 1 from packed A (D, Np): (Nq, W), A * log2(e). Returns
// TileRefs::decays: dt is a softplus (>= 0) and every entry is <= 0.
inline bool PackTileDecay(const float* A, int64_t Np, int64_t d0, int64_t count, int64_t Nq,
                          bool delta_softplus, float* A2) {
  std::fill(A2, A2 + Nq * kBlockWidth, 0.0f);
  bool non_positive = true;
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t n = 0; n < Nq; ++n) {
      const float a2 = A[(d0 + j) * Np + n] * kLog2E;
      A2[n * kBlockWidth + j] = a2;
      non_positive = non_positive && a2 <= 0.0f;
    }
  }
  return delta_softplus && non_positive;
}

// How the channels split into tiles: each (b, group) has ceil(D / G / W) tiles, the last one
// possibly partial. Both B and C must be variable (shared by a tile's channels), and when their
// group counts differ one grouping must nest in the other: tiles follow the finer one.
struct TileLayout {
  int64_t channels_per_group = 0, tiles_per_group = 0, groups = 0;
  int64_t Count() const { return groups * tiles_per_group; }
  // Tile t (within one batch): its first channel and width.
  void Locate(int64_t t, int64_t* d0, int64_t* count) const {
    const int64_t g = t / tiles_per_group, k = t % tiles_per_group;
    *d0 = g * channels_per_group + k * kBlockWidth;
    *count = std::min(kBlockWidth, channels_per_group - k * kBlockWidth);
  }
};

inline TileLayout MakeTileLayout(const SelectiveScanParams& p) {
  TileLayout t;
  t.groups = std::max(p.B.groups, p.C.groups);  // the finer grouping; the other nests in it
  t.channels_per_group = p.dim / t.groups;
  t.tiles_per_group = CeilDiv(t.channels_per_group, kBlockWidth);
  return t;
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SCAN_BLOCK_INL_H_

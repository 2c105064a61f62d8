// CPU selective_state_update: one decode step of both forms, in place on the state.
// Dimension legend: B batch, Bs the state's batch, H heads, P head dim, N state size,
// G groups of B/C, W vector lanes. Mamba-1 arrives as H = D heads of P = 1 (ops layer).
//
// Per (b, h, p), with s = state_batch_indices[b] (b when absent; rows with s < 0 skipped):
//   dt = softplus(dt[b,h] + dt_bias[h]),   h_n = exp(dt A) h_n + (dt x) B_n,   y = C . h + D x,
//   out = y silu(z).
// The per-(b, h) and per-(b, h, p) scalars (dt, x, z, D, the gate) are gathered into short f32
// rows and processed a vector at a time across heads (a row of scalar softplus or sigmoid calls
// would cost more than the state update itself at N = 16); the state rows are updated
// vectorised over n, one (b, h, p) row at a time:
//   Mamba-2 (A per head):   decay = exp(dt A) once per head, then 2 FMAs + 1 FMA per vector
//   Mamba-1 (A per state):  decay = exp(dt A_n) per vector (the exp dominates)
// Work is split over the B * H (b, h) pairs, in chunks that a thread done early takes from the
// other's block; small steps stay on the calling thread.
// At batch 8 and more the SSM states (m1-130m: 2.4 MB per sequence) come from memory at every
// step; where the weight streams prefetch ahead (stream_prefetch.hpp: Intel) each state row also
// fetches the row StreamPrefetchBytes() further on, for writing into L1 (PrefetchLines fetches
// into L2 for reading): the Mamba-1 update's own samples fell by 27-29% at batch 8
// (docs/benchmarks.md).
#include <algorithm>
#include <cmath>

#include "core/dtype.hpp"
#include "core/float_mode.hpp"
#include "core/parallel.hpp"
#include "core/round_up.hpp"
#include "cpu/state_update.hpp"
#include "cpu/stream_prefetch.hpp"
#include "cpu/thread_scratch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/state_update.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Internal linkage: every kernel file defines its helpers in this same per-target namespace.
namespace {

// Below this many state elements (B * H * P * N) a step runs on the calling thread: waking the
// pool costs more than the work. During decode the pool is awake (a fork/join costs ~0.7 us on
// 2 cores) and m1-130m's step (24576 elements, ~20 us on one thread) is worth splitting.
// Tuned for speed only, does not affect results.
constexpr int64_t kMinParallelElements = 1 << 14;

// The fewest state elements a thread takes at once from another's block when it is done with
// its own (ParallelForBalanced). Tuned for speed only.
constexpr int64_t kMinChunkElements = 1 << 12;

// (h, p) entries gathered per segment: bounds the scratch rows. Tuned for speed only.
constexpr int64_t kSegmentEntries = 2048;

int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

// The `bytes` of the state row at `row`, `ahead` bytes further on, fetched for writing (none when
// ahead is 0): the rows are updated in address order, so these are the rows of a few steps on.
HWY_INLINE void FetchRowAhead(const float* row, int64_t bytes, int64_t ahead) {
  if (ahead == 0) return;
  const char* at = reinterpret_cast<const char*>(row) + ahead;
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(at + b, /*rw=*/1, /*locality=*/3);
}

// The rows of one segment (heads [h0, h1) of batch row b), each padded to whole vectors.
struct Scratch {
  float* dt;    // (heads per segment)
  float* x;     // (entries)
  float* z;     // (entries)
  float* skip;  // (entries) D
  float* y;     // (entries)
  float* B;     // (G, N) widened bf16 B of batch row b
  float* C;     // (G, N)
};

struct ScratchLayout {
  int64_t heads, entries, b_size, c_size;
  int64_t Floats() const { return heads + 4 * entries + b_size + c_size; }
  Scratch Carve(float* base) const {
    Scratch s;
    s.dt = base;
    s.x = s.dt + heads;
    s.z = s.x + entries;
    s.skip = s.z + entries;
    s.y = s.skip + entries;
    s.B = s.y + entries;
    s.C = s.B + b_size;
    return s;
  }
};

ScratchLayout MakeScratchLayout(const StateUpdateParams& p) {
  const int64_t heads = std::min(p.heads, std::max<int64_t>(1, kSegmentEntries / p.headdim));
  auto bc = [&](const GroupsView& v) {
    return v.dtype == DType::kF32 ? 0 : RoundUp(v.groups * p.dstate, 16);
  };
  // Rows rounded to 16 floats: whole vectors for any target, no line shared between blocks.
  return {RoundUp(heads, 16), RoundUp(heads * p.headdim, 16), bc(p.B), bc(p.C)};
}

// Row b of B or C as f32 rows of N per group: the input itself when f32, else widened into
// `buffer`. Returns the first group's row; group g is at + g * *group_stride.
const float* GroupRows(const GroupsView& v, int64_t b, int64_t N, float* buffer,
                       int64_t* group_stride) {
  if (v.dtype == DType::kF32) {
    *group_stride = v.stride_group;
    return static_cast<const float*>(v.data) + b * v.stride_batch;
  }
  for (int64_t g = 0; g < v.groups; ++g) {
    RowToF32Simd(DF(), v.data, v.dtype, b * v.stride_batch + g * v.stride_group, N, buffer + g * N);
  }
  *group_stride = N;
  return buffer;
}

// Entries (h, p) of heads [h0, h1) of row b of a (B, H, P) operand, as f32.
void GatherHeads(const HeadsView& v, int64_t b, int64_t h0, int64_t h1, int64_t P, float* dst) {
  const DF df;
  const int64_t base = b * v.stride_batch;
  if (v.stride_head == P) {  // the heads are one contiguous run
    RowToF32Simd(df, v.data, v.dtype, base + h0 * P, (h1 - h0) * P, dst);
    return;
  }
  for (int64_t h = h0; h < h1; ++h)
    RowToF32Simd(df, v.data, v.dtype, base + h * v.stride_head, P, dst + (h - h0) * P);
}

void ScatterHeads(const float* src, const HeadsView& v, int64_t b, int64_t h0, int64_t h1,
                  int64_t P) {
  const DF df;
  const int64_t base = b * v.stride_batch;
  if (v.stride_head == P) {
    RowFromF32Simd(df, src, (h1 - h0) * P, v.data, v.dtype, base + h0 * P);
    return;
  }
  for (int64_t h = h0; h < h1; ++h)
    RowFromF32Simd(df, src + (h - h0) * P, P, v.data, v.dtype, base + h * v.stride_head);
}

// Walks the group of consecutive heads without a division per head (a 64-bit divide costs
// more than a Mamba-1 row's whole update).
class GroupCursor {
 public:
  GroupCursor(const GroupsView& v, int64_t heads, int64_t h0)
      : per_group_(heads / v.groups),
        group_(h0 / per_group_),
        left_(per_group_ - h0 % per_group_) {}
  int64_t group() const { return group_; }
  void Next() {
    if (--left_ == 0) {
      ++group_;
      left_ = per_group_;
    }
  }

 private:
  int64_t per_group_, group_, left_;
};

// One state row, vectorised over n: h = decay h + dtx B; returns C * h summed to one vector
// (the lanes still to be added: SumsOfLanes does that for W rows at once). kPerState: decay
// is exp(dt A_n) per element (Mamba-1), else the broadcast `decay` (Mamba-2). The last partial
// vector is loaded and stored under a mask, so nothing past N is touched; its inactive lanes
// are zero and add nothing.
template <bool kPerState>
HWY_INLINE VF StepRow(VF decay, VF dt, VF dtx, const float* A, const float* B, const float* C,
                      float* h, int64_t N) {
  const DF df;
  const int64_t W = Lanes();
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t n = 0;
  for (; n + 2 * W <= N; n += 2 * W) {  // two accumulators: the C . h chain is latency bound
    VF a0 = decay, a1 = decay;
    if (kPerState) {
      a0 = FastExp(df, hn::Mul(dt, hn::LoadU(df, A + n)));
      a1 = FastExp(df, hn::Mul(dt, hn::LoadU(df, A + n + W)));
    }
    const VF h0 = hn::MulAdd(a0, hn::LoadU(df, h + n), hn::Mul(dtx, hn::LoadU(df, B + n)));
    const VF h1 = hn::MulAdd(a1, hn::LoadU(df, h + n + W), hn::Mul(dtx, hn::LoadU(df, B + n + W)));
    hn::StoreU(h0, df, h + n);
    hn::StoreU(h1, df, h + n + W);
    acc0 = hn::MulAdd(hn::LoadU(df, C + n), h0, acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, C + n + W), h1, acc1);
  }
  for (; n + W <= N; n += W) {
    const VF a = kPerState ? FastExp(df, hn::Mul(dt, hn::LoadU(df, A + n))) : decay;
    const VF hv = hn::MulAdd(a, hn::LoadU(df, h + n), hn::Mul(dtx, hn::LoadU(df, B + n)));
    hn::StoreU(hv, df, h + n);
    acc0 = hn::MulAdd(hn::LoadU(df, C + n), hv, acc0);
  }
  if (n < N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(N - n));
    VF a = decay;
    if (kPerState) a = FastExp(df, hn::Mul(dt, hn::MaskedLoad(m, df, A + n)));
    const VF hv =
        hn::MulAdd(a, hn::MaskedLoad(m, df, h + n), hn::Mul(dtx, hn::MaskedLoad(m, df, B + n)));
    hn::BlendedStore(hv, m, df, h + n);
    acc1 = hn::MulAdd(hn::MaskedLoad(m, df, C + n), hv, acc1);
  }
  return hn::Add(acc0, acc1);
}

constexpr size_t kMaxW = hn::MaxLanes(DF());

// The Mamba-2 row with N = kVecs * W: B and C of the head are kept in registers (loaded once
// per head by the caller), so each vector of the row costs one load, one store and 3 FMAs.
template <int kVecs>
HWY_INLINE VF StepRowFixed(VF decay, VF dtx, const VF* B, const VF* C, float* h) {
  const DF df;
  const int64_t W = Lanes();
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  for (int v = 0; v < kVecs; ++v) {
    const VF hv = hn::MulAdd(decay, hn::LoadU(df, h + v * W), hn::Mul(dtx, B[v]));
    hn::StoreU(hv, df, h + v * W);
    if (v % 2 == 0) {
      acc0 = hn::MulAdd(C[v], hv, acc0);
    } else {
      acc1 = hn::MulAdd(C[v], hv, acc1);
    }
  }
  return hn::Add(acc0, acc1);
}

template <int kVecs>
HWY_INLINE void HeadRowsFixedN(VF decay, float dt, const float* x, const float* B, const float* C,
                               float* h, int64_t stride, int64_t count, int64_t ahead, VF* acc) {
  const DF df;
  const int64_t W = Lanes();
  VF Bv[kVecs], Cv[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    Bv[v] = hn::LoadU(df, B + v * W);
    Cv[v] = hn::LoadU(df, C + v * W);
  }
  for (int64_t i = 0; i < count; ++i) {
    FetchRowAhead(h + i * stride, kVecs * W * static_cast<int64_t>(sizeof(float)), ahead);
    acc[i] = StepRowFixed<kVecs>(decay, hn::Set(df, dt * x[i]), Bv, Cv, h + i * stride);
  }
}

// `count` Mamba-2 rows of one head through StepRowFixed when N is 1, 2, 4 or 8 vectors (the
// Mamba-2 checkpoints have N = 64 or 128); false (nothing done) otherwise.
HWY_INLINE bool HeadRowsFixed(int64_t N, VF decay, float dt, const float* x, const float* B,
                              const float* C, float* h, int64_t stride, int64_t count,
                              int64_t ahead, VF* acc) {
  const int64_t W = Lanes();
  if (N == W) return HeadRowsFixedN<1>(decay, dt, x, B, C, h, stride, count, ahead, acc), true;
  if (N == 2 * W) return HeadRowsFixedN<2>(decay, dt, x, B, C, h, stride, count, ahead, acc), true;
  if (N == 4 * W) return HeadRowsFixedN<4>(decay, dt, x, B, C, h, stride, count, ahead, acc), true;
  if (N == 8 * W) return HeadRowsFixedN<8>(decay, dt, x, B, C, h, stride, count, ahead, acc), true;
  return false;
}

// `count` Mamba-1 rows h0 + i (consecutive heads of P = 1) with N = kVecs * W: the sums of
// StepRow<true> in the same order (even vectors into one accumulator, odd into the other), with
// the row loop here so that FastExp's constants stay in registers across rows (inside StepRow's
// N loop they were reloaded for every row, ~1/3 of a row's instructions at N = 16).
template <int kVecs>
HWY_INLINE void Mamba1RowsFixedN(const StateUpdateParams& p, const float* dt, const float* x,
                                 const float* Brow, int64_t b_step, const float* Crow,
                                 int64_t c_step, GroupCursor& bg, GroupCursor& cg, int64_t h0,
                                 int64_t count, float* state_b, int64_t ahead, VF* acc) {
  const DF df;
  const int64_t W = Lanes();
  for (int64_t i = 0; i < count; ++i, bg.Next(), cg.Next()) {
    const int64_t h = h0 + i;
    const float* A = p.A.data + h * p.A.stride_head;   // (N)
    const float* B = Brow + bg.group() * b_step;       // (N)
    const float* C = Crow + cg.group() * c_step;       // (N)
    float* state = state_b + h * p.state_stride_head;  // (N)
    FetchRowAhead(state, kVecs * W * static_cast<int64_t>(sizeof(float)), ahead);
    const VF dtv = hn::Set(df, dt[i]), dtx = hn::Set(df, dt[i] * x[i]);
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    for (int v = 0; v < kVecs; ++v) {
      const VF a = FastExp(df, hn::Mul(dtv, hn::LoadU(df, A + v * W)));
      const VF hv =
          hn::MulAdd(a, hn::LoadU(df, state + v * W), hn::Mul(dtx, hn::LoadU(df, B + v * W)));
      hn::StoreU(hv, df, state + v * W);
      if (v % 2 == 0) {
        acc0 = hn::MulAdd(hn::LoadU(df, C + v * W), hv, acc0);
      } else {
        acc1 = hn::MulAdd(hn::LoadU(df, C + v * W), hv, acc1);
      }
    }
    acc[i] = hn::Add(acc0, acc1);
  }
}

// The rows of Mamba1RowsFixedN when N is 1, 2 or 4 vectors (Mamba-1 checkpoints have N = 16);
// false (nothing done) otherwise.
HWY_INLINE bool Mamba1RowsFixed(const StateUpdateParams& p, const float* dt, const float* x,
                                const float* Brow, int64_t b_step, const float* Crow,
                                int64_t c_step, GroupCursor& bg, GroupCursor& cg, int64_t h0,
                                int64_t count, float* state_b, int64_t ahead, VF* acc) {
  const int64_t N = p.dstate, W = Lanes();
  if (N == W) {
    Mamba1RowsFixedN<1>(p, dt, x, Brow, b_step, Crow, c_step, bg, cg, h0, count, state_b, ahead,
                        acc);
  } else if (N == 2 * W) {
    Mamba1RowsFixedN<2>(p, dt, x, Brow, b_step, Crow, c_step, bg, cg, h0, count, state_b, ahead,
                        acc);
  } else if (N == 4 * W) {
    Mamba1RowsFixedN<4>(p, dt, x, Brow, b_step, Crow, c_step, bg, cg, h0, count, state_b, ahead,
                        acc);
  } else {
    return false;
  }
  return true;
}

// Lane i of the result = the sum of the lanes of acc[i], for the W vectors of acc (clobbered).
// A transposing tree, log2(W) levels of ConcatEven + ConcatOdd + Add (W - 1 steps in all)
// instead of W horizontal reductions, which cost as much as the state update itself at N = 128:
// level 1 turns (acc[0], acc[1]) into [pair sums of acc[0], pair sums of acc[1]], and so on,
// until lane i holds acc[i]'s total.
HWY_INLINE VF SumsOfLanes(VF* acc /* (W) */) {
#if HWY_TARGET == HWY_SCALAR
  return acc[0];
#else
  const DF df;
  for (size_t n = kMaxW; n > 1; n /= 2) {
    for (size_t i = 0; i < n / 2; ++i) {
      acc[i] = hn::Add(hn::ConcatEven(df, acc[2 * i + 1], acc[2 * i]),
                       hn::ConcatOdd(df, acc[2 * i + 1], acc[2 * i]));
    }
  }
  return acc[0];
#endif
}

// Stores the first `count` (<= W) lanes of v.
HWY_INLINE void StoreFirst(VF v, int64_t count, float* dst) {
  const DF df;
  if (count == Lanes()) return hn::StoreU(v, df, dst);
  hn::BlendedStore(v, hn::FirstN(df, static_cast<size_t>(count)), df, dst);
}

// Heads [h0, h1) of batch row b, state row sb.
void Segment(const StateUpdateParams& p, int64_t b, int64_t sb, int64_t h0, int64_t h1,
             const Scratch& s) {
  const DF df;
  const int64_t W = Lanes(), P = p.headdim, N = p.dstate, nh = h1 - h0, entries = nh * P;
  const int64_t entries_padded = RoundUp(entries, W);

  // dt' for each head, vectorised across heads. Contiguous dt and dt_bias (Mamba-1's D heads)
  // are read a vector at a time: a per-head dtype switch cost ~1/10 of a Mamba-1 step.
  if (p.dt.stride_head == 1) {
    RowToF32Simd(df, p.dt.data, p.dt.dtype, b * p.dt.stride_batch + h0, nh, s.dt);
  } else {
    for (int64_t i = 0; i < nh; ++i) {
      s.dt[i] =
          LoadAsF32(p.dt.data, p.dt.dtype, b * p.dt.stride_batch + (h0 + i) * p.dt.stride_head);
    }
  }
  if (p.dt_bias.data) {
    int64_t i = 0;
    if (p.dt_bias.stride_head == 1) {
      for (; i + W <= nh; i += W) {
        hn::StoreU(hn::Add(hn::LoadU(df, s.dt + i), hn::LoadU(df, p.dt_bias.data + h0 + i)), df,
                   s.dt + i);
      }
    }
    for (; i < nh; ++i) s.dt[i] += p.dt_bias.data[(h0 + i) * p.dt_bias.stride_head];
  }
  if (p.dt_softplus) {
    const int64_t padded = RoundUp(nh, W);
    std::fill(s.dt + nh, s.dt + padded, 0.0f);
    for (int64_t i = 0; i < padded; i += W)
      hn::StoreU(Softplus(df, hn::LoadU(df, s.dt + i)), df, s.dt + i);
  }

  // x (and z, D) per entry, read before anything of this segment's out is written.
  GatherHeads(p.x, b, h0, h1, P, s.x);
  std::fill(s.x + entries, s.x + entries_padded, 0.0f);
  if (p.z.data) {
    GatherHeads(p.z, b, h0, h1, P, s.z);
    std::fill(s.z + entries, s.z + entries_padded, 0.0f);
  }
  if (p.D.data && P == 1 && p.D.stride_head == 1) {  // Mamba-1: one contiguous D per channel
    std::copy_n(p.D.data + h0, nh, s.skip);
    std::fill(s.skip + entries, s.skip + entries_padded, 0.0f);
  } else if (p.D.data) {
    for (int64_t h = h0; h < h1; ++h) {
      float* skip = s.skip + (h - h0) * P;
      const float* D = p.D.data + h * p.D.stride_head;
      if (p.D.stride_inner == 0) {  // one D per head (the loop vectorises)
        std::fill(skip, skip + P, *D);
      } else {
        for (int64_t i = 0; i < P; ++i) skip[i] = D[i * p.D.stride_inner];
      }
    }
    std::fill(s.skip + entries, s.skip + entries_padded, 0.0f);
  }

  int64_t b_step = 0, c_step = 0;
  const float* Brow = GroupRows(p.B, b, N, s.B, &b_step);
  const float* Crow = GroupRows(p.C, b, N, s.C, &c_step);
  GroupCursor bg(p.B, p.heads, h0), cg(p.C, p.heads, h0);
  float* state_b = p.state + sb * p.state_stride_batch;
  const int64_t ahead = StreamPrefetchBytes();
  VF acc[kMaxW];
  if (p.a_per_state) {  // Mamba-1 (P = 1): W heads per reduction
    for (int64_t hb = h0; hb < h1; hb += W) {
      const int64_t count = std::min(W, h1 - hb);
      if (!Mamba1RowsFixed(p, s.dt + (hb - h0), s.x + (hb - h0), Brow, b_step, Crow, c_step, bg, cg,
                           hb, count, state_b, ahead, acc)) {
        for (int64_t i = 0; i < count; ++i, bg.Next(), cg.Next()) {
          const int64_t h = hb + i;
          const float dt = s.dt[h - h0];
          acc[i] = StepRow<true>(hn::Zero(df), hn::Set(df, dt), hn::Set(df, dt * s.x[h - h0]),
                                 p.A.data + h * p.A.stride_head, Brow + bg.group() * b_step,
                                 Crow + cg.group() * c_step, state_b + h * p.state_stride_head, N);
        }
      }
      for (int64_t i = count; i < W; ++i) acc[i] = hn::Zero(df);
      StoreFirst(SumsOfLanes(acc), count, s.y + (hb - h0));
    }
  } else {  // Mamba-2: one decay per head, W rows p per reduction
    for (int64_t h = h0; h < h1; ++h, bg.Next(), cg.Next()) {
      const float* Bh = Brow + bg.group() * b_step;
      const float* Ch = Crow + cg.group() * c_step;
      float* state_h = state_b + h * p.state_stride_head;
      const float dt = s.dt[h - h0];
      const float* x = s.x + (h - h0) * P;
      const VF decay = hn::Set(df, std::exp(dt * p.A.data[h * p.A.stride_head]));
      for (int64_t pb = 0; pb < P; pb += W) {
        const int64_t count = std::min(W, P - pb);
        if (!HeadRowsFixed(N, decay, dt, x + pb, Bh, Ch, state_h + pb * p.state_stride_p,
                           p.state_stride_p, count, ahead, acc)) {
          for (int64_t i = 0; i < count; ++i) {
            acc[i] = StepRow<false>(decay, decay, hn::Set(df, dt * x[pb + i]), nullptr, Bh, Ch,
                                    state_h + (pb + i) * p.state_stride_p, N);
          }
        }
        for (int64_t i = count; i < W; ++i) acc[i] = hn::Zero(df);
        StoreFirst(SumsOfLanes(acc), count, s.y + (h - h0) * P + pb);
      }
    }
  }

  // out = (y + D x) silu(z), vectorised across the segment's entries (the pads are zeros).
  std::fill(s.y + entries, s.y + entries_padded, 0.0f);
  for (int64_t i = 0; i < entries_padded; i += W) {
    VF v = hn::LoadU(df, s.y + i);
    if (p.D.data) v = hn::MulAdd(hn::LoadU(df, s.skip + i), hn::LoadU(df, s.x + i), v);
    if (p.z.data) {
      const VF z = hn::LoadU(df, s.z + i);
      v = hn::Mul(v, hn::Mul(z, SigmoidNoDiv(df, z)));
    }
    hn::StoreU(v, df, s.y + i);
  }
  ScatterHeads(s.y, p.out, b, h0, h1, P);
}

Status StateUpdateImpl(const StateUpdateParams& p) {
  const ScratchLayout layout = MakeScratchLayout(p);
  const int64_t pairs = p.batch * p.heads;
  const int64_t elements = pairs * p.headdim * p.dstate;
  const int blocks = elements < kMinParallelElements ? 1 : ParallelBlocks(pairs);
  const int64_t per_block = RoundUp(layout.Floats() + Lanes(), 16);
  float* ws = ThreadScratch(ScratchSlot::kStateUpdate, blocks * per_block);
  auto run = [&](int64_t begin, int64_t end, int block) {
    const Scratch s = layout.Carve(ws + block * per_block);
    const int64_t seg_heads = layout.heads;
    // Segments: runs of heads of one batch row, at most seg_heads long.
    for (int64_t r = begin; r < end;) {
      const int64_t b = r / p.heads, h0 = r % p.heads;
      const int64_t h1 = std::min({p.heads, h0 + seg_heads, h0 + (end - r)});
      const int64_t sb = p.state_batch_indices ? p.state_batch_indices[b * p.indices_stride] : b;
      if (sb >= 0) Segment(p, b, sb, h0, h1, s);
      r += h1 - h0;
    }
  };
  if (blocks == 1) {
    run(0, pairs, 0);
  } else {
    // Every (b, h) row's update is the same wherever its chunk starts: chunks shared out.
    ParallelForBalanced(pairs, std::max<int64_t>(1, kMinChunkElements / (p.headdim * p.dstate)),
                        run);
  }
  return Status::Ok();
}

}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(StateUpdateImpl);

Status SelectiveStateUpdate(const StateUpdateParams& p) {
  FlushDenormals flush;
  return HWY_DYNAMIC_DISPATCH(StateUpdateImpl)(p);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

// CPU selective-scan backward on channel tiles (scan_block-inl.h: W channels per vector),
// for variable B and C. The other forms take the per-row backward in scan_backward.cpp.
// Dimension legend: B batch, D channels, L length, N state size, Nq N rounded up to 4, Np N
// rounded up to W, W vector width, Q chunk (checkpoint interval), G groups of B/C.
//
// The adjoint recurrence (src/ref/selective_scan_ref.cpp gives every gradient's formula):
//   g_l = dy_l C_l + a_{l+1} g_{l+1},   g_{L-1} = dy_{L-1} C_{L-1} + dfinal_state
// needs h_{l-1} and a_l = exp(dt_l A) at every step, walking time backwards. Nothing of size
// (B, D, L, N) is kept: for each batch b and each run of the thread's tiles that share one
// B/C group,
//   1. a forward pass over all L keeps only the state entering each chunk of Q steps
//      (checkpoints: (ceil(L/Q), Nq, W) per tile);
//   2. chunks are visited last to first, and in each chunk every tile of the run recomputes its
//      a_l, h_l (and y_l) from the checkpoint and runs the adjoint back through the chunk, its
//      g carried over to the previous chunk.
// The chunk-major order of step 2 keeps the per-lane dB / dC partials of one chunk,
// (Q, Nq, W / 2: kFoldPairs), in cache while every tile of the run adds into them; they are summed
// over lanes once per (run, chunk) into the thread's (B, G, L, N) partial. Extra memory per thread:
// checkpoints O(D / threads * N * L / Q) plus O(Q * N * W) of chunk buffers.
//
// Packed sequences (scan_sequences.hpp): phase 1 swaps in a sequence's initial state where it
// starts, and phase 2 cuts a chunk into spans at the sequence starts inside it; after the
// span that starts sequence k, g is the gradient of k's initial state, and restarts from the
// gradient reaching k - 1's last state (dvarlen_states). The step kernels are unchanged.
//
// Determinism: the parallel loop is over channel tiles with the batch loop inside, so dA, dD,
// ddelta_bias of a channel are summed by one thread in a fixed order; dB and dC (sums over the
// channels of a group) go through per-thread partials added in thread order at the end. Same
// inputs and thread count, same bits. The backward always uses this sequential adjoint,
// whatever options.algorithm.
#include "cpu/scan_backward_tiles.hpp"

#include <algorithm>
#include <vector>

#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "cpu/scan_packing.hpp"
#include "cpu/scan_sequences.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scan_backward_tiles.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/scan_block-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

constexpr int64_t W = kBlockWidth;
constexpr float kLn2 = 0.693147180559945309f;

// The dB / dC partials of a chunk are read and written for every state, step and tile: on
// vectors of 8 or more lanes, two states' products are folded into one vector (each state's
// lanes summed in pairs, lane j with lane j + W / 2) before they are added, so that the
// partials are half the bytes through the caches (Zen 5, m1-130m fwd+bwd: -10%). This changes
// only the order in which a group's channels are summed, which stays fixed.
constexpr bool kFoldPairs = W >= 8;
constexpr int64_t kPartialLanes = kFoldPairs ? W / 2 : W;  // per state and step

// [lanes j + lanes j + W/2 of t0 | the same of t1]: states n and n + 1 in one vector (the
// scalar target has no halves and never folds).
HWY_INLINE BlockVec FoldPair(BlockVec t0, BlockVec t1) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Add(t0, t1);
#else
  const BlockTag df;
  return hn::Add(hn::ConcatLowerLower(df, t1, t0), hn::ConcatUpperUpper(df, t1, t0));
#endif
}

// part[n * kPartialLanes ...] += the products of states n (prods[n]), folded where kFoldPairs.
template <int kN>
HWY_INLINE void AddPartials(const BlockVec (&prods)[kN], float* HWY_RESTRICT part) {
  const BlockTag df;
  if constexpr (kFoldPairs) {
    static_assert(kN % 2 == 0, "state blocks come in pairs");
    HWY_UNROLL(16)
    for (int n = 0; n < kN; n += 2) {
      float* slot = part + n * kPartialLanes;
      hn::StoreU(hn::Add(hn::LoadU(df, slot), FoldPair(prods[n], prods[n + 1])), df, slot);
    }
  } else {
    HWY_UNROLL(16)
    for (int n = 0; n < kN; ++n) {
      hn::StoreU(hn::Add(hn::LoadU(df, part + n * W), prods[n]), df, part + n * W);
    }
  }
}

// ---- step kernels: kN states in registers, lanes = channels ----

// Phase 1: h = a h + dt u B over `len` steps, saving h into ckpt[(l0 + l) / Q] before every
// step l0 + l that starts a chunk. ckpt points at state n0 of checkpoint 0 (stride Nq W).
template <int kN, bool kDecays>
HWY_NOINLINE void AdvanceStates(const float* HWY_RESTRICT A2, const float* HWY_RESTRICT B,
                                int64_t Np, const float* HWY_RESTRICT dt,
                                const float* HWY_RESTRICT u, float* HWY_RESTRICT h, int64_t l0,
                                int64_t len, int64_t Q, float* HWY_RESTRICT ckpt,
                                int64_t ckpt_stride) {
  const BlockTag df;
  BlockVec state[kN];
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) state[n] = hn::LoadU(df, h + n * W);
  for (int64_t l = 0; l < len; ++l, B += Np) {
    if ((l0 + l) % Q == 0) {
      float* saved = ckpt + (l0 + l) / Q * ckpt_stride;
      HWY_UNROLL(16)
      for (int n = 0; n < kN; ++n) hn::StoreU(state[n], df, saved + n * W);
    }
    const BlockVec dt_l = hn::LoadU(df, dt + l * W);
    const BlockVec dtu_l = hn::Mul(dt_l, hn::LoadU(df, u + l * W));
    HWY_UNROLL(16)
    for (int n = 0; n < kN; ++n) {
      const BlockVec a = Exp2Fast<kDecays>(df, hn::Mul(dt_l, hn::LoadU(df, A2 + n * W)));
      state[n] = hn::MulAdd(a, state[n], hn::Mul(dtu_l, hn::Set(df, B[n])));
    }
  }
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) hn::StoreU(state[n], df, h + n * W);
}

// Phase 2a: from the chunk's entering state h_in, a_l and h_l for its `len` steps into
// a_buf, h_buf ((len, Nq, W), pointed at state n0, step stride Nq W), and y_l += C_l . h_l.
template <int kN, bool kDecays>
HWY_NOINLINE void RecomputeStates(const float* HWY_RESTRICT A2, const float* HWY_RESTRICT B,
                                  const float* HWY_RESTRICT C, int64_t Np,
                                  const float* HWY_RESTRICT dt, const float* HWY_RESTRICT u,
                                  const float* HWY_RESTRICT h_in, int64_t len,
                                  float* HWY_RESTRICT a_buf, float* HWY_RESTRICT h_buf,
                                  int64_t stride, float* HWY_RESTRICT y, PrefetchQueue& pf) {
  const BlockTag df;
  BlockVec state[kN];
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) state[n] = hn::LoadU(df, h_in + n * W);
  for (int64_t l = 0; l < len; ++l, B += Np, C += Np) {
    pf.Issue();
    const BlockVec dt_l = hn::LoadU(df, dt + l * W);
    const BlockVec dtu_l = hn::Mul(dt_l, hn::LoadU(df, u + l * W));
    BlockVec acc0 = hn::LoadU(df, y + l * W), acc1 = hn::Zero(df);
    float* a_l = a_buf + l * stride;
    float* h_l = h_buf + l * stride;
    HWY_UNROLL(16)
    for (int n = 0; n < kN; ++n) {
      const BlockVec a = Exp2Fast<kDecays>(df, hn::Mul(dt_l, hn::LoadU(df, A2 + n * W)));
      state[n] = hn::MulAdd(a, state[n], hn::Mul(dtu_l, hn::Set(df, B[n])));
      hn::StoreU(a, df, a_l + n * W);
      hn::StoreU(state[n], df, h_l + n * W);
      if (n % 2 == 0) {
        acc0 = hn::MulAdd(hn::Set(df, C[n]), state[n], acc0);
      } else {
        acc1 = hn::MulAdd(hn::Set(df, C[n]), state[n], acc1);
      }
    }
    hn::StoreU(hn::Add(acc0, acc1), df, y + l * W);
  }
}

// Phase 2b: the adjoint back through the chunk, steps len-1 .. 0. Per step and state:
//   g += dy C_l[n]            (g = dL/dh_l)
//   dC_l[n] += dy h_l,  dB_l[n] += g dt u,  gB += g B_l[n]
//   g *= a_l                  (g = dL/dh_{l-1} through this step)
//   daa = g h_{l-1}           (dL/da_l * a_l)
//   daA += daa A2[n],  dA[n] += daa dt
// dB, dC are per-lane partials (len, Nq, kPartialLanes), step stride part_stride; gB and daA
// (len, W) accumulate over state blocks.
template <int kN>
HWY_NOINLINE void AdjointStates(
    const float* HWY_RESTRICT A2, const float* HWY_RESTRICT B, const float* HWY_RESTRICT C,
    int64_t Np, const float* HWY_RESTRICT dt, const float* HWY_RESTRICT u,
    const float* HWY_RESTRICT dy, const float* HWY_RESTRICT a_buf, const float* HWY_RESTRICT h_buf,
    const float* HWY_RESTRICT h_in, int64_t stride, int64_t part_stride, int64_t len,
    float* HWY_RESTRICT g, float* HWY_RESTRICT dA, float* HWY_RESTRICT dB, float* HWY_RESTRICT dC,
    float* HWY_RESTRICT gB, float* HWY_RESTRICT daA, PrefetchQueue& pf) {
  const BlockTag df;
  BlockVec gr[kN], dAr[kN];
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) {
    gr[n] = hn::LoadU(df, g + n * W);
    dAr[n] = hn::LoadU(df, dA + n * W);
  }
  // dC_l += dy_l h_l. Step l loads h_{l-1} anyway (for daa), so it does step l - 1's dC
  // term; only the last step's is done here.
  {
    const float* h_last = h_buf + (len - 1) * stride;
    const BlockVec dy_last = hn::LoadU(df, dy + (len - 1) * W);
    BlockVec prods[kN];
    HWY_UNROLL(16)
    for (int n = 0; n < kN; ++n) prods[n] = hn::Mul(dy_last, hn::LoadU(df, h_last + n * W));
    AddPartials(prods, dC + (len - 1) * part_stride);
  }
  for (int64_t l = len - 1; l >= 0; --l) {
    pf.Issue();
    const float* Bl = B + l * Np;
    const float* Cl = C + l * Np;
    const float* a_l = a_buf + l * stride;
    const float* h_prev = l > 0 ? h_buf + (l - 1) * stride : h_in;
    BlockVec dB_prods[kN], dC_prods[kN];
    const BlockVec dy_l = hn::LoadU(df, dy + l * W), dt_l = hn::LoadU(df, dt + l * W);
    const BlockVec dy_prev = l > 0 ? hn::LoadU(df, dy + (l - 1) * W) : hn::Zero(df);
    const BlockVec dtu_l = hn::Mul(dt_l, hn::LoadU(df, u + l * W));
    BlockVec gB0 = hn::LoadU(df, gB + l * W), gB1 = hn::Zero(df);
    BlockVec daA0 = hn::LoadU(df, daA + l * W), daA1 = hn::Zero(df);
    HWY_UNROLL(16)
    for (int n = 0; n < kN; ++n) {
      gr[n] = hn::MulAdd(dy_l, hn::Set(df, Cl[n]), gr[n]);
      dB_prods[n] = hn::Mul(gr[n], dtu_l);
      if (n % 2 == 0) {
        gB0 = hn::MulAdd(gr[n], hn::Set(df, Bl[n]), gB0);
      } else {
        gB1 = hn::MulAdd(gr[n], hn::Set(df, Bl[n]), gB1);
      }
      gr[n] = hn::Mul(gr[n], hn::LoadU(df, a_l + n * W));
      const BlockVec h_prev_n = hn::LoadU(df, h_prev + n * W);
      dC_prods[n] = hn::Mul(dy_prev, h_prev_n);
      const BlockVec daa = hn::Mul(gr[n], h_prev_n);
      dAr[n] = hn::MulAdd(daa, dt_l, dAr[n]);
      if (n % 2 == 0) {
        daA0 = hn::MulAdd(daa, hn::LoadU(df, A2 + n * W), daA0);
      } else {
        daA1 = hn::MulAdd(daa, hn::LoadU(df, A2 + n * W), daA1);
      }
    }
    AddPartials(dB_prods, dB + l * part_stride);
    if (l > 0) AddPartials(dC_prods, dC + (l - 1) * part_stride);
    hn::StoreU(hn::Add(gB0, gB1), df, gB + l * W);
    hn::StoreU(hn::Add(daA0, daA1), df, daA + l * W);
  }
  HWY_UNROLL(16)
  for (int n = 0; n < kN; ++n) {
    hn::StoreU(gr[n], df, g + n * W);
    hn::StoreU(dAr[n], df, dA + n * W);
  }
}

// The adjoint holds two registers per state (g and the dA sum), so it takes blocks of up to 8
// states: with 16 the 32 registers spill. Tuned for speed, does not affect results.
constexpr int kAdjointStates = HWY_MAX_BYTES >= 64 ? 8 : 4;

// What the backward keeps per tile of a thread's range, over batches and chunks.
struct TileSlot {
  float* ckpt;   // (chunks, Nq, W) the state entering each chunk (this batch)
  float* g;      // (Nq, W) adjoint state
  float* h;      // (Nq, W) forward state (phase 1)
  float* A2;     // (Nq, W) A log2(e)
  float* dA;     // (Nq, W) sum over b, l
  float* dD;     // (W, W) [channel][lane] partial sums of dy u, lanes summed at the end
  float* dbias;  // (W, W) likewise for ddelta
  float* skip;   // (W) D
  static int64_t Floats(int64_t chunks, int64_t Nq) {
    return (chunks + 5) * Nq * W + 2 * W * W + W;
  }
  TileSlot(float* base, int64_t chunks, int64_t Nq) {
    ckpt = base;
    g = ckpt + chunks * Nq * W;
    h = g + Nq * W;
    A2 = h + Nq * W;
    dA = A2 + Nq * W;
    dD = dA + Nq * W;
    dbias = dD + W * W;
    skip = dbias + W * W;
  }
};

// A chunk's buffers: the forward's super-block buffers (u, dt rows; dt, u, y in step layout)
// plus the gradient rows and steps, the recomputed a and h, and the run's dB / dC partials.
struct ChunkBuffers {
  SuperBlock s;
  float* dsp;   // (W, Qp) rows: d dt / d delta
  float* dy_r;  // (W, Qp) rows: dL/dy = dout silu(z)
  float* gz_r;  // (W, Qp) rows: dout silu'(z), later dz
  float* gB_r;  // (W, Qp) rows: sum_n g B, later du
  float* dA_r;  // (W, Qp) rows: sum_n daa A2, later ddelta
  float* y_r;   // (W, Qp) rows: y = C.h + D u
  float* dy;    // (Qp, W) steps
  float* gB;    // (Qp, W) steps
  float* daA;   // (Qp, W) steps
  float* a;     // (Q, Nq, W) recomputed decays
  float* h;     // (Q, Nq, W) recomputed states
  float* dB;    // (Q, Nq, kPartialLanes) per-lane dB partial of the current run
  float* dC;    // (Q, Nq, kPartialLanes)
  ChunkBuffers(int64_t Q, int64_t Nq) : s(Q, ScratchSlot::kScanChunkSteps) {
    const int64_t rows = W * s.S, states = Q * Nq * W, parts = Q * Nq * kPartialLanes;
    dsp = ThreadScratch(ScratchSlot::kScanChunkRows, 9 * rows + 2 * states + 2 * parts);
    dy_r = dsp + rows;
    gz_r = dy_r + rows;
    gB_r = gz_r + rows;
    dA_r = gB_r + rows;
    y_r = dA_r + rows;
    dy = y_r + rows;
    gB = dy + rows;
    daA = gB + rows;
    a = daA + rows;
    h = a + states;
    dB = h + states;
    dC = dB + parts;
  }
};

// dL/dy = dout silu(z) (or dout) and dout silu'(z) of the tile's rows over a chunk; dy also in
// step layout. silu'(z) = s (1 + z (1 - s)), s = sigmoid(z).
HWY_NOINLINE void PrepareOutputGrads(const SelectiveScanBwdParams& p, int64_t b, int64_t d0,
                                     int64_t count, int64_t l0, int64_t len, ChunkBuffers& c) {
  const BlockTag df;
  const int64_t padded = PadToBlock(len), S = c.s.S;
  for (int64_t j = 0; j < W; ++j) {
    float* dy = c.dy_r + j * S;
    float* gz = c.gz_r + j * S;
    if (j >= count) {
      std::fill(dy, dy + padded, 0.0f);
      continue;
    }
    LoadRow(p.dout, b, d0 + j, l0, len, dy);
    if (!p.z.data) continue;
    LoadRow(p.z, b, d0 + j, l0, len, gz);
    const BlockVec one = hn::Set(df, 1.0f);
    for (int64_t l = 0; l < padded; l += W) {
      const BlockVec z = hn::LoadU(df, gz + l), dout = hn::LoadU(df, dy + l);
      const BlockVec sig = SigmoidFast(df, z);
      hn::StoreU(hn::Mul(dout, hn::Mul(z, sig)), df, dy + l);
      const BlockVec dsilu = hn::Mul(sig, hn::MulAdd(z, hn::Sub(one, sig), one));
      hn::StoreU(hn::Mul(dout, dsilu), df, gz + l);
    }
  }
  RowsToSteps(c.dy_r, S, padded, c.dy);
}

// The chunk's row outputs from the adjoint's step sums:
//   du = dt gB + D dy,  ddelta = (u gB + ln2 daA) d dt/d delta,  dz = dout silu'(z) y,
// written where wanted; dD and ddelta_bias partial sums added to the tile's slots.
HWY_NOINLINE void FinishChunk(const SelectiveScanBwdParams& p, int64_t b, int64_t d0, int64_t count,
                              int64_t l0, int64_t len, ChunkBuffers& c, const TileSlot& t) {
  const BlockTag df;
  const int64_t padded = PadToBlock(len), S = c.s.S;
  std::fill(c.s.y + len * W, c.s.y + padded * W, 0.0f);  // steps never taken
  std::fill(c.gB + len * W, c.gB + padded * W, 0.0f);
  std::fill(c.daA + len * W, c.daA + padded * W, 0.0f);
  StepsToRows(c.s.y, S, padded, c.y_r);
  StepsToRows(c.gB, S, padded, c.gB_r);
  StepsToRows(c.daA, S, padded, c.dA_r);
  const BlockVec ln2 = hn::Set(df, kLn2);
  for (int64_t j = 0; j < count; ++j) {
    const int64_t d = d0 + j;
    const BlockVec skip = hn::Set(df, t.skip[j]);
    const float* u = c.s.u + j * S;
    const float* dt = c.s.row + j * S;
    const float* dsp = c.dsp + j * S;
    const float* dy = c.dy_r + j * S;
    float* gB = c.gB_r + j * S;  // -> du
    float* dA = c.dA_r + j * S;  // -> ddelta
    float* gz = c.gz_r + j * S;  // -> dz
    const float* y = c.y_r + j * S;
    BlockVec dD = hn::LoadU(df, t.dD + j * W), dbias = hn::LoadU(df, t.dbias + j * W);
    for (int64_t l = 0; l < padded; l += W) {
      const BlockVec gBv = hn::LoadU(df, gB + l), dyv = hn::LoadU(df, dy + l),
                     uv = hn::LoadU(df, u + l);
      const BlockVec ddelta =
          hn::Mul(hn::MulAdd(uv, gBv, hn::Mul(ln2, hn::LoadU(df, dA + l))), hn::LoadU(df, dsp + l));
      hn::StoreU(hn::MulAdd(hn::LoadU(df, dt + l), gBv, hn::Mul(skip, dyv)), df, gB + l);
      hn::StoreU(ddelta, df, dA + l);
      if (p.z.data) hn::StoreU(hn::Mul(hn::LoadU(df, gz + l), hn::LoadU(df, y + l)), df, gz + l);
      dD = hn::MulAdd(dyv, uv, dD);  // padded steps hold dy = 0, ddelta = 0
      dbias = hn::Add(dbias, ddelta);
    }
    hn::StoreU(dD, df, t.dD + j * W);
    hn::StoreU(dbias, df, t.dbias + j * W);
    auto store = [&](const SeqView& v, const float* row) {
      if (v.data)
        RowFromF32Simd(df, row, len, v.data, v.dtype, b * v.stride_batch + d * v.stride_dim + l0);
    };
    store(p.du, gB);
    store(p.ddelta, dA);
    store(p.dz, gz);
  }
}

// Adds the run's per-lane chunk partial (len, Nq, kPartialLanes) over lanes into part (L, N)
// rows l0..., then clears it for the next chunk.
HWY_NOINLINE void ReduceLanes(float* chunk, int64_t len, int64_t N, int64_t Nq, float* part) {
  for (int64_t q = 0; q < len; ++q) {
    for (int64_t n = 0; n < N; ++n) {
      const float* lanes = chunk + (q * Nq + n) * kPartialLanes;
      float sum = 0.0f;
      for (int64_t j = 0; j < kPartialLanes; ++j) sum += lanes[j];
      part[q * N + n] += sum;
    }
  }
  std::fill(chunk, chunk + len * Nq * kPartialLanes, 0.0f);
}

// Adds state row r of channels d0 .. d0 + count - 1 into an (Nq, W) tile (nothing when r's
// view is absent).
void AddTileStates(StateRow r, int64_t d0, int64_t count, int64_t N, float* tile) {
  if (!r.view.data) return;
  for (int64_t j = 0; j < count; ++j) {
    const float* row = r.view.data + r.index * r.view.stride_batch + (d0 + j) * r.view.stride_dim;
    for (int64_t n = 0; n < N; ++n) tile[n * W + j] += row[n * r.view.stride_state];
  }
}

// Where the spans of chunk [l0, l0 + len) of row b start: 0, then every packed sequence
// start inside it (local steps, in order).
void ChunkSpans(const PackedSequences& seqs, int64_t b, int64_t l0, int64_t len,
                std::vector<int64_t>* starts) {
  starts->assign(1, 0);
  if (!seqs.packed()) return;
  for (int64_t k = seqs.SequenceAt(b, l0) + 1; k < seqs.Count(b); ++k) {
    const int64_t l = seqs.Start(b, k);
    if (l >= l0 + len) break;
    starts->push_back(l - l0);
  }
}

// Writes out[b, g, n, l] = sum over blocks of parts[block][(b, g)][l][n], blocks in order.
void ReduceBlocks(const BCView& out, const float* parts, int blocks, int64_t slabs, int64_t groups,
                  int64_t L, int64_t N) {
  if (!out.data) return;
  const int64_t slab_size = L * N, block_size = slabs * slab_size;
  ParallelFor(slabs, [&](int64_t begin, int64_t end, int) {
    for (int64_t slab = begin; slab < end; ++slab) {
      const int64_t base = (slab / groups) * out.stride_batch + (slab % groups) * out.stride_group;
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t n = 0; n < N; ++n) {
          float sum = 0.0f;
          for (int k = 0; k < blocks; ++k)
            sum += parts[k * block_size + slab * slab_size + l * N + n];
          StoreFromF32(out.data, out.dtype, base + n * out.stride_state + l * out.stride_time, sum);
        }
      }
    }
  });
}

}  // namespace

Status ScanBackwardTilesImpl(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options) {
  const int64_t L = p.seqlen, N = p.dstate, Nq = PaddedStates(N), Np = PackedStateStride(N, W);
  const int64_t Q = options.chunk_length > 0 ? options.chunk_length : kDefaultCheckpointInterval;
  const int64_t chunks = (L + Q - 1) / Q, NqW = Nq * W;
  const PackedBC B = PackBC(p.B, p, Np, ScratchSlot::kScanPackedB),
                 C = PackBC(p.C, p, Np, ScratchSlot::kScanPackedC);
  const float* A = PackA(p.A, p, Np);
  const TileLayout layout = MakeTileLayout(p);
  const PackedSequences seqs = SequencesOf(p);
  const int blocks = ParallelBlocks(layout.Count());
  const int64_t dB_slabs = p.batch * p.B.groups, dC_slabs = p.batch * p.C.groups;
  // Per-thread partials of dB and dC, (blocks, B, G, L, N); an output not wanted goes to `unused`.
  const int64_t dB_size = p.dB.data ? blocks * dB_slabs * L * N : 0;
  const int64_t dC_size = p.dC.data ? blocks * dC_slabs * L * N : 0;
  float* dB_part = ThreadScratch(ScratchSlot::kScanPartialB, dB_size);
  float* dC_part = ThreadScratch(ScratchSlot::kScanPartialC, dC_size);
  float* unused = ThreadScratch(ScratchSlot::kScanPartialUnused, L * N);
  std::fill(dB_part, dB_part + dB_size, 0.0f);
  std::fill(dC_part, dC_part + dC_size, 0.0f);

  ParallelFor(layout.Count(), [&](int64_t begin, int64_t end, int block) {
    const int64_t tiles = end - begin;
    float* slot_base =
        ThreadScratch(ScratchSlot::kScanTileGradients, tiles * TileSlot::Floats(chunks, Nq));
    auto slot = [&](int64_t k) {
      return TileSlot(slot_base + k * TileSlot::Floats(chunks, Nq), chunks, Nq);
    };
    SuperBlock fwd(std::min(L, kSuperBlock), ScratchSlot::kScanSuperBlock);
    ChunkBuffers cb(std::min(L, Q), Nq);
    PrefetchQueue pf;
    std::vector<int64_t> spans;          // a chunk's span starts (local steps)
    std::vector<float> h_start(Nq * W);  // the state a span starts from, when not h_in
    std::vector<char> decays(tiles);     // TileRefs::decays of each tile
    std::fill(cb.dB, cb.dB + 2 * std::min(L, Q) * Nq * kPartialLanes, 0.0f);  // dB, dC adjacent
    for (int64_t k = 0; k < tiles; ++k) {
      const TileSlot t = slot(k);
      int64_t d0, count;
      layout.Locate(begin + k, &d0, &count);
      decays[k] = PackTileDecay(A, Np, d0, count, Nq, p.delta_softplus, t.A2);
      std::fill(t.dA, t.dA + NqW, 0.0f);
      std::fill(t.dD, t.dD + 2 * W * W, 0.0f);  // dD and dbias
      for (int64_t j = 0; j < W; ++j)
        t.skip[j] = p.D.data && j < count ? p.D.data[(d0 + j) * p.D.stride_dim] : 0.0f;
    }
    for (int64_t b = 0; b < p.batch; ++b) {
      // Runs of tiles sharing one group (and so one B row and one C row per step).
      for (int64_t run = begin; run < end;) {
        const int64_t group = run / layout.tiles_per_group;
        const int64_t run_end = std::min(end, (group + 1) * layout.tiles_per_group);
        int64_t d_first, unused_count;
        layout.Locate(run, &d_first, &unused_count);
        const float* Bp = B.Row(b, d_first);
        const float* Cp = C.Row(b, d_first);
        const int64_t gB = GroupOf(p.B, d_first, p.dim), gC = GroupOf(p.C, d_first, p.dim);
        float* dB_out =
            p.dB.data ? dB_part + ((block * p.batch + b) * p.B.groups + gB) * L * N : unused;
        float* dC_out =
            p.dC.data ? dC_part + ((block * p.batch + b) * p.C.groups + gC) * L * N : unused;

        // Phase 1: forward over all L, keeping the checkpoints, or the forward's chunk states
        // (the same bits: its steps are these).
        for (int64_t tile = run; tile < run_end; ++tile) {
          const TileSlot t = slot(tile - begin);
          int64_t d0, count;
          layout.Locate(tile, &d0, &count);
          LoadTileStates(p.dfinal_state, b, d0, count, N, Nq, t.g);
          AddTileStates({p.dvarlen_states, seqs.Count(b) - 1}, d0, count, N, t.g);
          if (p.chunk_states.data) {
            for (int64_t c = 0; c < chunks; ++c)
              LoadTileStates(p.chunk_states.Entry(c), b, d0, count, N, Nq, t.ckpt + c * NqW);
            continue;
          }
          LoadTileStates(p.initial_state, b, d0, count, N, Nq, t.h);
          int64_t k = 0, next_start = seqs.End(b, 0);
          for (int64_t l0 = 0; l0 < L; l0 += fwd.S) {
            const int64_t len = std::min(fwd.S, L - l0);
            PrepareBlock(p, b, d0, count, l0, len, fwd);
            for (int64_t l = 0; l < len;) {  // in spans that end where a sequence starts
              const int64_t step = l0 + l;
              if (step == next_start) {
                next_start = seqs.End(b, ++k);
                const StateRow init = InitialStateOf(p, b, k);
                LoadTileStates(init.view, init.index, d0, count, N, Nq, t.h);
              }
              const int64_t span = std::min(len - l, next_start - step);
              ForStateBlocks<kStepStates>(Nq, [&](int64_t n0, auto kN) {
                WithDecays(decays[tile - begin], [&](auto kDecays) {
                  AdvanceStates<decltype(kN)::value, decltype(kDecays)::value>(
                      t.A2 + n0 * W, Bp + step * Np + n0, Np, fwd.dt + l * W, fwd.ut + l * W,
                      t.h + n0 * W, step, span, Q, t.ckpt + n0 * W, NqW);
                });
              });
              l += span;
            }
          }
        }
        // Phase 2: chunks last to first, every tile of the run in each.
        for (int64_t c = chunks - 1; c >= 0; --c) {
          const int64_t l0 = c * Q, len = std::min(Q, L - l0);
          const float* Bc = Bp + l0 * Np;
          const float* Cc = Cp + l0 * Np;
          for (int64_t tile = run; tile < run_end; ++tile) {
            const TileSlot t = slot(tile - begin);
            int64_t d0, count;
            layout.Locate(tile, &d0, &count);
            // Queue the rows of the next tile of this chunk, else of the first tile of the
            // previous chunk, to be prefetched during this tile's recompute and adjoint.
            pf.Drain();
            pf.Clear();
            if (tile + 1 < run_end || c > 0) {
              const int64_t next = tile + 1 < run_end ? tile + 1 : run;
              const int64_t next_l0 = tile + 1 < run_end ? l0 : l0 - Q,
                            next_len = std::min(Q, L - next_l0);
              int64_t d_next, count_next;
              layout.Locate(next, &d_next, &count_next);
              for (const SeqView* v : {&p.u, &p.delta, &p.dout, &p.z, &p.du, &p.ddelta, &p.dz}) {
                pf.AddRows(*v, b, d_next, count_next, next_l0, next_len);
              }
            }
            pf.Spread(len * ((Nq + 15) / 16 +
                             (Nq + kAdjointStates - 1) / kAdjointStates));  // Issue() calls
            PrepareBlock(p, b, d0, count, l0, len, cb.s, cb.dsp);
            PrepareOutputGrads(p, b, d0, count, l0, len, cb);
            const BlockTag df;
            const BlockVec skip = hn::LoadU(df, t.skip);
            for (int64_t l = 0; l < len; ++l) {
              hn::StoreU(hn::Mul(skip, hn::LoadU(df, cb.s.ut + l * W)), df, cb.s.y + l * W);
              hn::StoreU(hn::Zero(df), df, cb.gB + l * W);
              hn::StoreU(hn::Zero(df), df, cb.daA + l * W);
            }
            // In spans: the first from the chunk's checkpoint, each other from the initial
            // state of the packed sequence starting there.
            ChunkSpans(seqs, b, l0, len, &spans);
            auto span_state = [&](size_t i) -> const float* {
              if (i == 0) return t.ckpt + c * NqW;
              const StateRow init = InitialStateOf(p, b, seqs.SequenceAt(b, l0 + spans[i]));
              LoadTileStates(init.view, init.index, d0, count, N, Nq, h_start.data());
              return h_start.data();
            };
            for (size_t i = 0; i < spans.size(); ++i) {
              const int64_t q = spans[i];
              const int64_t span = (i + 1 < spans.size() ? spans[i + 1] : len) - q;
              const float* h_in = span_state(i);
              ForStateBlocks<kStepStates>(Nq, [&](int64_t n0, auto kN) {
                WithDecays(decays[tile - begin], [&](auto kDecays) {
                  RecomputeStates<decltype(kN)::value, decltype(kDecays)::value>(
                      t.A2 + n0 * W, Bc + q * Np + n0, Cc + q * Np + n0, Np, cb.s.dt + q * W,
                      cb.s.ut + q * W, h_in + n0 * W, span, cb.a + q * NqW + n0 * W,
                      cb.h + q * NqW + n0 * W, NqW, cb.s.y + q * W, pf);
                });
              });
            }
            for (size_t i = spans.size(); i-- > 0;) {
              const int64_t q = spans[i];
              const int64_t span = (i + 1 < spans.size() ? spans[i + 1] : len) - q;
              const float* h_in = span_state(i);
              ForStateBlocks<kAdjointStates>(Nq, [&](int64_t n0, auto kN) {
                AdjointStates<decltype(kN)::value>(
                    t.A2 + n0 * W, Bc + q * Np + n0, Cc + q * Np + n0, Np, cb.s.dt + q * W,
                    cb.s.ut + q * W, cb.dy + q * W, cb.a + q * NqW + n0 * W,
                    cb.h + q * NqW + n0 * W, h_in + n0 * W, NqW, Nq * kPartialLanes, span,
                    t.g + n0 * W, t.dA + n0 * W, cb.dB + (q * Nq + n0) * kPartialLanes,
                    cb.dC + (q * Nq + n0) * kPartialLanes, cb.gB + q * W, cb.daA + q * W, pf);
              });
              // A span starting sequence k >= 1 (the first's dinitial_state is written at
              // the end): g is the gradient of this sequence's initial state; before it, g restarts
              // from the gradient reaching the previous sequence's last state.
              if (i == 0 && !seqs.StartsAt(b, l0)) continue;
              const int64_t k = seqs.SequenceAt(b, l0 + q);
              const StateRow dinit = InitialStateGradOf(p, b, k);
              StoreTileStates(t.g, dinit.view, dinit.index, d0, count, N);
              std::fill(t.g, t.g + NqW, 0.0f);
              AddTileStates({p.dvarlen_states, k - 1}, d0, count, N, t.g);
            }
            FinishChunk(p, b, d0, count, l0, len, cb, t);
          }
          ReduceLanes(cb.dB, len, N, Nq, dB_out + l0 * N);
          ReduceLanes(cb.dC, len, N, Nq, dC_out + l0 * N);
        }
        for (int64_t tile = run; tile < run_end; ++tile) {
          int64_t d0, count;
          layout.Locate(tile, &d0, &count);
          StoreTileStates(slot(tile - begin).g, p.dinitial_state, b, d0, count, N);
        }
        run = run_end;
      }
    }
    for (int64_t k = 0; k < tiles; ++k) {
      const TileSlot t = slot(k);
      int64_t d0, count;
      layout.Locate(begin + k, &d0, &count);
      for (int64_t j = 0; j < count; ++j) {
        const int64_t d = d0 + j;
        if (p.dA.data) {
          for (int64_t n = 0; n < N; ++n)
            p.dA.data[d * p.dA.stride_dim + n * p.dA.stride_state] = t.dA[n * W + j];
        }
        float dD = 0.0f, dbias = 0.0f;
        for (int64_t i = 0; i < W; ++i) {
          dD += t.dD[j * W + i];
          dbias += t.dbias[j * W + i];
        }
        if (p.dD.data) p.dD.data[d * p.dD.stride_dim] = dD;
        if (p.ddelta_bias.data) p.ddelta_bias.data[d * p.ddelta_bias.stride_dim] = dbias;
      }
    }
  });
  ReduceBlocks(p.dB, dB_part, blocks, dB_slabs, p.B.groups, L, N);
  ReduceBlocks(p.dC, dC_part, blocks, dC_slabs, p.C.groups, L, N);
  return Status::Ok();
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(ScanBackwardTilesImpl);

Status SelectiveScanBackwardTiles(const SelectiveScanBwdParams& p,
                                  const SelectiveScanOptions& options) {
  return HWY_DYNAMIC_DISPATCH(ScanBackwardTilesImpl)(p, options);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

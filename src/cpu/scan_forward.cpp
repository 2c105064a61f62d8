// CPU selective-scan forward: five algorithms over the same per-row inputs.
// Dimension legend: B batch, D channels, L length, N state size, Np N padded to the vector
// width, Q chunk length, G groups of B/C.
//
// Work is split over (b, d) rows; a row's state h (Np) is vectorised over n. B and C are
// packed once per call (scan_packing.hpp), dt and dt*u once per row (scan_row-inl.h), so the
// step loop does, per vector of n: a = exp(dt*A), h = a*h + dtu*B, acc += C*h.
//
// Packed sequences (scan_sequences.hpp) leave the step kernels as they are: the sequential
// paths run in spans that end where a sequence starts, swapping the state in between; the
// pair-based ones set a = 0 at a start (and fold the sequence's initial state into x), and
// log-space runs each sequence on its own.
#include <algorithm>
#include <vector>

#include "core/float_mode.hpp"
#include "core/parallel.hpp"
#include "cpu/scan_packing.hpp"
#include "cpu/scan_sequences.hpp"
#include "core/dtype.hpp"
#include "cpu/selective_scan.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scan_forward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/scan_row-inl.h"
#include "cpu/scan_block-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// What one row's scan reads: packed B and C rows (time step bstep / cstep floats; 0 for the
// constant form), packed A, the initial state, and where to put y and the final state.
struct RowScan {
  const float* A;  // (Np)
  const float* B;  // (L or 1, Np)
  const float* C;  // (L or 1, Np)
  int64_t bstep, cstep;
  const float* dt;   // (L)
  const float* dtu;  // (L)
  float* y;          // (L) C·h, before D*u and the gate
  float* h;          // (Np) in: h0; out: h[L-1]
  int64_t L, Np;
};

// The default: one step at a time, state in registers when it fits in kVecs vectors.
template <int kVecs>
void ScanSequentialFixed(const RowScan& s) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF h[kVecs], A[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    h[v] = hn::LoadU(df, s.h + v * lanes);
    A[v] = hn::LoadU(df, s.A + v * lanes);
  }
  const float* Bl = s.B;
  const float* Cl = s.C;
  for (int64_t l = 0; l < s.L; ++l, Bl += s.bstep, Cl += s.cstep) {
    const VF dt = hn::Set(df, s.dt[l]), dtu = hn::Set(df, s.dtu[l]);
    VF acc = hn::Zero(df);
    for (int v = 0; v < kVecs; ++v) {
      const VF a = FastExp(df, hn::Mul(dt, A[v]));
      h[v] = hn::MulAdd(a, h[v], hn::Mul(dtu, hn::LoadU(df, Bl + v * lanes)));
      acc = hn::MulAdd(hn::LoadU(df, Cl + v * lanes), h[v], acc);
    }
    s.y[l] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
  for (int v = 0; v < kVecs; ++v) hn::StoreU(h[v], df, s.h + v * lanes);
}

// Any Np: the state lives in memory (s.h), one vector run per step.
void ScanSequentialAny(const RowScan& s) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const float* Bl = s.B;
  const float* Cl = s.C;
  for (int64_t l = 0; l < s.L; ++l, Bl += s.bstep, Cl += s.cstep) {
    const VF dt = hn::Set(df, s.dt[l]), dtu = hn::Set(df, s.dtu[l]);
    VF acc = hn::Zero(df);
    for (int64_t n = 0; n < s.Np; n += lanes) {
      const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, s.A + n)));
      const VF h = hn::MulAdd(a, hn::LoadU(df, s.h + n), hn::Mul(dtu, hn::LoadU(df, Bl + n)));
      hn::StoreU(h, df, s.h + n);
      acc = hn::MulAdd(hn::LoadU(df, Cl + n), h, acc);
    }
    s.y[l] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

void ScanSequential(const RowScan& s) {
  const int64_t vecs = s.Np / static_cast<int64_t>(hn::Lanes(DF()));
  if (vecs == 1) return ScanSequentialFixed<1>(s);
  if (vecs == 2) return ScanSequentialFixed<2>(s);
  if (vecs == 4) return ScanSequentialFixed<4>(s);
  ScanSequentialAny(s);
}

// The parallel-structured algorithms work on explicit (a, x) pairs per step:
//   a_l = exp(dt_l * A), x_l = dt_l u_l B_l, with h0 folded in as x_0 += a_0 h0,
// so that h_l = a_l h_{l-1} + x_l becomes a prefix scan under the associative operator
//   (a1, x1) then (a2, x2) = (a1 a2, a2 x1 + x2).
// Each leaves h_l in x_l.
void BuildPairs(const RowScan& s, float* a /* (L, Np) */, float* x /* (L, Np) */) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t l = 0; l < s.L; ++l) {
    const VF dt = hn::Set(df, s.dt[l]), dtu = hn::Set(df, s.dtu[l]);
    for (int64_t n = 0; n < s.Np; n += lanes) {
      const VF av = FastExp(df, hn::Mul(dt, hn::LoadU(df, s.A + n)));
      hn::StoreU(av, df, a + l * s.Np + n);
      hn::StoreU(hn::Mul(dtu, hn::LoadU(df, s.B + l * s.bstep + n)), df, x + l * s.Np + n);
    }
  }
  for (int64_t n = 0; n < s.Np; n += lanes) {
    const VF x0 = hn::MulAdd(hn::LoadU(df, a + n), hn::LoadU(df, s.h + n), hn::LoadU(df, x + n));
    hn::StoreU(x0, df, x + n);
  }
}

// Pair i becomes pair j then pair i (j < i): the combine step every prefix scan uses.
HWY_INLINE void CombineInto(float* a, float* x, int64_t i, int64_t j, int64_t Np) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t n = 0; n < Np; n += lanes) {
    const VF ai = hn::LoadU(df, a + i * Np + n), aj = hn::LoadU(df, a + j * Np + n);
    const VF xi = hn::LoadU(df, x + i * Np + n), xj = hn::LoadU(df, x + j * Np + n);
    hn::StoreU(hn::MulAdd(ai, xj, xi), df, x + i * Np + n);
    hn::StoreU(hn::Mul(ai, aj), df, a + i * Np + n);
  }
}

// Brent-Kung form of Blelloch's work-efficient scan, inclusive, any L: an up-sweep builds
// partial products on a binary tree, a down-sweep fills in the rest. 2L combines.
void ScanBlelloch(const RowScan& s, float* a, float* x) {
  int64_t stride = 1;
  for (; 2 * stride <= s.L; stride *= 2) {
    for (int64_t i = 2 * stride - 1; i < s.L; i += 2 * stride)
      CombineInto(a, x, i, i - stride, s.Np);
  }
  for (stride /= 2; stride >= 1; stride /= 2) {
    for (int64_t i = 3 * stride - 1; i < s.L; i += 2 * stride)
      CombineInto(a, x, i, i - stride, s.Np);
  }
}

// Hillis-Steele: log2(L) passes, pass k combining every pair with the one 2^k before it.
// Going down the array lets one buffer serve: pair i - stride is still from the last pass.
void ScanHillisSteele(const RowScan& s, float* a, float* x) {
  for (int64_t stride = 1; stride < s.L; stride *= 2) {
    for (int64_t i = s.L - 1; i >= stride; --i) CombineInto(a, x, i, i - stride, s.Np);
  }
}

// Chunked: each chunk of Q steps is scanned from a zero state, keeping its cumulative decay
// (in a); then a carry pass adds cumdecay_l * h_in to every step of the chunk, h_in being the
// state entering the chunk. The chunks are independent until the carry pass.
void ScanChunked(const RowScan& s, float* a, float* x, int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t start = 0; start < s.L; start += chunk) {
    const int64_t end = std::min(s.L, start + chunk);
    for (int64_t l = start + 1; l < end; ++l) {
      for (int64_t n = 0; n < s.Np; n += lanes) {
        const VF al = hn::LoadU(df, a + l * s.Np + n), ap = hn::LoadU(df, a + (l - 1) * s.Np + n);
        const VF xp = hn::LoadU(df, x + (l - 1) * s.Np + n), xl = hn::LoadU(df, x + l * s.Np + n);
        hn::StoreU(hn::MulAdd(al, xp, xl), df, x + l * s.Np + n);
        hn::StoreU(hn::Mul(al, ap), df, a + l * s.Np + n);
      }
    }
  }
  for (int64_t start = chunk; start < s.L; start += chunk) {
    const int64_t end = std::min(s.L, start + chunk);
    const float* h_in = x + (start - 1) * s.Np;
    for (int64_t l = start; l < end; ++l) {
      for (int64_t n = 0; n < s.Np; n += lanes) {
        const VF fixed = hn::MulAdd(hn::LoadU(df, a + l * s.Np + n), hn::LoadU(df, h_in + n),
                                    hn::LoadU(df, x + l * s.Np + n));
        hn::StoreU(fixed, df, x + l * s.Np + n);
      }
    }
  }
}

// Log-space: with P_l = prod_{k<=l} a_k = exp(sum_k dt_k A), h_l = P_l (h0 + sum_{k<=l} x_k / P_k).
// The textbook closed form; 1/P_k overflows f32 once sum dt*A < -88.7, and the result turns
// to inf/NaN (docs/numerics.md measures where).
void ScanLogSpace(const RowScan& s, float* x /* (L, Np) scratch */) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t n = 0; n < s.Np; n += lanes) {
    const VF A = hn::LoadU(df, s.A + n);
    VF log_p = hn::Zero(df), sum = hn::LoadU(df, s.h + n);
    for (int64_t l = 0; l < s.L; ++l) {
      log_p = hn::MulAdd(hn::Set(df, s.dt[l]), A, log_p);
      const VF xl = hn::Mul(hn::Set(df, s.dtu[l]), hn::LoadU(df, s.B + l * s.bstep + n));
      sum = hn::MulAdd(xl, hn::Exp(df, hn::Neg(log_p)), sum);
      hn::StoreU(hn::Mul(hn::Exp(df, log_p), sum), df, x + l * s.Np + n);
    }
  }
}

// y_l = C_l . h_l for the pair-based algorithms, and the final state.
void ReadOut(const RowScan& s, const float* hs /* (L, Np) */) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t l = 0; l < s.L; ++l) {
    VF acc = hn::Zero(df);
    for (int64_t n = 0; n < s.Np; n += lanes) {
      acc = hn::MulAdd(hn::LoadU(df, s.C + l * s.cstep + n), hn::LoadU(df, hs + l * s.Np + n), acc);
    }
    s.y[l] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
  std::copy(hs + (s.L - 1) * s.Np, hs + s.L * s.Np, s.h);
}

// The sequential scan of a row in spans that end where a chunk or a packed sequence starts:
// the state entering each chunk is saved (when chunk_states is wanted), and where sequence
// k + 1 starts, sequence k's last state is stored and the next one's initial state loaded.
// The steps and their arithmetic are those of one ScanSequential call.
void ScanSequentialSpans(const RowScan& s, const SelectiveScanParams& p,
                         const PackedSequences& seqs, int64_t b, int64_t d) {
  const ChunkStatesView& v = p.chunk_states;
  const int64_t N = p.dstate;
  int64_t k = 0, next_start = seqs.End(b, 0);
  for (int64_t l0 = 0; l0 < s.L;) {
    if (l0 == next_start) {
      StoreStateRow(p.varlen_states, k, d, s.h, N);
      ++k;
      next_start = seqs.End(b, k);
      LoadStateRow(InitialStateOf(p, b, k), d, N, s.Np, s.h);
    }
    int64_t end = next_start;
    if (v.data) {
      if (l0 % v.interval == 0) StoreStateRow(v.Entry(l0 / v.interval), b, d, s.h, N);
      end = std::min(end, (l0 / v.interval + 1) * v.interval);
    }
    RowScan span = s;
    span.B += l0 * s.bstep;
    span.C += l0 * s.cstep;
    span.dt += l0;
    span.dtu += l0;
    span.y += l0;
    span.L = std::min(end, s.L) - l0;
    ScanSequential(span);
    l0 += span.L;
  }
  StoreStateRow(p.varlen_states, k, d, s.h, N);
}

// Packed sequences in the (a, x) pairs of BuildPairs: where sequence k >= 1 starts at l,
// x_l += a_l h0_k and a_l = 0, so that no combine carries the previous sequence's state
// past l. `init` is (Np) scratch.
void RestartPairs(const SelectiveScanParams& p, const PackedSequences& seqs, int64_t b, int64_t d,
                  int64_t Np, float* a /* (L, Np) */, float* x /* (L, Np) */, float* init) {
  for (int64_t k = 1; k < seqs.Count(b); ++k) {
    const int64_t l = seqs.Start(b, k);
    LoadStateRow(InitialStateOf(p, b, k), d, p.dstate, Np, init);
    for (int64_t n = 0; n < Np; ++n) {
      x[l * Np + n] += a[l * Np + n] * init[n];
      a[l * Np + n] = 0.0f;
    }
  }
}

// Log-space over packed sequences: each runs on its own from its initial state. `init` is
// (Np) scratch.
void ScanLogSpaceSequences(const RowScan& s, const SelectiveScanParams& p,
                           const PackedSequences& seqs, int64_t b, int64_t d, float* x,
                           float* init) {
  for (int64_t k = 0; k < seqs.Count(b); ++k) {
    const int64_t l0 = seqs.Start(b, k);
    RowScan span = s;
    span.B += l0 * s.bstep;
    span.dt += l0;
    span.dtu += l0;
    span.L = seqs.End(b, k) - l0;
    if (k > 0) {
      LoadStateRow(InitialStateOf(p, b, k), d, p.dstate, s.Np, init);
      span.h = init;
    }
    ScanLogSpace(span, x + l0 * s.Np);
  }
}

// The chunk states of a row from every step's state hs (L, Np) and h0 (the pair-based
// algorithms keep them all): the state before step k Q, or the initial state of a packed
// sequence starting there. `init` is (Np) scratch.
void StoreRowChunksFromStates(const SelectiveScanParams& p, const PackedSequences& seqs, int64_t b,
                              int64_t d, const float* h0, const float* hs, int64_t Np,
                              float* init) {
  const ChunkStatesView& v = p.chunk_states;
  const int64_t N = p.dstate;
  StoreStateRow(v.Entry(0), b, d, h0, N);
  for (int64_t k = 1; k * v.interval < p.seqlen; ++k) {
    const int64_t l = k * v.interval;
    const float* state = hs + (l - 1) * Np;
    if (seqs.StartsAt(b, l)) {
      LoadStateRow(InitialStateOf(p, b, seqs.SequenceAt(b, l)), d, N, Np, init);
      state = init;
    }
    StoreStateRow(v.Entry(k), b, d, state, N);
  }
}

// Each packed sequence's last state from every step's state hs (L, Np).
void StoreVarlenFromStates(const SelectiveScanParams& p, const PackedSequences& seqs, int64_t b,
                           int64_t d, const float* hs, int64_t Np) {
  if (!p.varlen_states.data) return;
  for (int64_t k = 0; k < seqs.Count(b); ++k)
    StoreStateRow(p.varlen_states, k, d, hs + (seqs.End(b, k) - 1) * Np, p.dstate);
}

// Operands smaller than this are taken to be in cache already (a core's L2 holds 0.5-2 MB).
// Tuned for speed, does not affect results.
constexpr int64_t kPrefetchAboveBytes = int64_t{1} << 20;

// The channel-tiled sequential path (scan_block-inl.h): tiles of W channels over all
// (b, tile) pairs, each walking time in super-blocks of kSuperBlock steps.
void ForwardTiles(const SelectiveScanParams& p, const PackedSequences& seqs, const PackedBC& B,
                  const PackedBC& C, const float* A, int64_t Np) {
  const TileLayout layout = MakeTileLayout(p);
  const int64_t L = p.seqlen, N = p.dstate, Nq = PaddedStates(N);
  const ChunkStatesView& chunks = p.chunk_states;
  ParallelFor(p.batch * layout.Count(), [&](int64_t begin, int64_t end, int) {
    SuperBlock s(std::min(L, kSuperBlock), ScratchSlot::kScanSuperBlock);
    const int64_t state = Nq * kBlockWidth;
    float* h = ThreadScratch(ScratchSlot::kScanTileState, 2 * state + kBlockWidth);  // (Nq, W)
    float* A2 = h + state;     // (Nq, W) decay rates
    float* skip = A2 + state;  // (W) D
    PrefetchQueue pf;
    // Rows that fit in a core's L2 all together are there after the first call; queueing
    // their lines would cost more than it hides (the policy network's scan, 0.5 MB, ran 6%
    // slower with it).
    const int64_t row_bytes = p.batch * p.dim * L * 4 * int64_t{sizeof(float)};  // u, delta, z, out
    const bool prefetch = row_bytes > kPrefetchAboveBytes;
    // While block (item, l0)'s steps run: the z and out rows its FinishBlock reads and writes,
    // and the u and delta rows the next block's PrepareBlock reads (this tile's next
    // super-block, or the next tile's first).
    auto queue_prefetches = [&](int64_t item, int64_t b, int64_t d0, int64_t count, int64_t l0,
                                int64_t len) {
      pf.Clear();
      pf.AddRows(p.z, b, d0, count, l0, len);
      pf.AddRows(p.out, b, d0, count, l0, len);
      int64_t next = item, next_l0 = l0 + s.S;
      if (next_l0 >= L) ++next, next_l0 = 0;
      if (next < end) {
        const int64_t next_b = next / layout.Count();
        int64_t next_d0, next_count;
        layout.Locate(next % layout.Count(), &next_d0, &next_count);
        const int64_t next_len = std::min(s.S, L - next_l0);
        pf.AddRows(p.u, next_b, next_d0, next_count, next_l0, next_len);
        pf.AddRows(p.delta, next_b, next_d0, next_count, next_l0, next_len);
      }
      pf.Spread(len);
    };
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / layout.Count();
      int64_t d0, count;
      layout.Locate(item % layout.Count(), &d0, &count);
      const bool decays = PackTileDecay(A, Np, d0, count, Nq, p.delta_softplus, A2);
      for (int64_t j = 0; j < kBlockWidth; ++j) {
        skip[j] = p.D.data && j < count ? p.D.data[(d0 + j) * p.D.stride_dim] : 0.0f;
      }
      LoadTileStates(p.initial_state, b, d0, count, N, Nq, h);
      int64_t k = 0, next_start = seqs.End(b, 0);  // the packed sequence being scanned
      const TileRefs t{A2, decays, B.Row(b, d0), C.Row(b, d0), Np, Nq};
      for (int64_t l0 = 0; l0 < L; l0 += s.S) {
        const int64_t len = std::min(s.S, L - l0);
        PrepareBlock(p, b, d0, count, l0, len, s);
        if (prefetch) queue_prefetches(item, b, d0, count, l0, len);
        // In spans that end where a chunk starts, so the state entering it can be saved, and
        // where a packed sequence starts, so the state can be swapped.
        for (int64_t l = 0; l < len;) {
          const int64_t step = l0 + l;
          if (step == next_start) {
            StoreTileStates(h, p.varlen_states, k, d0, count, N);
            ++k;
            next_start = seqs.End(b, k);
            const StateRow init = InitialStateOf(p, b, k);
            LoadTileStates(init.view, init.index, d0, count, N, Nq, h);
          }
          int64_t span = std::min(len - l, next_start - step);
          if (chunks.data) {
            if (step % chunks.interval == 0)
              StoreTileStates(h, chunks.Entry(step / chunks.interval), b, d0, count, N);
            span = std::min(span, chunks.interval - step % chunks.interval);
          }
          const int64_t at = l * kBlockWidth;
          StepTile(t, t.B + step * Np, t.C + step * Np, s.dt + at, s.ut + at, skip, h, span,
                   s.y + at, pf);
          l += span;
        }
        FinishBlock(p, b, d0, count, l0, len, s);
      }
      StoreTileStates(h, p.varlen_states, k, d0, count, N);
      StoreTileStates(h, p.final_state, b, d0, count, N);
    }
  });
}

// L = 1, a decode step: every row is a single step, so the general paths' per-row work
// (row buffers, a vector of softplus for one element) would dominate. Here the per-row
// scalars (dt, the gate) are computed vectorised across rows, and each row's state update
// vectorised over n.
void ForwardSingleStep(const SelectiveScanParams& p, const PackedBC& B, const PackedBC& C,
                       const float* A, int64_t Np) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df)), N = p.dstate;
  ParallelFor(p.batch * p.dim, [&](int64_t begin, int64_t end, int) {
    const int64_t padded = RoundUp(end - begin, W);
    std::vector<float> u(padded), x(padded), z(padded), skip(padded), y(padded), h(Np);
    // Row r is (b, d) = (r / D, r % D), stepped without a division per row (a 64-bit divide
    // costs more than the row's whole state update).
    const int64_t b_first = begin / p.dim, d_first = begin % p.dim;
    auto for_each_row = [&](auto&& fn) {
      int64_t b = b_first, d = d_first;
      for (int64_t i = 0; i < end - begin; ++i) {
        fn(b, d, i);
        if (++d == p.dim) d = 0, ++b;
      }
    };
    for_each_row([&](int64_t b, int64_t d, int64_t i) {  // gather the step's scalars
      u[i] = LoadAsF32(p.u.data, p.u.dtype, b * p.u.stride_batch + d * p.u.stride_dim);
      x[i] = LoadAsF32(p.delta.data, p.delta.dtype,
                       b * p.delta.stride_batch + d * p.delta.stride_dim) +
             (p.delta_bias.data ? p.delta_bias.data[d * p.delta_bias.stride_dim] : 0.0f);
      z[i] = p.z.data ? LoadAsF32(p.z.data, p.z.dtype, b * p.z.stride_batch + d * p.z.stride_dim)
                      : 0.0f;
      skip[i] = p.D.data ? p.D.data[d * p.D.stride_dim] : 0.0f;
    });
    if (p.delta_softplus) {
      for (int64_t i = 0; i < padded; i += W)
        hn::StoreU(Softplus(df, hn::LoadU(df, x.data() + i)), df, x.data() + i);
    }
    for_each_row([&](int64_t b, int64_t d, int64_t i) {  // h = exp(dt A) h0 + dt u B, y = C . h
      std::fill(h.begin(), h.end(), 0.0f);
      const F32View& h0 = p.initial_state;
      if (h0.data) {
        for (int64_t n = 0; n < N; ++n)
          h[n] = h0.data[b * h0.stride_batch + d * h0.stride_dim + n * h0.stride_state];
      }
      if (p.chunk_states.data) StoreStateRow(p.chunk_states.Entry(0), b, d, h.data(), N);
      const VF dt = hn::Set(df, x[i]), dtu = hn::Set(df, x[i] * u[i]);
      const float* Ad = A + d * Np;
      const float* Bd = B.Row(b, d);
      const float* Cd = C.Row(b, d);
      VF acc = hn::Zero(df);
      for (int64_t n = 0; n < Np; n += W) {
        const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, Ad + n)));
        const VF hn_ =
            hn::MulAdd(a, hn::LoadU(df, h.data() + n), hn::Mul(dtu, hn::LoadU(df, Bd + n)));
        hn::StoreU(hn_, df, h.data() + n);
        acc = hn::MulAdd(hn::LoadU(df, Cd + n), hn_, acc);
      }
      y[i] = hn::GetLane(hn::SumOfLanes(df, acc));
      if (p.final_state.data) StoreStateRow(p.final_state, b, d, h.data(), N);
      if (p.varlen_states.data) StoreStateRow(p.varlen_states, 0, d, h.data(), N);  // S = 1
    });
    for (int64_t i = 0; i < padded; i += W) {  // out = (y + D u) silu(z)
      VF out = hn::MulAdd(hn::LoadU(df, skip.data() + i), hn::LoadU(df, u.data() + i),
                          hn::LoadU(df, y.data() + i));
      if (p.z.data) out = hn::Mul(out, Silu(df, hn::LoadU(df, z.data() + i)));
      hn::StoreU(out, df, y.data() + i);
    }
    for_each_row([&](int64_t b, int64_t d, int64_t i) {
      StoreFromF32(p.out.data, p.out.dtype, b * p.out.stride_batch + d * p.out.stride_dim, y[i]);
    });
  });
}

Status ScanForwardImpl(const SelectiveScanParams& p, const SelectiveScanOptions& options) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Np = PackedStateStride(p.dstate, lanes), L = p.seqlen, N = p.dstate;
  const PackedBC B = PackBC(p.B, p, Np, ScratchSlot::kScanPackedB),
                 C = PackBC(p.C, p, Np, ScratchSlot::kScanPackedC);
  const float* A = PackA(p.A, p, Np);
  const ScanAlgorithm algorithm = options.algorithm;
  const bool pairs = algorithm != ScanAlgorithm::kSequential;
  const int64_t chunk =
      options.chunk_length > 0 ? options.chunk_length : kDefaultCheckpointInterval;
  if (L == 1) {  // every algorithm is the same single step (and there is one sequence)
    ForwardSingleStep(p, B, C, A, Np);
    return Status::Ok();
  }
  const PackedSequences seqs = SequencesOf(p);
  if (algorithm == ScanAlgorithm::kSequential && TilesApply(p)) {
    ForwardTiles(p, seqs, B, C, A, Np);
    return Status::Ok();
  }

  ParallelFor(p.batch * p.dim, [&](int64_t begin, int64_t end, int) {
    RowBuffers rb(RoundUp(L, lanes));
    std::vector<float> gated(rb.u.size()), h(Np), h0(Np), init(Np);
    std::vector<float> a(pairs ? L * Np : 0), x(pairs ? L * Np : 0);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / p.dim, d = row % p.dim;
      PrepareRow(df, p, b, d, rb, /*want_grad=*/false);
      LoadStateRow(InitialStateOf(p, b, 0), d, N, Np, h.data());
      const RowScan s{A + d * Np,
                      B.Row(b, d),
                      C.Row(b, d),
                      B.TimeStep(),
                      C.TimeStep(),
                      rb.dt.data(),
                      rb.dtu.data(),
                      rb.y.data(),
                      h.data(),
                      L,
                      Np};
      if (algorithm == ScanAlgorithm::kSequential) {
        if (p.chunk_states.data || seqs.packed()) {
          ScanSequentialSpans(s, p, seqs, b, d);
        } else {
          ScanSequential(s);
        }
      } else {
        if (p.chunk_states.data) std::copy(h.begin(), h.end(), h0.begin());
        if (algorithm == ScanAlgorithm::kLogSpace) {
          ScanLogSpaceSequences(s, p, seqs, b, d, x.data(), init.data());
        } else {
          BuildPairs(s, a.data(), x.data());
          if (seqs.packed()) RestartPairs(p, seqs, b, d, Np, a.data(), x.data(), init.data());
          if (algorithm == ScanAlgorithm::kChunked) ScanChunked(s, a.data(), x.data(), chunk);
          if (algorithm == ScanAlgorithm::kBlelloch) ScanBlelloch(s, a.data(), x.data());
          if (algorithm == ScanAlgorithm::kHillisSteele) ScanHillisSteele(s, a.data(), x.data());
        }
        if (p.chunk_states.data)
          StoreRowChunksFromStates(p, seqs, b, d, h0.data(), x.data(), Np, init.data());
        StoreVarlenFromStates(p, seqs, b, d, x.data(), Np);
        ReadOut(s, x.data());
      }
      std::fill(rb.y.begin() + L, rb.y.end(), 0.0f);
      FinishRow(df, p, b, d, rb, gated.data());
      if (p.final_state.data) StoreStateRow(p.final_state, b, d, h.data(), N);
    }
  });
  return Status::Ok();
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(ScanForwardImpl);

Status SelectiveScanForward(const SelectiveScanParams& p, const SelectiveScanOptions& options) {
  FlushDenormals flush;
  return HWY_DYNAMIC_DISPATCH(ScanForwardImpl)(p, options);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

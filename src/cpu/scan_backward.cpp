// CPU selective-scan backward, per-row layout: the adjoint recurrence with checkpointed
// recomputation, for the forms the channel-tiled backward (scan_backward_tiles.cpp) does not
// take: constant B or C, or B and C groupings that do not nest. The entry point picks.
// Dimension legend: B batch, D channels, L length, N state size, Np N padded to the vector
// width, Q checkpoint interval (options.chunk_length, default 64), G groups of B/C.
//
// Per (b, d) row: a forward pass keeps only the states entering each chunk of Q steps
// (ceil(L/Q) x Np floats); then chunks are visited last to first, each recomputing its Q
// decays and states from its checkpoint and running the adjoint
//   g_l = dy_l C_l + a_{l+1} g_{l+1},  g_{L-1} = dy_{L-1} C_{L-1} + dfinal_state
// (see src/ref/selective_scan_ref.cpp for every gradient's formula). Extra memory per thread
// is O((L/Q + Q) * Np); nothing of size (B, D, L, N) is kept. Packed sequences
// (scan_sequences.hpp): where sequence k starts, h_{l-1} reads as its initial state, and g
// does not flow back past it: a_l g_l is that state's gradient, and g restarts from the
// gradient reaching sequence k - 1's last state.
//
// Determinism: work is split over channels d, each thread owning whole channels, so dA, dD,
// ddelta_bias and the constant-form dB/dC of a channel are summed by one thread in a fixed
// order. Variable dB/dC sum over the channels of a group: each block of channels writes its own
// partial buffer, and the partials are added in a fixed order. Same inputs and thread count,
// same bits. The backward always uses a checkpointed sequential adjoint, whatever
// options.algorithm.
#include <algorithm>
#include <vector>

#include "core/dtype.hpp"
#include "core/float_mode.hpp"
#include "core/parallel.hpp"
#include "cpu/scan_packing.hpp"
#include "cpu/scan_backward_tiles.hpp"
#include "cpu/scan_sequences.hpp"
#include "cpu/selective_scan.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scan_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/scan_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- per-row steps shared by both layouts ----

// Loads h0 (or zeros) into h and dfinal_state (or zeros) into g for row (b, d); (N) each, in
// element stride `step` (1 for a row's own buffer, W for a tile column).
void LoadRowStates(const SelectiveScanBwdParams& p, int64_t b, int64_t d, float* h, float* g,
                   int64_t step) {
  for (int64_t n = 0; n < p.dstate; ++n) {
    const F32View& h0 = p.initial_state;
    const F32View& gf = p.dfinal_state;
    h[n * step] =
        h0.data ? h0.data[b * h0.stride_batch + d * h0.stride_dim + n * h0.stride_state] : 0.0f;
    g[n * step] =
        gf.data ? gf.data[b * gf.stride_batch + d * gf.stride_dim + n * gf.stride_state] : 0.0f;
  }
}

// dy (the gradient reaching y + D u) and dz from dout, for one row whose rb.y holds C.h;
// returns the row's contribution to dD.
float GateBackward(const SelectiveScanBwdParams& p, int64_t b, int64_t d, const RowBuffers& rb,
                   RowGrads& rg, float skip) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(rg.dy.size());
  std::fill(rg.dout.begin() + p.seqlen, rg.dout.end(), 0.0f);
  RowToF32(p.dout.data, p.dout.dtype, b * p.dout.stride_batch + d * p.dout.stride_dim, p.seqlen,
           rg.dout.data());
  VF dD = hn::Zero(df);
  for (int64_t l = 0; l < padded; l += lanes) {
    const VF u = hn::LoadU(df, rb.u.data() + l);
    const VF y = hn::MulAdd(hn::Set(df, skip), u, hn::LoadU(df, rb.y.data() + l));
    const VF dout = hn::LoadU(df, rg.dout.data() + l);
    VF dy = dout;
    if (p.z.data) {
      const VF z = hn::LoadU(df, rb.z.data() + l);
      dy = hn::Mul(dout, Silu(df, z));
      hn::StoreU(hn::Mul(hn::Mul(dout, y), SiluGrad(df, z)), df, rg.dz.data() + l);
    }
    hn::StoreU(dy, df, rg.dy.data() + l);
    dD = hn::MulAdd(dy, u, dD);
  }
  return hn::GetLane(hn::SumOfLanes(df, dD));
}

// With rg.du = sum_n g B and rg.ddelta = sum_n (dLoss/da) a A from the adjoint:
//   du = dt sum_n g B + D dy,  ddelta = (u sum_n g B + sum_n (dLoss/da) a A) * d dt/d delta.
// Writes du, ddelta, dz rows; returns the row's contribution to ddelta_bias.
float FinishRowGrads(const SelectiveScanBwdParams& p, int64_t b, int64_t d, const RowBuffers& rb,
                     RowGrads& rg, float skip) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(rg.du.size()), L = p.seqlen;
  VF bias_sum = hn::Zero(df);
  for (int64_t l = 0; l < padded; l += lanes) {
    const VF gB = hn::LoadU(df, rg.du.data() + l), daA = hn::LoadU(df, rg.ddelta.data() + l);
    const VF du = hn::MulAdd(gB, hn::LoadU(df, rb.dt.data() + l),
                             hn::Mul(hn::Set(df, skip), hn::LoadU(df, rg.dy.data() + l)));
    const VF ddelta = hn::Mul(hn::MulAdd(gB, hn::LoadU(df, rb.u.data() + l), daA),
                              hn::LoadU(df, rb.ddt_ddelta.data() + l));
    hn::StoreU(du, df, rg.du.data() + l);
    hn::StoreU(ddelta, df, rg.ddelta.data() + l);
    bias_sum = hn::Add(bias_sum, ddelta);  // padded lanes hold dy = 0, so add 0
  }
  auto store_row = [&](const SeqView& v, const std::vector<float>& row) {
    if (v.data) RowFromF32(row.data(), L, v.data, v.dtype, b * v.stride_batch + d * v.stride_dim);
  };
  store_row(p.du, rg.du);
  store_row(p.ddelta, rg.ddelta);
  store_row(p.dz, rg.dz);
  return hn::GetLane(hn::SumOfLanes(df, bias_sum));
}

// Adds block partials of variable dB or dC, laid out (slab, L, S, R) per block, in a fixed
// order, and writes sum_{block, r} part[slab, l, n, r] to out (B, G, N, L).
void ReducePartials(const BCView& out, const std::vector<float>& parts, int blocks, int64_t slabs,
                    int64_t groups, int64_t L, int64_t N, int64_t S, int64_t R) {
  if (!out.data) return;
  const int64_t slab_size = L * S * R, block_size = slabs * slab_size;
  ParallelFor(slabs, [&](int64_t begin, int64_t end, int) {
    for (int64_t slab = begin; slab < end; ++slab) {
      const int64_t base = (slab / groups) * out.stride_batch + (slab % groups) * out.stride_group;
      for (int64_t l = 0; l < L; ++l) {
        for (int64_t n = 0; n < N; ++n) {
          float sum = 0.0f;
          for (int k = 0; k < blocks; ++k) {
            const float* part = parts.data() + k * block_size + slab * slab_size + (l * S + n) * R;
            for (int64_t r = 0; r < R; ++r) sum += part[r];
          }
          StoreFromF32(out.data, out.dtype, base + n * out.stride_state + l * out.stride_time, sum);
        }
      }
    }
  });
}

// ---- per-row layout: the state of one row vectorised over n ----

struct RowWorkspace {
  RowBuffers rb;
  RowGrads rg;
  std::vector<float> checkpoints;             // (ceil(L/Q), Np) state entering each chunk
  std::vector<float> decay, state;            // (Q, Np) a and h of the chunk being reversed
  std::vector<float> g, h, init;              // (Np)
  std::vector<float> dA, dB_const, dC_const;  // (Np) this channel's sums
  RowWorkspace(int64_t padded_len, int64_t chunks, int64_t chunk, int64_t Np)
      : rb(padded_len),
        rg(padded_len),
        checkpoints(chunks * Np),
        decay(chunk * Np),
        state(chunk * Np),
        g(Np),
        h(Np),
        init(Np),
        dA(Np),
        dB_const(Np),
        dC_const(Np) {}
};

struct RowRefs {
  const float* A;  // (Np)
  const float* B;  // (L or 1, Np)
  const float* C;  // (L or 1, Np)
  int64_t bstep, cstep;
  float* dB;  // (L, Np) this block's partial for the row's (b, group), or nullptr
  float* dC;
};

// Where the packed sequences of row (b, d) start from (PackedSequences), for the row kernels.
struct RowSequences {
  const SelectiveScanBwdParams& p;
  const PackedSequences& seqs;
  int64_t b, d;
  // Loads the initial state of the sequence starting at l (l > 0) into `init` (Np).
  const float* InitialState(int64_t l, int64_t Np, float* init) const {
    LoadStateRow(InitialStateOf(p, b, seqs.SequenceAt(b, l)), d, p.dstate, Np, init);
    return init;
  }
};

// The forward of one row, keeping the checkpoints (the state entering each chunk, or the
// initial state of a sequence starting there) and y_l = C_l . h_l.
void ForwardWithCheckpoints(const RowRefs& r, const RowSequences& rs, RowWorkspace& w, int64_t L,
                            int64_t Np, int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t k = 0, next_start = rs.seqs.End(rs.b, 0);
  for (int64_t l = 0; l < L; ++l) {
    if (l == next_start) {
      next_start = rs.seqs.End(rs.b, ++k);
      rs.InitialState(l, Np, w.h.data());
    }
    if (l % chunk == 0) std::copy(w.h.begin(), w.h.end(), w.checkpoints.begin() + (l / chunk) * Np);
    const VF dt = hn::Set(df, w.rb.dt[l]), dtu = hn::Set(df, w.rb.dtu[l]);
    VF acc = hn::Zero(df);
    for (int64_t n = 0; n < Np; n += lanes) {
      const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, r.A + n)));
      const VF h = hn::MulAdd(a, hn::LoadU(df, w.h.data() + n),
                              hn::Mul(dtu, hn::LoadU(df, r.B + l * r.bstep + n)));
      hn::StoreU(h, df, w.h.data() + n);
      acc = hn::MulAdd(hn::LoadU(df, r.C + l * r.cstep + n), h, acc);
    }
    w.rb.y[l] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

// Reverses one row through all its chunks; leaves dh0 in w.g, sum_n g B in w.rg.du and
// sum_n (dLoss/da) a A in w.rg.ddelta, and writes the gradients of the initial states of
// packed sequences after the first.
void AdjointRow(const RowRefs& r, const RowSequences& rs, RowWorkspace& w, int64_t L, int64_t Np,
                int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t chunks = (L + chunk - 1) / chunk;
  const SelectiveScanBwdParams& p = rs.p;
  std::fill(w.rg.du.begin(), w.rg.du.end(), 0.0f);
  std::fill(w.rg.ddelta.begin(), w.rg.ddelta.end(), 0.0f);
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t start = c * chunk, end = std::min(L, start + chunk);
    const float* h_in = w.checkpoints.data() + c * Np;
    // The state step l continues from: the chunk's checkpoint, the initial state of a
    // sequence starting at l, or step l - 1's.
    auto previous = [&](int64_t l) -> const float* {
      if (l == start) return h_in;
      if (rs.seqs.StartsAt(rs.b, l)) return rs.InitialState(l, Np, w.init.data());
      return w.state.data() + (l - start - 1) * Np;
    };
    for (int64_t l = start; l < end; ++l) {  // recompute a_l and h_l for the chunk
      const VF dt = hn::Set(df, w.rb.dt[l]), dtu = hn::Set(df, w.rb.dtu[l]);
      const float* h_prev = previous(l);
      for (int64_t n = 0; n < Np; n += lanes) {
        const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, r.A + n)));
        hn::StoreU(a, df, w.decay.data() + (l - start) * Np + n);
        const VF h = hn::MulAdd(a, hn::LoadU(df, h_prev + n),
                                hn::Mul(dtu, hn::LoadU(df, r.B + l * r.bstep + n)));
        hn::StoreU(h, df, w.state.data() + (l - start) * Np + n);
      }
    }
    for (int64_t l = end - 1; l >= start; --l) {
      const int64_t q = l - start;
      const float* h_prev = previous(l);
      const VF dy = hn::Set(df, w.rg.dy[l]), dt = hn::Set(df, w.rb.dt[l]),
               dtu = hn::Set(df, w.rb.dtu[l]);
      VF gB = hn::Zero(df), daA = hn::Zero(df);
      for (int64_t n = 0; n < Np; n += lanes) {
        const VF Bl = hn::LoadU(df, r.B + l * r.bstep + n);
        const VF a = hn::LoadU(df, w.decay.data() + q * Np + n);
        const VF h = hn::LoadU(df, w.state.data() + q * Np + n);
        const VF g =
            hn::MulAdd(dy, hn::LoadU(df, r.C + l * r.cstep + n), hn::LoadU(df, w.g.data() + n));
        const VF da_a = hn::Mul(hn::Mul(g, hn::LoadU(df, h_prev + n)), a);  // dLoss/da_l * a_l
        gB = hn::MulAdd(g, Bl, gB);
        daA = hn::MulAdd(da_a, hn::LoadU(df, r.A + n), daA);
        hn::StoreU(hn::MulAdd(da_a, dt, hn::LoadU(df, w.dA.data() + n)), df, w.dA.data() + n);
        float* dB_out = r.dB ? r.dB + l * Np + n : w.dB_const.data() + n;
        float* dC_out = r.dC ? r.dC + l * Np + n : w.dC_const.data() + n;
        hn::StoreU(hn::MulAdd(g, dtu, hn::LoadU(df, dB_out)), df, dB_out);
        hn::StoreU(hn::MulAdd(dy, h, hn::LoadU(df, dC_out)), df, dC_out);
        hn::StoreU(hn::Mul(g, a), df, w.g.data() + n);
      }
      w.rg.du[l] = hn::GetLane(hn::SumOfLanes(df, gB));
      w.rg.ddelta[l] = hn::GetLane(hn::SumOfLanes(df, daA));
      if (rs.seqs.StartsAt(rs.b, l)) {  // g is the gradient of sequence k's initial state
        const int64_t k = rs.seqs.SequenceAt(rs.b, l);
        const StateRow dinit = InitialStateGradOf(p, rs.b, k);
        StoreStateRow(dinit.view, dinit.index, rs.d, w.g.data(), p.dstate);
        LoadStateRow({p.dvarlen_states, k - 1}, rs.d, p.dstate, Np, w.g.data());
      }
    }
  }
}

void BackwardRows(const SelectiveScanBwdParams& p, const PackedBC& B, const PackedBC& C,
                  const float* A, int64_t Np, int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t L = p.seqlen, N = p.dstate, D = p.dim, chunks = (L + chunk - 1) / chunk;
  const int blocks = ParallelBlocks(D);
  const int64_t dB_size = B.is_variable ? B.size : 0;
  const int64_t dC_size = C.is_variable ? C.size : 0;
  std::vector<float> dB_part(blocks * dB_size, 0.0f), dC_part(blocks * dC_size, 0.0f);

  const PackedSequences seqs = SequencesOf(p);
  ParallelFor(D, [&](int64_t begin, int64_t end, int block) {
    RowWorkspace w(RoundUp(L, lanes), chunks, std::min(chunk, L), Np);
    for (int64_t d = begin; d < end; ++d) {
      const float skip = p.D.data ? p.D.data[d * p.D.stride_dim] : 0.0f;
      std::fill(w.dA.begin(), w.dA.end(), 0.0f);
      std::fill(w.dB_const.begin(), w.dB_const.end(), 0.0f);
      std::fill(w.dC_const.begin(), w.dC_const.end(), 0.0f);
      float dD = 0.0f, ddelta_bias = 0.0f;
      for (int64_t b = 0; b < p.batch; ++b) {
        PrepareRow(df, p, b, d, w.rb, /*want_grad=*/true);
        RowRefs r{A + d * Np,   B.Row(b, d), C.Row(b, d), B.TimeStep(),
                  C.TimeStep(), nullptr,     nullptr};
        if (dB_size) r.dB = dB_part.data() + block * dB_size + (B.Row(b, d) - B.data);
        if (dC_size) r.dC = dC_part.data() + block * dC_size + (C.Row(b, d) - C.data);
        std::fill(w.h.begin(), w.h.end(), 0.0f);
        std::fill(w.g.begin(), w.g.end(), 0.0f);
        LoadRowStates(p, b, d, w.h.data(), w.g.data(), 1);
        if (p.dvarlen_states.data) {  // the last sequence's last state is h_{L-1} too
          LoadStateRow({p.dvarlen_states, seqs.Count(b) - 1}, d, N, Np, w.init.data());
          for (int64_t n = 0; n < N; ++n) w.g[n] += w.init[n];
        }
        const RowSequences rs{p, seqs, b, d};
        ForwardWithCheckpoints(r, rs, w, L, Np, chunk);
        std::fill(w.rb.y.begin() + L, w.rb.y.end(), 0.0f);
        dD += GateBackward(p, b, d, w.rb, w.rg, skip);
        AdjointRow(r, rs, w, L, Np, chunk);
        ddelta_bias += FinishRowGrads(p, b, d, w.rb, w.rg, skip);
        if (p.dinitial_state.data) StoreStateRow(p.dinitial_state, b, d, w.g.data(), N);
      }
      for (int64_t n = 0; n < N; ++n) {
        if (p.dA.data) p.dA.data[d * p.dA.stride_dim + n * p.dA.stride_state] = w.dA[n];
        if (p.dB.data && !dB_size) {
          StoreFromF32(p.dB.data, p.dB.dtype, d * p.dB.stride_group + n * p.dB.stride_state,
                       w.dB_const[n]);
        }
        if (p.dC.data && !dC_size) {
          StoreFromF32(p.dC.data, p.dC.dtype, d * p.dC.stride_group + n * p.dC.stride_state,
                       w.dC_const[n]);
        }
      }
      if (p.dD.data) p.dD.data[d * p.dD.stride_dim] = dD;
      if (p.ddelta_bias.data) p.ddelta_bias.data[d * p.ddelta_bias.stride_dim] = ddelta_bias;
    }
  });
  if (dB_size) ReducePartials(p.dB, dB_part, blocks, dB_size / (L * Np), B.groups, L, N, Np, 1);
  if (dC_size) ReducePartials(p.dC, dC_part, blocks, dC_size / (L * Np), C.groups, L, N, Np, 1);
}

Status ScanBackwardImpl(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Np = PackedStateStride(p.dstate, W);
  const int64_t chunk =
      options.chunk_length > 0 ? options.chunk_length : kDefaultCheckpointInterval;
  const PackedBC B = PackBC(p.B, p, Np, ScratchSlot::kScanPackedB),
                 C = PackBC(p.C, p, Np, ScratchSlot::kScanPackedC);
  const float* A = PackA(p.A, p, Np);
  BackwardRows(p, B, C, A, Np, chunk);
  return Status::Ok();
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(ScanBackwardImpl);

Status SelectiveScanBackward(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options) {
  FlushDenormals flush;
  if (TilesApply(p)) return SelectiveScanBackwardTiles(p, options);
  return HWY_DYNAMIC_DISPATCH(ScanBackwardImpl)(p, options);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

// CPU selective-scan backward: the adjoint recurrence with checkpointed recomputation.
// Dimension legend: B batch, D channels, L length, N state size, Np N padded to the vector
// width, Q checkpoint interval (options.chunk_length, default 64), G groups of B/C.
//
// Per (b, d) row: a forward pass keeps only the states entering each chunk of Q steps
// (ceil(L/Q) x Np floats); then chunks are visited last to first, each recomputing its Q
// decays and states from its checkpoint and running the adjoint
//   g_l = dy_l C_l + a_{l+1} g_{l+1},  g_{L-1} = dy_{L-1} C_{L-1} + dfinal_state
// (see src/ref/selective_scan_ref.cpp for every gradient's formula). Extra memory per thread
// is O((L/Q + Q) * Np); nothing of size (B, D, L, N) is kept.
//
// Two layouts, as in the forward: per row (state vectorised over n) and channel tiles (W
// channels per vector, scan_tile-inl.h), the latter when B/C are variable and a group's
// channels come in multiples of W.
//
// Determinism: work is split over channels d, each thread owning whole channels, so dA, dD,
// ddelta_bias and the constant-form dB/dC of a channel are summed by one thread in a fixed
// order. Variable dB/dC sum over the channels of a group: each block of channels writes its own
// partial buffer (the tile path keeps one partial per lane too), and the partials are added in
// a fixed order. Same inputs and thread count, same bits. The backward always uses this
// sequential adjoint, whatever options.algorithm.
#include <algorithm>
#include <vector>

#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "cpu/scan_packing.hpp"
#include "cpu/selective_scan.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scan_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/scan_row-inl.h"
#include "cpu/scan_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- per-row steps shared by both layouts ----

// dy (the gradient reaching y + D u) and dz from dout, for one row whose rb.y holds C.h;
// returns the row's contribution to dD.
float GateBackward(const SelectiveScanBwdParams& p, int64_t b, int64_t d, const RowBuffers& rb, RowGrads& rg,
                   float skip) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(rg.dy.size());
  std::fill(rg.dout.begin() + p.seqlen, rg.dout.end(), 0.0f);
  RowToF32(p.dout.data, p.dout.dtype, b * p.dout.stride_batch + d * p.dout.stride_dim, p.seqlen, rg.dout.data());
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
float FinishRowGrads(const SelectiveScanBwdParams& p, int64_t b, int64_t d, const RowBuffers& rb, RowGrads& rg,
                     float skip) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(rg.du.size()), L = p.seqlen;
  VF bias_sum = hn::Zero(df);
  for (int64_t l = 0; l < padded; l += lanes) {
    const VF gB = hn::LoadU(df, rg.du.data() + l), daA = hn::LoadU(df, rg.ddelta.data() + l);
    const VF du = hn::MulAdd(gB, hn::LoadU(df, rb.dt.data() + l), hn::Mul(hn::Set(df, skip), hn::LoadU(df, rg.dy.data() + l)));
    const VF ddelta = hn::Mul(hn::MulAdd(gB, hn::LoadU(df, rb.u.data() + l), daA), hn::LoadU(df, rb.ddt_ddelta.data() + l));
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
  std::vector<float> checkpoints;  // (ceil(L/Q), Np) state entering each chunk
  std::vector<float> decay, state;  // (Q, Np) a and h of the chunk being reversed
  std::vector<float> g, h;          // (Np)
  std::vector<float> dA, dB_const, dC_const;  // (Np) this channel's sums
  RowWorkspace(int64_t padded_len, int64_t chunks, int64_t chunk, int64_t Np)
      : rb(padded_len), rg(padded_len), checkpoints(chunks * Np), decay(chunk * Np), state(chunk * Np), g(Np),
        h(Np), dA(Np), dB_const(Np), dC_const(Np) {}
};

struct RowRefs {
  const float* A;  // (Np)
  const float* B;  // (L or 1, Np)
  const float* C;  // (L or 1, Np)
  int64_t bstep, cstep;
  float* dB;       // (L, Np) this block's partial for the row's (b, group), or nullptr
  float* dC;
};

// The forward of one row, keeping the checkpoints and y_l = C_l . h_l.
void ForwardWithCheckpoints(const RowRefs& r, RowWorkspace& w, int64_t L, int64_t Np, int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t l = 0; l < L; ++l) {
    if (l % chunk == 0) std::copy(w.h.begin(), w.h.end(), w.checkpoints.begin() + (l / chunk) * Np);
    const VF dt = hn::Set(df, w.rb.dt[l]), dtu = hn::Set(df, w.rb.dtu[l]);
    VF acc = hn::Zero(df);
    for (int64_t n = 0; n < Np; n += lanes) {
      const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, r.A + n)));
      const VF h = hn::MulAdd(a, hn::LoadU(df, w.h.data() + n), hn::Mul(dtu, hn::LoadU(df, r.B + l * r.bstep + n)));
      hn::StoreU(h, df, w.h.data() + n);
      acc = hn::MulAdd(hn::LoadU(df, r.C + l * r.cstep + n), h, acc);
    }
    w.rb.y[l] = hn::GetLane(hn::SumOfLanes(df, acc));
  }
}

// Reverses one row through all its chunks; leaves dh0 in w.g, sum_n g B in w.rg.du and
// sum_n (dLoss/da) a A in w.rg.ddelta.
void AdjointRow(const RowRefs& r, RowWorkspace& w, int64_t L, int64_t Np, int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t chunks = (L + chunk - 1) / chunk;
  std::fill(w.rg.du.begin(), w.rg.du.end(), 0.0f);
  std::fill(w.rg.ddelta.begin(), w.rg.ddelta.end(), 0.0f);
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t start = c * chunk, end = std::min(L, start + chunk);
    const float* h_in = w.checkpoints.data() + c * Np;
    for (int64_t l = start; l < end; ++l) {  // recompute a_l and h_l for the chunk
      const VF dt = hn::Set(df, w.rb.dt[l]), dtu = hn::Set(df, w.rb.dtu[l]);
      const float* h_prev = l == start ? h_in : w.state.data() + (l - start - 1) * Np;
      for (int64_t n = 0; n < Np; n += lanes) {
        const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, r.A + n)));
        hn::StoreU(a, df, w.decay.data() + (l - start) * Np + n);
        const VF h = hn::MulAdd(a, hn::LoadU(df, h_prev + n), hn::Mul(dtu, hn::LoadU(df, r.B + l * r.bstep + n)));
        hn::StoreU(h, df, w.state.data() + (l - start) * Np + n);
      }
    }
    for (int64_t l = end - 1; l >= start; --l) {
      const int64_t q = l - start;
      const float* h_prev = q == 0 ? h_in : w.state.data() + (q - 1) * Np;
      const VF dy = hn::Set(df, w.rg.dy[l]), dt = hn::Set(df, w.rb.dt[l]), dtu = hn::Set(df, w.rb.dtu[l]);
      VF gB = hn::Zero(df), daA = hn::Zero(df);
      for (int64_t n = 0; n < Np; n += lanes) {
        const VF Bl = hn::LoadU(df, r.B + l * r.bstep + n);
        const VF a = hn::LoadU(df, w.decay.data() + q * Np + n);
        const VF h = hn::LoadU(df, w.state.data() + q * Np + n);
        const VF g = hn::MulAdd(dy, hn::LoadU(df, r.C + l * r.cstep + n), hn::LoadU(df, w.g.data() + n));
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
    }
  }
}

void BackwardRows(const SelectiveScanBwdParams& p, const PackedBC& B, const PackedBC& C,
                  const std::vector<float>& A, int64_t Np, int64_t chunk) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t L = p.seqlen, N = p.dstate, D = p.dim, chunks = (L + chunk - 1) / chunk;
  const int blocks = ParallelBlocks(D);
  const int64_t dB_size = B.is_variable ? static_cast<int64_t>(B.data.size()) : 0;
  const int64_t dC_size = C.is_variable ? static_cast<int64_t>(C.data.size()) : 0;
  std::vector<float> dB_part(blocks * dB_size, 0.0f), dC_part(blocks * dC_size, 0.0f);

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
        RowRefs r{A.data() + d * Np, B.Row(b, d), C.Row(b, d), B.TimeStep(), C.TimeStep(), nullptr, nullptr};
        if (dB_size) r.dB = dB_part.data() + block * dB_size + (B.Row(b, d) - B.data.data());
        if (dC_size) r.dC = dC_part.data() + block * dC_size + (C.Row(b, d) - C.data.data());
        std::fill(w.h.begin(), w.h.end(), 0.0f);
        std::fill(w.g.begin(), w.g.end(), 0.0f);
        LoadState(p.initial_state, b, d, N, w.h.data(), 1);
        LoadState(p.dfinal_state, b, d, N, w.g.data(), 1);
        ForwardWithCheckpoints(r, w, L, Np, chunk);
        std::fill(w.rb.y.begin() + L, w.rb.y.end(), 0.0f);
        dD += GateBackward(p, b, d, w.rb, w.rg, skip);
        AdjointRow(r, w, L, Np, chunk);
        ddelta_bias += FinishRowGrads(p, b, d, w.rb, w.rg, skip);
        StoreState(p.dinitial_state, b, d, N, w.g.data(), 1);
      }
      for (int64_t n = 0; n < N; ++n) {
        if (p.dA.data) p.dA.data[d * p.dA.stride_dim + n * p.dA.stride_state] = w.dA[n];
        if (p.dB.data && !dB_size) {
          StoreFromF32(p.dB.data, p.dB.dtype, d * p.dB.stride_group + n * p.dB.stride_state, w.dB_const[n]);
        }
        if (p.dC.data && !dC_size) {
          StoreFromF32(p.dC.data, p.dC.dtype, d * p.dC.stride_group + n * p.dC.stride_state, w.dC_const[n]);
        }
      }
      if (p.dD.data) p.dD.data[d * p.dD.stride_dim] = dD;
      if (p.ddelta_bias.data) p.ddelta_bias.data[d * p.ddelta_bias.stride_dim] = ddelta_bias;
    }
  });
  if (dB_size) ReducePartials(p.dB, dB_part, blocks, dB_size / (L * Np), B.groups, L, N, Np, 1);
  if (dC_size) ReducePartials(p.dC, dC_part, blocks, dC_size / (L * Np), C.groups, L, N, Np, 1);
}

// ---- channel-tiled layout: W channels per vector ----

struct TileWorkspace {
  std::vector<RowBuffers> rows;
  std::vector<RowGrads> grads;
  std::vector<float> dt, dtu, y, dy, gB, daA;  // (Lp, W)
  std::vector<float> checkpoints;              // (ceil(L/Q), N, W)
  std::vector<float> decay, state;             // (Q, N, W)
  std::vector<float> h, g, A, dA;              // (N, W)
  TileWorkspace(int64_t W, int64_t padded_len, int64_t chunks, int64_t chunk, int64_t N)
      : rows(W, RowBuffers(padded_len)), grads(W, RowGrads(padded_len)), dt(padded_len * W), dtu(padded_len * W),
        y(padded_len * W), dy(padded_len * W), gB(padded_len * W), daA(padded_len * W),
        checkpoints(chunks * N * W), decay(chunk * N * W), state(chunk * N * W), h(N * W), g(N * W), A(N * W),
        dA(N * W) {}
};

// Reverses a tile through all its chunks (the tiled twin of AdjointRow): gB and daA get the
// per-step sums over n, dA the tile's decay gradient, and dB / dC (L, N, W) the per-lane
// partials of the tile's (b, group). Leaves dh0 in w.g.
struct TileRefs {
  const float* B;  // (L, Np) packed rows of the tile's (b, group)
  const float* C;  // (L, Np)
  int64_t Np;
  float* dB;       // (L, N, W) this block's per-lane partial
  float* dC;       // (L, N, W)
};

void AdjointTile(TileWorkspace& w, const TileRefs& r, int64_t L, int64_t N, int64_t chunk) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df)), NW = N * W;
  const int64_t chunks = (L + chunk - 1) / chunk;
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t start = c * chunk, end = std::min(L, start + chunk);
    const float* h_in = w.checkpoints.data() + c * NW;
    for (int64_t l = start; l < end; ++l) {  // recompute a_l and h_l for the chunk
      const VF dt = hn::LoadU(df, w.dt.data() + l * W), dtu = hn::LoadU(df, w.dtu.data() + l * W);
      const float* h_prev = l == start ? h_in : w.state.data() + (l - start - 1) * NW;
      float* a_out = w.decay.data() + (l - start) * NW;
      float* h_out = w.state.data() + (l - start) * NW;
      const float* Bl = r.B + l * r.Np;
      for (int64_t n = 0; n < N; ++n) {
        const VF a = FastExp(df, hn::Mul(dt, hn::LoadU(df, w.A.data() + n * W)));
        hn::StoreU(a, df, a_out + n * W);
        const VF h = hn::MulAdd(a, hn::LoadU(df, h_prev + n * W), hn::Mul(dtu, hn::Set(df, Bl[n])));
        hn::StoreU(h, df, h_out + n * W);
      }
    }
    for (int64_t l = end - 1; l >= start; --l) {
      const int64_t q = l - start;
      const float* h_prev = q == 0 ? h_in : w.state.data() + (q - 1) * NW;
      const float* a_l = w.decay.data() + q * NW;
      const float* h_l = w.state.data() + q * NW;
      const float* Bl = r.B + l * r.Np;
      const float* Cl = r.C + l * r.Np;
      float* dBl = r.dB + l * NW;
      float* dCl = r.dC + l * NW;
      const VF dy = hn::LoadU(df, w.dy.data() + l * W);
      const VF dt = hn::LoadU(df, w.dt.data() + l * W), dtu = hn::LoadU(df, w.dtu.data() + l * W);
      VF gB = hn::Zero(df), daA = hn::Zero(df);
      for (int64_t n = 0; n < N; ++n) {
        const VF a = hn::LoadU(df, a_l + n * W);
        const VF g = hn::MulAdd(dy, hn::Set(df, Cl[n]), hn::LoadU(df, w.g.data() + n * W));
        const VF da_a = hn::Mul(hn::Mul(g, hn::LoadU(df, h_prev + n * W)), a);  // dLoss/da_l * a_l
        gB = hn::MulAdd(g, hn::Set(df, Bl[n]), gB);
        daA = hn::MulAdd(da_a, hn::LoadU(df, w.A.data() + n * W), daA);
        hn::StoreU(hn::MulAdd(da_a, dt, hn::LoadU(df, w.dA.data() + n * W)), df, w.dA.data() + n * W);
        hn::StoreU(hn::MulAdd(g, dtu, hn::LoadU(df, dBl + n * W)), df, dBl + n * W);
        hn::StoreU(hn::MulAdd(dy, hn::LoadU(df, h_l + n * W), hn::LoadU(df, dCl + n * W)), df, dCl + n * W);
        hn::StoreU(hn::Mul(g, a), df, w.g.data() + n * W);
      }
      hn::StoreU(gB, df, w.gB.data() + l * W);
      hn::StoreU(daA, df, w.daA.data() + l * W);
    }
  }
}

void BackwardTiles(const SelectiveScanBwdParams& p, const PackedBC& B, const PackedBC& C,
                   const std::vector<float>& A, int64_t Np, int64_t chunk) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  const int64_t L = p.seqlen, N = p.dstate, Lp = RoundUp(L, W), chunks = (L + chunk - 1) / chunk;
  const int64_t tiles = p.dim / W;
  const int blocks = ParallelBlocks(tiles);
  // Per-lane partials of variable dB / dC: (slab, L, N, W) per block, slab = (b, group).
  const int64_t dB_slabs = p.batch * B.groups, dC_slabs = p.batch * C.groups;
  const int64_t dB_size = dB_slabs * L * N * W, dC_size = dC_slabs * L * N * W;
  std::vector<float> dB_part(p.dB.data ? blocks * dB_size : 0, 0.0f);
  std::vector<float> dC_part(p.dC.data ? blocks * dC_size : 0, 0.0f);

  ParallelFor(tiles, [&](int64_t begin, int64_t end, int block) {
    TileWorkspace w(W, Lp, chunks, std::min(chunk, L), N);
    std::vector<float> dB_unwanted(p.dB.data ? 0 : L * N * W), dC_unwanted(p.dC.data ? 0 : L * N * W);
    std::vector<float> dD(W), ddelta_bias(W);
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t d0 = tile * W;
      std::fill(w.dA.begin(), w.dA.end(), 0.0f);
      std::fill(dD.begin(), dD.end(), 0.0f);
      std::fill(ddelta_bias.begin(), ddelta_bias.end(), 0.0f);
      for (int64_t j = 0; j < W; ++j) {
        for (int64_t n = 0; n < N; ++n) w.A[n * W + j] = A[(d0 + j) * Np + n];
      }
      for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t j = 0; j < W; ++j) {
          PrepareRow(df, p, b, d0 + j, w.rows[j], /*want_grad=*/true);
          LoadState(p.initial_state, b, d0 + j, N, w.h.data() + j, W);
          LoadState(p.dfinal_state, b, d0 + j, N, w.g.data() + j, W);
        }
        RowsToTile(w.rows, &RowBuffers::dt, L, w.dt.data());
        RowsToTile(w.rows, &RowBuffers::dtu, L, w.dtu.data());
        ScanTileSequential({w.A.data(), B.Row(b, d0), C.Row(b, d0), B.TimeStep(), C.TimeStep(), w.dt.data(),
                            w.dtu.data(), w.y.data(), w.h.data(), L, N, w.checkpoints.data(), chunk});
        TileToRows(w.y.data(), L, w.rows, &RowBuffers::y);
        for (int64_t j = 0; j < W; ++j) {
          const float skip = p.D.data ? p.D.data[(d0 + j) * p.D.stride_dim] : 0.0f;
          std::fill(w.rows[j].y.begin() + L, w.rows[j].y.end(), 0.0f);
          dD[j] += GateBackward(p, b, d0 + j, w.rows[j], w.grads[j], skip);
        }
        RowsToTile(w.grads, &RowGrads::dy, L, w.dy.data());
        const int64_t b_slab = b * B.groups + d0 / B.channels_per_group;
        const int64_t c_slab = b * C.groups + d0 / C.channels_per_group;
        TileRefs r{B.Row(b, d0), C.Row(b, d0), Np,
                   p.dB.data ? dB_part.data() + block * dB_size + b_slab * L * N * W : dB_unwanted.data(),
                   p.dC.data ? dC_part.data() + block * dC_size + c_slab * L * N * W : dC_unwanted.data()};
        AdjointTile(w, r, L, N, chunk);
        TileToRows(w.gB.data(), L, w.grads, &RowGrads::du);
        TileToRows(w.daA.data(), L, w.grads, &RowGrads::ddelta);
        for (int64_t j = 0; j < W; ++j) {
          std::fill(w.grads[j].du.begin() + L, w.grads[j].du.end(), 0.0f);  // FinishRowGrads sums
          std::fill(w.grads[j].ddelta.begin() + L, w.grads[j].ddelta.end(), 0.0f);  // padded lanes
        }
        for (int64_t j = 0; j < W; ++j) {
          const float skip = p.D.data ? p.D.data[(d0 + j) * p.D.stride_dim] : 0.0f;
          ddelta_bias[j] += FinishRowGrads(p, b, d0 + j, w.rows[j], w.grads[j], skip);
          StoreState(p.dinitial_state, b, d0 + j, N, w.g.data() + j, W);
        }
      }
      for (int64_t j = 0; j < W; ++j) {
        const int64_t d = d0 + j;
        for (int64_t n = 0; n < N; ++n) {
          if (p.dA.data) p.dA.data[d * p.dA.stride_dim + n * p.dA.stride_state] = w.dA[n * W + j];
        }
        if (p.dD.data) p.dD.data[d * p.dD.stride_dim] = dD[j];
        if (p.ddelta_bias.data) p.ddelta_bias.data[d * p.ddelta_bias.stride_dim] = ddelta_bias[j];
      }
    }
  });
  ReducePartials(p.dB, dB_part, blocks, dB_slabs, B.groups, L, N, N, W);
  ReducePartials(p.dC, dC_part, blocks, dC_slabs, C.groups, L, N, N, W);
}

// The tiled backward's dB / dC partials grow as blocks x B x G x L x N x W: past this many
// bytes the per-row layout (which needs W times less) takes over.
constexpr double kMaxTilePartialBytes = 1u << 30;

Status ScanBackwardImpl(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options) {
  const DF df;
  const int64_t W = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Np = RoundUp(p.dstate, W);
  const int64_t chunk = options.chunk_length > 0 ? options.chunk_length : 64;
  const PackedBC B = PackBC(p.B, p, Np), C = PackBC(p.C, p, Np);
  const std::vector<float> A = PackA(p.A, p, Np);
  const double partial_bytes = 4.0 * ParallelBlocks(p.dim / W) * p.batch * (p.B.groups + p.C.groups) *
                               static_cast<double>(p.seqlen) * p.dstate * W;
  if (TilesFit(p, W) && partial_bytes <= kMaxTilePartialBytes) {
    BackwardTiles(p, B, C, A, Np, chunk);
  } else {
    BackwardRows(p, B, C, A, Np, chunk);
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(ScanBackwardImpl);

Status SelectiveScanBackward(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options) {
  return HWY_DYNAMIC_DISPATCH(ScanBackwardImpl)(p, options);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

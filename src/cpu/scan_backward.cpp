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
// Determinism: work is split over channels d, each thread owning whole channels, so dA, dD,
// ddelta_bias and the constant-form dB/dC of a channel are summed by one thread in a fixed
// order. Variable dB/dC sum over the channels of a group: each block of channels writes its own
// partial buffer, and the blocks are added in block order. Same inputs and thread count, same
// bits. The backward always uses this sequential adjoint, whatever options.algorithm.
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

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Per-thread buffers of the backward, sized once per call.
struct BackwardWorkspace {
  RowBuffers rb;
  std::vector<float> checkpoints;  // (ceil(L/Q), Np) state entering each chunk
  std::vector<float> decay, state;  // (Q, Np) a and h of the chunk being reversed
  std::vector<float> g, h;          // (Np)
  std::vector<float> dA, dB_const, dC_const;  // (Np) this channel's sums
  std::vector<float> dout, dy, du, ddelta, dz;  // (Lp)
  BackwardWorkspace(int64_t padded_len, int64_t chunks, int64_t chunk, int64_t Np)
      : rb(padded_len), checkpoints(chunks * Np), decay(chunk * Np), state(chunk * Np), g(Np), h(Np),
        dA(Np), dB_const(Np), dC_const(Np), dout(padded_len), dy(padded_len), du(padded_len),
        ddelta(padded_len), dz(padded_len) {}
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
void ForwardWithCheckpoints(const RowRefs& r, BackwardWorkspace& w, int64_t L, int64_t Np,
                            int64_t chunk) {
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

// dy (the gradient reaching y + D u), dz, and the row's contribution to dD.
float GateBackward(const SelectiveScanBwdParams& p, BackwardWorkspace& w, float skip) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t padded = static_cast<int64_t>(w.dy.size());
  VF dD = hn::Zero(df);
  for (int64_t l = 0; l < padded; l += lanes) {
    const VF u = hn::LoadU(df, w.rb.u.data() + l);
    const VF y = hn::MulAdd(hn::Set(df, skip), u, hn::LoadU(df, w.rb.y.data() + l));
    const VF dout = hn::LoadU(df, w.dout.data() + l);
    VF dy = dout;
    if (p.z.data) {
      const VF z = hn::LoadU(df, w.rb.z.data() + l);
      dy = hn::Mul(dout, Silu(df, z));
      hn::StoreU(hn::Mul(hn::Mul(dout, y), SiluGrad(df, z)), df, w.dz.data() + l);
    }
    hn::StoreU(dy, df, w.dy.data() + l);
    dD = hn::MulAdd(dy, u, dD);
  }
  return hn::GetLane(hn::SumOfLanes(df, dD));
}

// Reverses one row through all its chunks; leaves dh0 in w.g.
void AdjointRow(const RowRefs& r, BackwardWorkspace& w, int64_t L, int64_t Np, int64_t chunk,
                float skip) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t chunks = (L + chunk - 1) / chunk;
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
      const VF dy = hn::Set(df, w.dy[l]), dt = hn::Set(df, w.rb.dt[l]), dtu = hn::Set(df, w.rb.dtu[l]);
      VF gB = hn::Zero(df), daA = hn::Zero(df);
      for (int64_t n = 0; n < Np; n += lanes) {
        const VF Bl = hn::LoadU(df, r.B + l * r.bstep + n);
        const VF a = hn::LoadU(df, w.decay.data() + q * Np + n);
        const VF h = hn::LoadU(df, w.state.data() + q * Np + n);
        const VF g = hn::MulAdd(dy, hn::LoadU(df, r.C + l * r.cstep + n), hn::LoadU(df, w.g.data() + n));
        const VF da_a = hn::Mul(hn::Mul(g, hn::LoadU(df, h_prev + n)), a);  // dLoss/da_l * a_l
        const VF A = hn::LoadU(df, r.A + n);
        gB = hn::MulAdd(g, Bl, gB);
        daA = hn::MulAdd(da_a, A, daA);
        hn::StoreU(hn::MulAdd(da_a, dt, hn::LoadU(df, w.dA.data() + n)), df, w.dA.data() + n);
        const VF dB = hn::Mul(g, dtu), dC = hn::Mul(dy, h);
        float* dB_out = r.dB ? r.dB + l * Np + n : w.dB_const.data() + n;
        float* dC_out = r.dC ? r.dC + l * Np + n : w.dC_const.data() + n;
        hn::StoreU(hn::Add(hn::LoadU(df, dB_out), dB), df, dB_out);
        hn::StoreU(hn::Add(hn::LoadU(df, dC_out), dC), df, dC_out);
        hn::StoreU(hn::Mul(g, a), df, w.g.data() + n);
      }
      const float sum_gB = hn::GetLane(hn::SumOfLanes(df, gB));
      const float sum_daA = hn::GetLane(hn::SumOfLanes(df, daA));
      w.du[l] = sum_gB * w.rb.dt[l] + w.dy[l] * skip;
      w.ddelta[l] = (sum_gB * w.rb.u[l] + sum_daA) * w.rb.ddt_ddelta[l];
    }
  }
}

Status ScanBackwardImpl(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t Np = RoundUp(p.dstate, lanes), L = p.seqlen, N = p.dstate, D = p.dim;
  const int64_t chunk = options.chunk_length > 0 ? options.chunk_length : 64;
  const int64_t chunks = (L + chunk - 1) / chunk;
  const PackedBC B = PackBC(p.B, p, Np), C = PackBC(p.C, p, Np);
  const std::vector<float> A = PackA(p.A, p, Np);
  const int blocks = ParallelBlocks(D);
  // Variable-form dB / dC: one (B, G, L, Np) partial per block; constant form sums per channel.
  const bool dB_partials = B.is_variable, dC_partials = C.is_variable;
  const int64_t dB_size = B.data.size(), dC_size = C.data.size();
  std::vector<float> dB_part(dB_partials ? blocks * dB_size : 0, 0.0f);
  std::vector<float> dC_part(dC_partials ? blocks * dC_size : 0, 0.0f);

  ParallelFor(D, [&](int64_t begin, int64_t end, int block) {
    BackwardWorkspace w(RoundUp(L, lanes), chunks, std::min(chunk, L), Np);
    for (int64_t d = begin; d < end; ++d) {
      const float skip = p.D.data ? p.D.data[d * p.D.stride_dim] : 0.0f;
      std::fill(w.dA.begin(), w.dA.end(), 0.0f);
      std::fill(w.dB_const.begin(), w.dB_const.end(), 0.0f);
      std::fill(w.dC_const.begin(), w.dC_const.end(), 0.0f);
      float dD = 0.0f, ddelta_bias = 0.0f;
      for (int64_t b = 0; b < p.batch; ++b) {
        PrepareRow(df, p, b, d, w.rb, /*want_grad=*/true);
        RowRefs r{A.data() + d * Np, B.Row(b, d), C.Row(b, d), B.TimeStep(), C.TimeStep(), nullptr, nullptr};
        if (dB_partials) r.dB = dB_part.data() + block * dB_size + (B.Row(b, d) - B.data.data());
        if (dC_partials) r.dC = dC_part.data() + block * dC_size + (C.Row(b, d) - C.data.data());
        std::fill(w.h.begin(), w.h.end(), 0.0f);
        std::fill(w.g.begin(), w.g.end(), 0.0f);
        for (int64_t n = 0; n < N; ++n) {
          if (p.initial_state.data) {
            w.h[n] = p.initial_state.data[b * p.initial_state.stride_batch + d * p.initial_state.stride_dim +
                                          n * p.initial_state.stride_state];
          }
          if (p.dfinal_state.data) {
            w.g[n] = p.dfinal_state.data[b * p.dfinal_state.stride_batch + d * p.dfinal_state.stride_dim +
                                         n * p.dfinal_state.stride_state];
          }
        }
        ForwardWithCheckpoints(r, w, L, Np, chunk);
        std::fill(w.rb.y.begin() + L, w.rb.y.end(), 0.0f);
        std::fill(w.dout.begin(), w.dout.end(), 0.0f);
        RowToF32(p.dout.data, p.dout.dtype, b * p.dout.stride_batch + d * p.dout.stride_dim, L, w.dout.data());
        dD += GateBackward(p, w, skip);
        AdjointRow(r, w, L, Np, chunk, skip);
        for (int64_t l = 0; l < L; ++l) ddelta_bias += w.ddelta[l];
        auto store_row = [&](const SeqView& v, const std::vector<float>& row) {
          if (v.data) RowFromF32(row.data(), L, v.data, v.dtype, b * v.stride_batch + d * v.stride_dim);
        };
        store_row(p.du, w.du);
        store_row(p.ddelta, w.ddelta);
        store_row(p.dz, w.dz);
        if (p.dinitial_state.data) {
          float* dh0 = p.dinitial_state.data + b * p.dinitial_state.stride_batch + d * p.dinitial_state.stride_dim;
          for (int64_t n = 0; n < N; ++n) dh0[n * p.dinitial_state.stride_state] = w.g[n];
        }
      }
      for (int64_t n = 0; n < N; ++n) {
        if (p.dA.data) p.dA.data[d * p.dA.stride_dim + n * p.dA.stride_state] = w.dA[n];
        if (p.dB.data && !dB_partials) {
          StoreFromF32(p.dB.data, p.dB.dtype, d * p.dB.stride_group + n * p.dB.stride_state, w.dB_const[n]);
        }
        if (p.dC.data && !dC_partials) {
          StoreFromF32(p.dC.data, p.dC.dtype, d * p.dC.stride_group + n * p.dC.stride_state, w.dC_const[n]);
        }
      }
      if (p.dD.data) p.dD.data[d * p.dD.stride_dim] = dD;
      if (p.ddelta_bias.data) p.ddelta_bias.data[d * p.ddelta_bias.stride_dim] = ddelta_bias;
    }
  });

  // Variable dB / dC: add the block partials in block order, unpack to (B, G, N, L).
  auto reduce_partials = [&](const BCView& out, const PackedBC& packed, const std::vector<float>& parts,
                             int64_t size) {
    if (!out.data) return;
    const int64_t slabs = size / (L * Np);  // (b, g) pairs
    ParallelFor(slabs, [&](int64_t begin, int64_t end, int) {
      std::vector<float> sum(L * Np);
      for (int64_t slab = begin; slab < end; ++slab) {
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (int k = 0; k < blocks; ++k) {
          const float* part = parts.data() + k * size + slab * L * Np;
          for (int64_t i = 0; i < L * Np; ++i) sum[i] += part[i];
        }
        const int64_t b = slab / packed.groups, g = slab % packed.groups;
        const int64_t base = b * out.stride_batch + g * out.stride_group;
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t l = 0; l < L; ++l) {
            StoreFromF32(out.data, out.dtype, base + n * out.stride_state + l * out.stride_time, sum[l * Np + n]);
          }
        }
      }
    });
  };
  if (dB_partials) reduce_partials(p.dB, B, dB_part, dB_size);
  if (dC_partials) reduce_partials(p.dC, C, dC_part, dC_size);
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

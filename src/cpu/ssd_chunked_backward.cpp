// CPU SSD, chunked algorithm, backward: the adjoint of the decomposition in ssd_chunk.hpp,
// matrix products on OpenBLAS sgemm.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Q chunk length, Hb heads of a task, HbP = Hb * P.
//
// Pass 1 walks the chunks forwards and keeps only the state entering each chunk,
// S_in[c] (HbP, N) (and recomputes y for dz when asked). Pass 2 walks them backwards with
// G = dLoss/dS_out (HbP, N), starting from dfinal_states. Per chunk, with dy = dout silu(z)
// and cs the within-chunk cumulative log-decay:
//   from the state term  y_t += exp(cs_t) C_t S_in          (t before the first reset)
//     dC   += dYw S_in,  dYw_t = exp(cs_t) dy_t             dcs_t += <dy_t, exp(cs_t) C_t S_in>
//     G_in  = [no reset] exp(cs_end) G + dYw^T C            (the adjoint of S_in)
//   chunk state  S_out = [no reset] exp(cs_end) S_in + Xw^T B,  Xw_s = exp(cs_end - cs_s) dt_s x_s
//     dx_s += exp(cs_end - cs_s) dt_s (B G^T)_s,  dB += Xw G,  dcs_end += e_end <G, S_in>
//     with u_s = <x_s, (B G^T)_s>: ddt_s += exp(..) u_s, dcs_s -= exp(..) dt_s u_s, dcs_end += same
//   intra-chunk  Y_h += M_h X_h,  M_h = CB o exp(cs_t - cs_s) o dt_s
//     dM = dY_h X_h^T,  dx_h += M_h^T dY_h,  dCB += dM o exp(..) dt_s  (then dC += dCB B,
//     dB += dCB^T C),  V = dM o CB o exp(..): ddt_s += sum_t V, dcs_t += sum_s V dt_s,
//     dcs_s -= dt_s sum_t V
//   then dlog(a)_r = sum_{t >= r, same sequence} dcs_t, ddt += A dlog(a), dA += dt dlog(a).
// Partials per task of dB, dC (L, Nn) are reduced in task order (ssd_common.hpp).
#include <algorithm>
#include <vector>

#include "core/dtype.hpp"
#include "core/round_up.hpp"
#include "cpu/blas.hpp"
#include "cpu/ssd_backward_driver.hpp"
#include "cpu/ssd_chunk.hpp"
#include "cpu/ssd_common.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/ssd_chunked_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/ssd_chunk-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

struct ChunkBwdScratch {
  std::vector<float> S_in;             // (chunks, HbP, N)
  std::vector<float> G;                // (HbP, N)
  std::vector<float> dY, dYw, dX, BG;  // (Q, HbP)
  std::vector<float> dM, dCB;          // (Q, Qp)
  std::vector<float> dt_grad;          // (Hb, ldt)
  std::vector<float> dcs, ddt_exp;     // (Hb, Qp)
  std::vector<float> row_w, col_v;     // (Qp)
  std::vector<float> dD;               // (Hb, P)
  std::vector<double> dA, ddt_bias;    // (Hb): sums over L, kept in f64
  std::vector<float> tmp;              // (ldt)
};

// The intra-chunk adjoint of one head, rows [0, len): with E = exp(cs_t - cs_s) in t's
// sequence (0 elsewhere) and K = E dt_s,
//   M = CB o K (kept for dx = M^T dY),  dCB += dM o K,
//   V = dM o CB o E:  row_w[t] = sum_s V dt_s,  col_v[s] += sum_t V.
void IntraBackward(const ssd::ChunkDecay& d, const ssd::ChunkInfo& ci, const float* dt,
                   const float* CB, const float* dM, int64_t ld, int64_t len, float* M, float* dCB,
                   float* row_w, float* col_v) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  std::fill(col_v, col_v + RoundUp(len, lanes), 0.0f);
  for (int64_t t = 0; t < len; ++t) {
    const int64_t width = t + 1;  // columns past t stay zero in M (see DecayRow)
    float* m = M + t * ld;
    DecayRow(df, d, t, ci.seq_start[t], width, m);
    const float* cb = CB + t * ld;
    const float* dm = dM + t * ld;
    float* dcb = dCB + t * ld;
    auto rw = hn::Zero(df);
    for (int64_t s = 0; s < width; s += lanes) {
      const auto e = hn::LoadU(df, m + s);
      const auto dtv = hn::LoadU(df, dt + s);
      const auto k = hn::Mul(e, dtv);
      const auto cbv = hn::LoadU(df, cb + s);
      const auto dmv = hn::IfThenElseZero(hn::Ne(e, hn::Zero(df)), hn::LoadU(df, dm + s));
      const auto v = hn::Mul(hn::Mul(dmv, cbv), e);
      rw = hn::MulAdd(v, dtv, rw);
      hn::StoreU(hn::Add(hn::LoadU(df, col_v + s), v), df, col_v + s);
      hn::StoreU(hn::MulAdd(dmv, k, hn::LoadU(df, dcb + s)), df, dcb + s);
      hn::StoreU(hn::Mul(cbv, k), df, m + s);
    }
    row_w[t] = hn::GetLane(hn::SumOfLanes(df, rw));
  }
}

// D[h, i], the skip weight of x (0 without D). Forced inline: it is used once per element of
// the loop over P in DecayGradsAndDx, where a call made the backward ~5% slower.
HWY_INLINE float SkipWeight(const SsdBwdParams& p, int64_t h, int64_t i) {
  return p.D.data ? p.D.data[h * p.D.stride_head + (p.d_per_channel ? i * p.D.stride_p : 0)] : 0.0f;
}

// Sizes the backward scratch w for the task's heads and fills what stays fixed over the
// task: each head's d dt / d dt_in over the sequence, and zeroed sums.
void StartChunkBackwardTask(const SsdBwdParams& p, const ssd::BackwardTask& task, ChunkScratch& s,
                            ChunkBwdScratch& w) {
  const int64_t L = p.seqlen, P = p.headdim, N = p.dstate;
  const int64_t Q = std::min(p.chunk_size, L), Qp = PaddedChunk(Q), chunks = (L + Q - 1) / Q;
  const int64_t h0 = task.h_begin, h1 = task.h_end, Hb = h1 - h0, HbP = Hb * P;
  StartChunkTask(p, task.b, h0, h1, s);
  w.S_in.resize(chunks * HbP * N);
  w.G.assign(HbP * N, 0.0f);
  for (auto* v : {&w.dY, &w.dYw, &w.dX, &w.BG}) v->assign(Q * HbP, 0.0f);
  w.dM.assign(Q * Qp, 0.0f);
  w.dCB.assign(Q * Qp, 0.0f);
  w.dt_grad.assign(Hb * s.ldt, 0.0f);
  w.tmp.resize(s.ldt);
  w.dcs.resize(Hb * Qp);
  w.ddt_exp.resize(Hb * Qp);
  w.row_w.resize(Qp);
  w.col_v.resize(Qp);
  w.dD.assign(HbP, 0.0f);
  w.dA.assign(Hb, 0.0);
  w.ddt_bias.assign(Hb, 0.0);
  for (int64_t h = h0; h < h1; ++h) {
    ssd::DtRow(p, task.b, h, 0, L, w.tmp.data(), w.dt_grad.data() + (h - h0) * s.ldt, nullptr);
  }
}

// dz over the chunk at c0 (len steps) from y = C S_in + intra-chunk + D x, the pre-gate output
// (ChunkOutput leaves the first two in s.Y (len, HbP)).
void StoreChunkDz(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c0, int64_t len,
                  ChunkScratch& s) {
  const int64_t P = p.headdim, h0 = task.h_begin, Hb = task.h_end - h0, HbP = Hb * P;
  ChunkOutput(p, task.C, task.b, task.g, h0, task.h_end, c0, len, s);
  for (int64_t hl = 0; hl < Hb; ++hl) {
    for (int64_t t = 0; t < len; ++t) {
      float* yt = s.Y.data() + t * HbP + hl * P;
      const float* xt = s.X.data() + t * HbP + hl * P;
      for (int64_t i = 0; i < P; ++i) yt[i] += SkipWeight(p, h0 + hl, i) * xt[i];
    }
    ssd::StoreDz(p, task.b, h0 + hl, c0, len, s.Y.data() + hl * P, HbP);
  }
}

// Pass 1, chunks forwards: the states entering each chunk, S_in[c] (HbP, N), into w.S_in (and
// y for dz when asked for).
void RecordChunkStates(const SsdBwdParams& p, const ssd::BackwardTask& task, ChunkScratch& s,
                       ChunkBwdScratch& w) {
  const int64_t L = p.seqlen, Q = std::min(p.chunk_size, L), chunks = (L + Q - 1) / Q;
  const int64_t h0 = task.h_begin, h1 = task.h_end, HbP = (h1 - h0) * p.headdim, N = p.dstate;
  const bool want_dz = p.z.data && p.dz.data;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * Q, len = std::min(Q, L - c0);
    std::copy(s.S.begin(), s.S.end(), w.S_in.begin() + c * HbP * N);
    PrepareChunk(p, task.B, task.C, task.b, task.g, h0, h1, c0, len, /*with_cb=*/want_dz, s);
    if (want_dz) StoreChunkDz(p, task, c0, len, s);
    AdvanceStates(p, task.B, task.b, task.g, h1 - h0, c0, len, s);
  }
}

// Before pass 2: G = dLoss/dS_out of the last chunk, dfinal_states (zeros without).
void LoadFinalStateGrad(const SsdBwdParams& p, const ssd::BackwardTask& task, ChunkBwdScratch& w) {
  if (!p.dfinal_states.data) return;
  const int64_t P = p.headdim, N = p.dstate, h0 = task.h_begin;
  const SsdStateView& v = p.dfinal_states;
  for (int64_t h = h0; h < task.h_end; ++h) {
    const float* src = v.data + task.b * v.stride_batch + h * v.stride_head;
    for (int64_t i = 0; i < P; ++i)
      for (int64_t n = 0; n < N; ++n) w.G[((h - h0) * P + i) * N + n] = src[i * v.stride_p + n];
  }
}

// From-the-state term, steps [0, first_reset) of the chunk at c0: dcs_t += exp(cs_t)
// <dy_t, C_t S_in>. S_in: (HbP, N); C S_in^T goes through w.BG (len, HbP).
void StateReadoutBackward(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c0,
                          const float* S_in, const ChunkScratch& s, ChunkBwdScratch& w) {
  const int64_t P = p.headdim, N = p.dstate, Qp = PaddedChunk(std::min(p.chunk_size, p.seqlen));
  const int64_t Hb = task.h_end - task.h_begin, HbP = Hb * P, fr = s.info.first_reset;
  blas::Gemm(false, true, fr, HbP, N, 1.0f, task.C.Row(task.b, task.g, c0), task.C.ld, S_in, N,
             0.0f, w.BG.data(), HbP);
  for (int64_t hl = 0; hl < Hb; ++hl) {
    for (int64_t t = 0; t < fr; ++t) {
      const float* yo = w.BG.data() + t * HbP + hl * P;
      const float* dy = w.dY.data() + t * HbP + hl * P;
      float acc = 0.0f;
      for (int64_t i = 0; i < P; ++i) acc += dy[i] * yo[i];
      w.dcs[hl * Qp + t] += s.decay[hl].e_in[t] * acc;
    }
  }
}

// Chunk-state term with G = dLoss/dS_out, steps [last_start, len) of the chunk at c0: dx,
// ddt through exp(cs_end - cs_s) dt_s, dcs, and dcs_end (Hb), the chunk end's share.
// S_in: (HbP, N).
void ChunkStateBackward(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c0,
                        int64_t len, const float* S_in, const ChunkScratch& s, ChunkBwdScratch& w,
                        float* dcs_end) {
  const int64_t P = p.headdim, N = p.dstate, Qp = PaddedChunk(std::min(p.chunk_size, p.seqlen));
  const int64_t Hb = task.h_end - task.h_begin, HbP = Hb * P, ls = s.info.last_start;
  const ssd::PackedBC& Bp = task.B;
  blas::Gemm(false, true, len - ls, HbP, N, 1.0f, Bp.Row(task.b, task.g, c0) + ls * Bp.ld, Bp.ld,
             w.G.data(), N, 0.0f, w.BG.data() + ls * HbP, HbP);
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const ssd::ChunkDecay& d = s.decay[hl];
    const float* dt = s.dt.data() + hl * s.ldt + c0;
    for (int64_t t = ls; t < len; ++t) {
      const float* bg = w.BG.data() + t * HbP + hl * P;
      const float* xt = s.X.data() + t * HbP + hl * P;
      float* dx = w.dX.data() + t * HbP + hl * P;
      const float wd = d.e_out[t] * dt[t];
      float u = 0.0f;
      for (int64_t i = 0; i < P; ++i) {
        u += xt[i] * bg[i];
        dx[i] += wd * bg[i];
      }
      w.ddt_exp[hl * Qp + t] += d.e_out[t] * u;
      w.dcs[hl * Qp + t] -= wd * u;
      dcs_end[hl] += wd * u;
    }
    if (s.info.first_reset == len) {  // S_in passes through the chunk
      const float* Gh = w.G.data() + hl * P * N;
      const float* Sh = S_in + hl * P * N;
      float acc = 0.0f;
      for (int64_t i = 0; i < P * N; ++i) acc += Gh[i] * Sh[i];
      dcs_end[hl] += d.e_end * acc;
    }
  }
}

// G becomes dLoss/dS_in of the chunk at c0: carried back through the chunk, plus the
// outputs' use of S_in over [0, first_reset), which also gives dC += dYw S_in into the task's
// dC partial (L, Nn). S_in: (HbP, N).
void CarryStateGrad(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c0, int64_t len,
                    const float* S_in, const ChunkScratch& s, ChunkBwdScratch& w) {
  const int64_t P = p.headdim, N = p.dstate, Nn = RoundUp(N, 16);
  const int64_t Hb = task.h_end - task.h_begin, HbP = Hb * P, fr = s.info.first_reset;
  const ssd::PackedBC& Cp = task.C;
  const float* Cc = Cp.Row(task.b, task.g, c0);
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const float keep = fr == len ? s.decay[hl].e_end : 0.0f;
    float* Gh = w.G.data() + hl * P * N;
    for (int64_t i = 0; i < P * N; ++i) Gh[i] *= keep;
  }
  if (fr == 0) return;
  for (int64_t t = 0; t < fr; ++t) {
    for (int64_t hl = 0; hl < Hb; ++hl) {
      const float e = s.decay[hl].e_in[t];
      const float* dy = w.dY.data() + t * HbP + hl * P;
      float* dyw = w.dYw.data() + t * HbP + hl * P;
      for (int64_t i = 0; i < P; ++i) dyw[i] = e * dy[i];
    }
  }
  blas::Gemm(true, false, HbP, N, fr, 1.0f, w.dYw.data(), HbP, Cc, Cp.ld, 1.0f, w.G.data(), N);
  blas::Gemm(false, false, fr, N, HbP, 1.0f, w.dYw.data(), HbP, S_in, N, 1.0f,
             task.grads.dC + c0 * Nn, Nn);
}

// Intra-chunk term of the chunk at c0, per head: dM = dY X^T, its share of dcs and ddt, and
// dx += M^T dY; then dCB, summed over the task's heads, into the task's dC and dB partials
// (L, Nn each) as dC += dCB B and dB += dCB^T C.
void IntraChunkBackward(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c0,
                        int64_t len, ChunkScratch& s, ChunkBwdScratch& w) {
  const int64_t P = p.headdim, N = p.dstate, Nn = RoundUp(N, 16);
  const int64_t Qp = PaddedChunk(std::min(p.chunk_size, p.seqlen));
  const int64_t Hb = task.h_end - task.h_begin, HbP = Hb * P;
  const ssd::PackedBC &Bp = task.B, &Cp = task.C;
  const float* Bc = Bp.Row(task.b, task.g, c0);
  const float* Cc = Cp.Row(task.b, task.g, c0);
  for (int64_t t = 0; t < len; ++t)
    std::fill(w.dCB.begin() + t * Qp, w.dCB.begin() + t * Qp + Qp, 0.0f);
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const float* dt = s.dt.data() + hl * s.ldt + c0;
    for (int64_t r0 = 0; r0 < len; r0 += kChunkRowBlock) {
      const int64_t r1 = std::min(len, r0 + kChunkRowBlock);
      blas::Gemm(false, true, r1 - r0, r1, P, 1.0f, w.dY.data() + r0 * HbP + hl * P, HbP,
                 s.X.data() + hl * P, HbP, 0.0f, w.dM.data() + r0 * Qp, Qp);
    }
    IntraBackward(s.decay[hl], s.info, dt, s.CB.data(), w.dM.data(), Qp, len, s.M.data(),
                  w.dCB.data(), w.row_w.data(), w.col_v.data());
    float* dcs = w.dcs.data() + hl * Qp;
    float* ddt_exp = w.ddt_exp.data() + hl * Qp;
    for (int64_t t = 0; t < len; ++t) {
      dcs[t] += w.row_w[t] - dt[t] * w.col_v[t];
      ddt_exp[t] += w.col_v[t];
    }
    for (int64_t r0 = 0; r0 < len; r0 += kChunkRowBlock) {
      const int64_t r1 = std::min(len, r0 + kChunkRowBlock);
      blas::Gemm(true, false, r1 - r0, P, len - r0, 1.0f, s.M.data() + r0 * Qp + r0, Qp,
                 w.dY.data() + r0 * HbP + hl * P, HbP, 1.0f, w.dX.data() + r0 * HbP + hl * P, HbP);
    }
  }
  for (int64_t r0 = 0; r0 < len; r0 += kChunkRowBlock) {
    const int64_t r1 = std::min(len, r0 + kChunkRowBlock);
    blas::Gemm(false, false, r1 - r0, N, r1, 1.0f, w.dCB.data() + r0 * Qp, Qp, Bc, Bp.ld, 1.0f,
               task.grads.dC + (c0 + r0) * Nn, Nn);
    blas::Gemm(true, false, r1 - r0, N, len - r0, 1.0f, w.dCB.data() + r0 * Qp + r0, Qp,
               Cc + r0 * Cp.ld, Cp.ld, 1.0f, task.grads.dB + (c0 + r0) * Nn, Nn);
  }
}

// Per head over the chunk at c0: dt and A through the cumulative log-decay (dlog(a)_r = sum of
// dcs_t over t >= r in r's sequence; ddt written, dA and ddt_bias summed), then dx += D dy
// (written) and dD += dy x. dcs_end (Hb): the chunk end's share of dcs.
void DecayGradsAndDx(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c0, int64_t len,
                     const float* dcs_end, const ChunkScratch& s, ChunkBwdScratch& w) {
  const int64_t P = p.headdim, Qp = PaddedChunk(std::min(p.chunk_size, p.seqlen));
  const int64_t b = task.b, h0 = task.h_begin, Hb = task.h_end - h0, HbP = Hb * P;
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const int64_t h = h0 + hl;
    const float A = p.A.data[h * p.A.stride_head];
    const float* dt = s.dt.data() + hl * s.ldt + c0;
    const float* dt_grad = w.dt_grad.data() + hl * s.ldt + c0;
    float* dcs = w.dcs.data() + hl * Qp;
    dcs[len - 1] += dcs_end[hl];
    double acc = 0.0;
    for (int64_t t = len - 1; t >= 0; --t) {
      acc += dcs[t];
      const bool reset = ssd::ResetAt(p, b, c0 + t);
      const double dlog_a = reset ? 0.0 : acc;  // a reset discards a_t
      if (reset) acc = 0.0;
      w.dA[hl] += dlog_a * dt[t];
      const float ddt = static_cast<float>((w.ddt_exp[hl * Qp + t] + A * dlog_a) * dt_grad[t]);
      w.ddt_bias[hl] += ddt;
      if (p.ddt.data)
        StoreFromF32(p.ddt.data, p.ddt.dtype,
                     b * p.ddt.stride_batch + (c0 + t) * p.ddt.stride_seq + h, ddt);
    }
    for (int64_t t = 0; t < len; ++t) {
      float* dx = w.dX.data() + t * HbP + hl * P;
      const float* dy = w.dY.data() + t * HbP + hl * P;
      const float* xt = s.X.data() + t * HbP + hl * P;
      for (int64_t i = 0; i < P; ++i) {
        dx[i] += SkipWeight(p, h, i) * dy[i];
        w.dD[hl * P + i] += dy[i] * xt[i];
      }
      if (p.dx.data) RowFromF32(dx, P, p.dx.data, p.dx.dtype, p.dx.Offset(b, c0 + t, h));
    }
  }
}

// Pass 2 for chunk c, G = dLoss/dS_out on entry and dLoss/dS_in on return: every term's
// adjoint (see the top of the file), adding to the task's dB, dC partials and writing dx, ddt.
void ChunkBackward(const SsdBwdParams& p, const ssd::BackwardTask& task, int64_t c, ChunkScratch& s,
                   ChunkBwdScratch& w) {
  const int64_t L = p.seqlen, P = p.headdim, N = p.dstate, Nn = RoundUp(N, 16);
  const int64_t Q = std::min(p.chunk_size, L), c0 = c * Q, len = std::min(Q, L - c0);
  const int64_t h0 = task.h_begin, h1 = task.h_end, Hb = h1 - h0, HbP = Hb * P;
  PrepareChunk(p, task.B, task.C, task.b, task.g, h0, h1, c0, len, /*with_cb=*/true, s);
  const int64_t ls = s.info.last_start;
  const float* S_in = w.S_in.data() + c * HbP * N;
  for (int64_t h = h0; h < h1; ++h) {
    ssd::LoadDy(p, task.b, h, c0, len, nullptr, w.dY.data() + (h - h0) * P, HbP, P);
  }
  std::fill(w.dX.begin(), w.dX.end(), 0.0f);
  std::fill(w.dcs.begin(), w.dcs.end(), 0.0f);
  std::fill(w.ddt_exp.begin(), w.ddt_exp.end(), 0.0f);
  std::vector<float> dcs_end(Hb, 0.0f);
  if (s.info.first_reset > 0) StateReadoutBackward(p, task, c0, S_in, s, w);
  ChunkStateBackward(p, task, c0, len, S_in, s, w, dcs_end.data());
  // dB += Xw G, Xw_s = exp(cs_end - cs_s) dt_s x_s over the chunk's last sequence.
  WeightedX(p, Hb, c0, len, s);
  blas::Gemm(false, false, len - ls, N, HbP, 1.0f, s.Xw.data() + ls * HbP, HbP, w.G.data(), N, 1.0f,
             task.grads.dB + (c0 + ls) * Nn, Nn);
  CarryStateGrad(p, task, c0, len, S_in, s, w);
  IntraChunkBackward(p, task, c0, len, s, w);
  DecayGradsAndDx(p, task, c0, len, dcs_end.data(), s, w);
}

// After pass 2: the task's dA, ddt_bias, dD partials and, from G = dLoss/dS_in of the first
// chunk, dinitial_states.
void StoreTaskGrads(const SsdBwdParams& p, const ssd::BackwardTask& task,
                    const ChunkBwdScratch& w) {
  const int64_t P = p.headdim, N = p.dstate, b = task.b, h0 = task.h_begin;
  for (int64_t hl = 0; hl < task.h_end - h0; ++hl) {
    const int64_t h = h0 + hl;
    task.grads.dA[b * p.nheads + h] = static_cast<float>(w.dA[hl]);
    task.grads.ddt_bias[b * p.nheads + h] = static_cast<float>(w.ddt_bias[hl]);
    std::copy(w.dD.begin() + hl * P, w.dD.begin() + (hl + 1) * P,
              task.grads.dD + (b * p.nheads + h) * P);
    if (!p.dinitial_states.data) continue;
    const SsdStateView& v = p.dinitial_states;
    float* dst = v.data + b * v.stride_batch + h * v.stride_head;
    for (int64_t i = 0; i < P; ++i)
      for (int64_t n = 0; n < N; ++n) dst[i * v.stride_p + n] = w.G[(hl * P + i) * N + n];
  }
}

// One task: pass 1 forwards over the chunks, pass 2 backwards.
void ChunkedBackwardTask(const SsdBwdParams& p, const ssd::BackwardTask& task, ChunkScratch& s,
                         ChunkBwdScratch& w) {
  const int64_t L = p.seqlen, Q = std::min(p.chunk_size, L), chunks = (L + Q - 1) / Q;
  StartChunkBackwardTask(p, task, s, w);
  RecordChunkStates(p, task, s, w);
  LoadFinalStateGrad(p, task, w);
  for (int64_t c = chunks - 1; c >= 0; --c) ChunkBackward(p, task, c, s, w);
  StoreTaskGrads(p, task, w);
}

void ChunkedBackwardImpl(const SsdBwdParams& p) {
  blas::SingleThread blas_guard;  // OpenBLAS on one thread: the tasks are the parallelism
  ssd::RunBackwardTasks(p, [&p](const ssd::BackwardTask& task) {
    thread_local ChunkScratch s;  // kept between calls: no page faults per call
    thread_local ChunkBwdScratch w;
    ChunkedBackwardTask(p, task, s, w);
  });
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu::ssd {

HWY_EXPORT(ChunkedBackwardImpl);

void ChunkedBackward(const SsdBwdParams& p) { HWY_DYNAMIC_DISPATCH(ChunkedBackwardImpl)(p); }

}  // namespace ssmkit::cpu::ssd
#endif  // HWY_ONCE

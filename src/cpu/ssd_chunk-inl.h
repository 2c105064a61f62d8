// Vector pieces of the chunked SSD shared by forward and backward: a head's decays over a
// chunk (ChunkDecay, see ssd_chunk.hpp) and the masked intra-chunk decay exp(cs_t - cs_s).
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
// Dimension legend: Q chunk length, t the output position, s the input position.
#if defined(SSMKIT_CPU_SSD_CHUNK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_SSD_CHUNK_INL_H_
#undef SSMKIT_CPU_SSD_CHUNK_INL_H_
#else
#define SSMKIT_CPU_SSD_CHUNK_INL_H_
#endif

#include <algorithm>
#include <vector>

#include "core/round_up.hpp"
#include "cpu/blas.hpp"
#include "cpu/simd_math-inl.h"
#include "cpu/ssd_chunk.hpp"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp over an array in place; lanes past n are computed on a scratch copy.
template <class DF>
HWY_INLINE void ExpInPlace(DF df, float* v, int64_t n) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(FastExp(df, hn::LoadU(df, v + i)), df, v + i);
  if (i < n) {
    HWY_ALIGN float tmp[64] = {};
    std::copy(v + i, v + n, tmp);
    hn::Store(FastExp(df, hn::Load(df, tmp)), df, tmp);
    std::copy(tmp, tmp + (n - i), v + i);
  }
}

// The decays of one head over a chunk from its dt (len) and A. The arrays are padded with
// zeros to a multiple of 64 so that whole vectors can be read past len.
template <class DF>
HWY_INLINE void ComputeChunkDecay(DF df, float A, const float* dt, int64_t len,
                                  ssd::ChunkDecay* d) {
  const int64_t padded = RoundUp(len, 64);
  d->len = len;
  for (auto* v : {&d->cs_hi, &d->cs_lo, &d->e_in, &d->e_out}) v->assign(padded, 0.0f);
  double sum = 0.0;
  for (int64_t t = 0; t < len; ++t) {
    sum += static_cast<double>(dt[t]) * A;
    d->cs_hi[t] = static_cast<float>(sum);
    d->cs_lo[t] = static_cast<float>(sum - d->cs_hi[t]);
  }
  for (int64_t t = 0; t < len; ++t) {
    const double cs = static_cast<double>(d->cs_hi[t]) + d->cs_lo[t];
    d->e_in[t] = static_cast<float>(cs);
    d->e_out[t] = static_cast<float>(sum - cs);
  }
  ExpInPlace(df, d->e_in.data(), len);
  ExpInPlace(df, d->e_out.data(), len);
  d->e_end = d->e_in[len - 1];
}

// row[s] = exp(cs_t - cs_s) for seq_start <= s <= t, else 0, over s in [0, width) rounded
// up to the vector length (width <= the padded length of d's arrays).
template <class DF>
HWY_INLINE void DecayRow(DF df, const ssd::ChunkDecay& d, int64_t t, int64_t seq_start,
                         int64_t width, float* row) {
  using DI = hn::RebindToSigned<DF>;
  const DI di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto hi_t = hn::Set(df, d.cs_hi[t]), lo_t = hn::Set(df, d.cs_lo[t]);
  // seq_start <= s <= t as s > seq_start - 1 and s < t + 1 (no integer >= in this Highway).
  const auto before_first = hn::Set(di, static_cast<int32_t>(seq_start - 1));
  const auto after_last = hn::Set(di, static_cast<int32_t>(t + 1));
  for (int64_t s0 = 0; s0 < width; s0 += lanes) {
    const auto diff = hn::Add(hn::Sub(hi_t, hn::LoadU(df, d.cs_hi.data() + s0)),
                              hn::Sub(lo_t, hn::LoadU(df, d.cs_lo.data() + s0)));
    const auto s = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(s0)));
    const auto inside = hn::RebindMask(df, hn::And(hn::Gt(s, before_first), hn::Lt(s, after_last)));
    hn::StoreU(hn::IfThenElseZero(inside, FastExp(df, diff)), df, row + s0);
  }
}

// ---------------------------------------------------------------------------------------
// The forward pass over one chunk, shared by the chunked forward and the backward's
// recomputation. Dimension legend: Hb heads of the task, HbP = Hb * P.

// Tuned for speed, does not affect correctness: rows per triangular GEMM block.
constexpr int64_t kChunkRowBlock = 64;

struct ChunkScratch {
  int64_t ldt = 0;                     // row stride of dt
  std::vector<float> dt;               // (Hb, ldt): dt after bias, softplus and clamp
  std::vector<float> S;                // (HbP, N): states of the task's heads
  std::vector<float> X, Xw, Y;         // (Q, HbP): x, weighted x, output
  std::vector<float> CB, M;            // (Q, Qp): C B^T, intra-chunk matrix of one head
  std::vector<ssd::ChunkDecay> decay;  // (Hb)
  ssd::ChunkInfo info;
};

inline int64_t PaddedChunk(int64_t Q) { return RoundUp(Q, 64); }

// Sizes the scratch for a task and loads its heads' dt rows and initial states.
inline void StartChunkTask(const SsdParams& p, int64_t b, int64_t h0, int64_t h1, ChunkScratch& s) {
  const int64_t L = p.seqlen, P = p.headdim, N = p.dstate, Q = std::min(p.chunk_size, L);
  const int64_t Hb = h1 - h0, HbP = Hb * P, Qp = PaddedChunk(Q);
  s.ldt = RoundUp(L, 64) + 64;  // whole vectors may be read past L
  s.dt.assign(Hb * s.ldt, 0.0f);
  s.S.assign(HbP * N, 0.0f);
  s.X.assign(Q * HbP, 0.0f);
  s.Xw.assign(Q * HbP, 0.0f);
  s.Y.assign(Q * HbP, 0.0f);
  s.CB.assign(Q * Qp, 0.0f);
  s.M.assign(Q * Qp, 0.0f);
  s.decay.resize(Hb);
  for (int64_t h = h0; h < h1; ++h) {
    ssd::DtRow(p, b, h, 0, L, s.dt.data() + (h - h0) * s.ldt, nullptr, nullptr);
    if (!p.initial_states.data) continue;
    const SsdStateView& v = p.initial_states;
    const float* src = v.data + b * v.stride_batch + h * v.stride_head;
    for (int64_t i = 0; i < P; ++i)
      for (int64_t n = 0; n < N; ++n) s.S[((h - h0) * P + i) * N + n] = src[i * v.stride_p + n];
  }
}

// M[t][s] = CB[t][s] exp(cs_t - cs_s) dt_s within t's sequence, rows [r0, r1), columns
// [0, width) (zero past t).
inline void IntraMatrix(const ssd::ChunkDecay& d, const ssd::ChunkInfo& ci, const float* dt,
                        const float* CB, int64_t ld, int64_t r0, int64_t r1, int64_t width,
                        float* M) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t t = r0; t < r1; ++t) {
    float* row = M + t * ld;
    DecayRow(df, d, t, ci.seq_start[t], width, row);
    const float* cb = CB + t * ld;
    for (int64_t s = 0; s < width; s += lanes) {
      const auto v =
          hn::Mul(hn::Mul(hn::LoadU(df, row + s), hn::LoadU(df, cb + s)), hn::LoadU(df, dt + s));
      hn::StoreU(v, df, row + s);
    }
  }
}

// Chunk [c0, c0 + len) of a task: its sequence layout, every head's decays and x, and, when
// with_cb, C B^T (lower triangle).
inline void PrepareChunk(const SsdParams& p, const ssd::PackedBC& Bp, const ssd::PackedBC& Cp,
                         int64_t b, int64_t g, int64_t h0, int64_t h1, int64_t c0, int64_t len,
                         bool with_cb, ChunkScratch& s) {
  const hn::ScalableTag<float> df;
  const int64_t P = p.headdim, N = p.dstate, HbP = (h1 - h0) * P;
  const int64_t Qp = PaddedChunk(std::min(p.chunk_size, p.seqlen));
  ssd::MakeChunkInfo(p, b, c0, len, &s.info);
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t hl = h - h0;
    ComputeChunkDecay(df, p.A.data[h * p.A.stride_head], s.dt.data() + hl * s.ldt + c0, len,
                      &s.decay[hl]);
    ssd::LoadScaledX(p.x, P, b, h, c0, len, nullptr, s.X.data() + hl * P, HbP, P);
  }
  if (!with_cb) return;
  const float* Bc = Bp.Row(b, g, c0);
  const float* Cc = Cp.Row(b, g, c0);
  for (int64_t r0 = 0; r0 < len; r0 += kChunkRowBlock) {
    const int64_t r1 = std::min(len, r0 + kChunkRowBlock);
    blas::Gemm(false, true, r1 - r0, r1, N, 1.0f, Cc + r0 * Cp.ld, Cp.ld, Bc, Bp.ld, 0.0f,
               s.CB.data() + r0 * Qp, Qp);
  }
}

// s.Y = the chunk's output before D x and the gate: from the incoming states, then
// intra-chunk per head. Needs PrepareChunk(with_cb = true).
inline void ChunkOutput(const SsdParams& p, const ssd::PackedBC& Cp, int64_t b, int64_t g,
                        int64_t h0, int64_t h1, int64_t c0, int64_t len, ChunkScratch& s) {
  const int64_t P = p.headdim, N = p.dstate, Hb = h1 - h0, HbP = Hb * P;
  const int64_t Qp = PaddedChunk(std::min(p.chunk_size, p.seqlen));
  const int64_t fr = s.info.first_reset;
  const float* Cc = Cp.Row(b, g, c0);
  if (fr > 0)
    blas::Gemm(false, true, fr, HbP, N, 1.0f, Cc, Cp.ld, s.S.data(), N, 0.0f, s.Y.data(), HbP);
  for (int64_t t = 0; t < len; ++t) {
    float* yt = s.Y.data() + t * HbP;
    if (t >= fr) {
      std::fill(yt, yt + HbP, 0.0f);
      continue;
    }
    for (int64_t hl = 0; hl < Hb; ++hl) {
      const float e = s.decay[hl].e_in[t];
      for (int64_t i = 0; i < P; ++i) yt[hl * P + i] *= e;
    }
  }
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const float* dt = s.dt.data() + hl * s.ldt + c0;
    for (int64_t r0 = 0; r0 < len; r0 += kChunkRowBlock) {
      const int64_t r1 = std::min(len, r0 + kChunkRowBlock);
      IntraMatrix(s.decay[hl], s.info, dt, s.CB.data(), Qp, r0, r1, r1, s.M.data());
      blas::Gemm(false, false, r1 - r0, P, r1, 1.0f, s.M.data() + r0 * Qp, Qp, s.X.data() + hl * P,
                 HbP, 1.0f, s.Y.data() + r0 * HbP + hl * P, HbP);
    }
  }
}

// Xw[s] = exp(cs_end - cs_s) dt_s x_s for s in the chunk's last sequence (rows from
// last_start on).
inline void WeightedX(const SsdParams& p, int64_t Hb, int64_t c0, int64_t len, ChunkScratch& s) {
  const int64_t P = p.headdim, HbP = Hb * P;
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const ssd::ChunkDecay& d = s.decay[hl];
    const float* dt = s.dt.data() + hl * s.ldt + c0;
    for (int64_t t = s.info.last_start; t < len; ++t) {
      const float w = d.e_out[t] * dt[t];
      const float* xt = s.X.data() + t * HbP + hl * P;
      float* xw = s.Xw.data() + t * HbP + hl * P;
      for (int64_t i = 0; i < P; ++i) xw[i] = w * xt[i];
    }
  }
}

// The states after the chunk: S = [no reset] exp(cs_end) S + Xw^T B.
inline void AdvanceStates(const SsdParams& p, const ssd::PackedBC& Bp, int64_t b, int64_t g,
                          int64_t Hb, int64_t c0, int64_t len, ChunkScratch& s) {
  const int64_t P = p.headdim, N = p.dstate, HbP = Hb * P, ls = s.info.last_start;
  WeightedX(p, Hb, c0, len, s);
  for (int64_t hl = 0; hl < Hb; ++hl) {
    const float keep = s.info.first_reset == len ? s.decay[hl].e_end : 0.0f;
    float* Sh = s.S.data() + hl * P * N;
    for (int64_t i = 0; i < P * N; ++i) Sh[i] *= keep;
  }
  const float* Bc = Bp.Row(b, g, c0);
  blas::Gemm(true, false, HbP, N, len - ls, 1.0f, s.Xw.data() + ls * HbP, HbP, Bc + ls * Bp.ld,
             Bp.ld, 1.0f, s.S.data(), N);
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_SSD_CHUNK_INL_H_

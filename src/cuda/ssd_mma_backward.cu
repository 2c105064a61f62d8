// Mamba-2 SSD backward, the mma variant (SSMKIT_CUDA_SSD=mma; ssd_mma.cuh). The math is the
// verified backward's (ssd_backward.cu's header comment): with dY = dout silu(z), G_c the
// gradient of the state at the end of chunk c, Wt = L o dt o (C B^T), Wm = L o dt o (dY X^T):
//   dx = Wt^T dY + w dt (B G_c^T) + D dY       dB = Wm^T C + w dt (X G_c)   (summed over the
//   dC = Wm B + co (dY H_{c-1})                                            group's heads)
// and ddt through dt as a factor and through cs (the terms K = L o CB o M, co (C H^T) . dY,
// w dt (x . B G^T) and decay_c <G_c, H_{c-1}>; d(dt_r A) = sum_{t >= r} dcs[t]).
//
// Kernels: MmaTimesKernel; MmaRecurrenceKernel forward (H_{c-1} per chunk) and reverse (G_c per
// chunk, dh0), both bf16 (ssd_mma_state.cu); MmaChunkBackwardKernel, a block per (b, c, group,
// slice of the group's heads) that runs its heads in turn and keeps dB and dC for the chunk in
// f32 accumulators (registers) across them; then fixed-order sums: dB and dC over the slices
// (one partial per slice, not per head), dA, ddt_bias, dD over (b, c). No float atomics.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk.
#include <cstdint>

#include "cuda/backend.hpp"
#include "cuda/ssd_chunk.cuh"
#include "cuda/ssd_mma.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "ssd";

// Outputs of MmaChunkBackwardKernel that are summed afterwards.
struct MmaBackwardPartials {
  float* dB = nullptr;     // (slices, B, Lpad, G, N): each slice's sum over its heads
  float* dC = nullptr;     // (slices, B, Lpad, G, N)
  float* dA = nullptr;     // (B, nchunks, H)
  float* dbias = nullptr;  // (B, nchunks, H)
  float* dD = nullptr;     // (B, nchunks, H, P or 1); nullptr without D
};

// Shared memory of MmaChunkBackwardKernel, byte offsets.
template <class S>
struct BackwardSmem {
  static constexpr int Q = S::Q, P = S::P, N = S::N;
  static constexpr int kC = 0;                        // [Q][N] bf16
  static constexpr int kB = kC + BfTileBytes(Q, N);   // [Q][N] bf16
  static constexpr int kCB = kB + BfTileBytes(Q, N);  // [Q][Q] f32: C B^T
  // x, H and G come in two buffers each: head k's in buffer k % 2 while the copies of head
  // k + 1's land in the other.
  static constexpr int kXTile = BfTileBytes(Q, P), kStateTile = BfTileBytes(P, N);
  static constexpr int kX = kCB + F32TileBytes(Q, Q);   // 2 x [Q][P] bf16: x, then w dt x
  static constexpr int kDy = kX + 2 * kXTile;           // [Q][P] bf16: dY, then co dY
  static constexpr int kH = kDy + kXTile;               // 2 x [P][N] bf16: H_{c-1}
  static constexpr int kG = kH + 2 * kStateTile;        // 2 x [P][N] bf16: G_c
  static constexpr int kM = kG + 2 * kStateTile;        // [Q][Q] f32: dY X^T, then L o CB o M
  static constexpr int kWt = kM + F32TileBytes(Q, Q);   // [Q][Q] bf16: L o dt o CB
  static constexpr int kWm = kWt + BfTileBytes(Q, Q);   // [Q][Q] bf16: L o dt o M
  static constexpr int kF1 = kWm + BfTileBytes(Q, Q);   // [Q][P] f32: C H^T, then y - D x
  static constexpr int kF2 = kF1 + F32TileBytes(Q, P);  // [Q][P] f32: B G^T, then dx - D dY
  static constexpr int kVec = kF2 + F32TileBytes(Q, P);
  // [Q] f32 vectors from kVec on, then dD's [P] and BlockSum's [32].
  static constexpr int kDt = 0, kCs = 1, kMask = 2, kCo = 3, kW = 4, kRowK = 5, kColK = 6,
                       kCoTerm = 7, kXbg = 8, kVectors = 9;
  static constexpr int kDd = kVec + Align128(kVectors * Q * 4);
  static constexpr int kScratch = kDd + Align128(P * 4);
  static constexpr int kBytes = kScratch + Align128(32 * 4);
};

// The chunk's per-position vectors, [Q] each in shared memory.
struct DtVectors {
  const float* dt;      // dt
  const float* cs;      // cumulative dt A
  const float* mask;    // d dt / d dt_in
  const float* co;      // exp(cs[t])
  const float* w;       // exp(cs[Q-1] - cs[t])
  const float* row_k;   // sum_{s <= t} K[t, s] dt_s
  const float* col_k;   // sum_{t >= s} K[t, s]
  const float* coterm;  // co[t] (C H^T)_t . dY_t
  const float* xbg;     // x_t . (B G^T)_t
};

// ddt, and this (b, c, h)'s partials of dA and ddt_bias, from the chunk's vectors; one warp.
// dcs[t] gathers every path through cs[t]; the terms of cs[Q-1] (the chunk's end: the chunk-
// state terms w dt (x . B G^T) and decay_c <G_c, H_{c-1}>) are added at t = Q - 1, where
// positions past L (dt = 0) leave cs unchanged. d(dt_r A) = sum_{t >= r} dcs[t] by a suffix
// scan over the warp, each lane owning Q / 32 consecutive positions.
template <int Q>
__device__ void FinishDt(const SsdBwdParams& p, const MmaLayout& lay, int64_t b, int64_t c,
                         int64_t h, int qc, const DtVectors& v, float gh,
                         MmaBackwardPartials part) {
  constexpr int kPer = Q / 32;
  const int lane = threadIdx.x % 32;
  float dcs[kPer], own = 0.0f, chunk_state_terms = 0.0f;
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const int r = lane * kPer + e;
    const float term = v.w[r] * v.dt[r] * v.xbg[r];
    dcs[e] = v.row_k[r] - v.dt[r] * v.col_k[r] + v.coterm[r] - term;
    chunk_state_terms += term;
  }
  const float end_terms = WarpSum(chunk_state_terms) + __expf(v.cs[Q - 1]) * gh;
  if (lane == 31) dcs[kPer - 1] += end_terms;
#pragma unroll
  for (int e = 0; e < kPer; ++e) own += dcs[e];
  float inclusive = own;  // over lanes <= this one
  for (int o = 1; o < 32; o <<= 1) {
    const float s = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += s;
  }
  float run = __shfl_sync(0xffffffffu, inclusive, 31) - inclusive;  // lanes above this one
  const float A = p.A.data[h * p.A.stride_head];
  float dA = 0.0f, dbias = 0.0f;
#pragma unroll
  for (int e = kPer - 1; e >= 0; --e) {
    const int r = lane * kPer + e;
    run += dcs[e];  // d(dt_r A)
    const float ddt_in = (v.col_k[r] + v.w[r] * v.xbg[r] + A * run) * v.mask[r];
    dA += v.dt[r] * run;
    dbias += ddt_in;
    if (p.ddt.data && r < qc) {
      StoreF32(p.ddt.data, p.ddt.dtype, b * p.ddt.stride_batch + (c * Q + r) * p.ddt.stride_seq + h,
               ddt_in);
    }
  }
  dA = WarpSum(dA);
  dbias = WarpSum(dbias);
  if (lane == 0) {
    const int64_t at = (b * lay.nchunks + c) * p.nheads + h;
    part.dA[at] = dA;
    part.dbias[at] = dbias;
  }
}

// Block: chunk c = blockIdx.x; blockIdx.y = ((b G) + g) slices + slice, running heads
// g (H / G) + slice heads_per_block + k of group g in turn. Warp w owns the (32 x 32) block
// Place<N>(w) of the chunk's dB and dC.
template <class S>
__global__ void __launch_bounds__(kMmaThreads, 1)
    MmaChunkBackwardKernel(SsdBwdParams p, MmaLayout lay, MmaTimes times, const bf16* hstates,
                           const bf16* gstates, MmaBackwardPartials part) {
  constexpr int Q = S::Q, P = S::P, N = S::N;
  constexpr int kLdN = BfLd(N), kLdQ = BfLd(Q), kLdP = BfLd(P), kLdQf = F32Ld(Q), kLdPf = F32Ld(P);
  static_assert(2 * Q + P <= kMmaThreads, "row, column and dD sums run side by side");
  static_assert(Q % 32 == 0 && P % 32 == 0, "a lane owns Q / 32 positions, P / 32 columns");
  static_assert(Q / 32 * (N / 32) == kMmaWarps, "one (32 x 32) block of dB and dC per warp");
  using Smem = BackwardSmem<S>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* cs_tile = reinterpret_cast<bf16*>(smem + Smem::kC);
  bf16* bs_tile = reinterpret_cast<bf16*>(smem + Smem::kB);
  float* cb = reinterpret_cast<float*>(smem + Smem::kCB);
  bf16* dys = reinterpret_cast<bf16*>(smem + Smem::kDy);
  float* ms = reinterpret_cast<float*>(smem + Smem::kM);
  bf16* wts = reinterpret_cast<bf16*>(smem + Smem::kWt);
  bf16* wms = reinterpret_cast<bf16*>(smem + Smem::kWm);
  float* f1 = reinterpret_cast<float*>(smem + Smem::kF1);
  float* f2 = reinterpret_cast<float*>(smem + Smem::kF2);
  float* vec = reinterpret_cast<float*>(smem + Smem::kVec);
  float* dts = vec + Smem::kDt * Q;
  float* css = vec + Smem::kCs * Q;
  float* masks = vec + Smem::kMask * Q;
  float* cov = vec + Smem::kCo * Q;
  float* wv = vec + Smem::kW * Q;
  float* row_k = vec + Smem::kRowK * Q;
  float* col_k = vec + Smem::kColK * Q;
  float* coterm = vec + Smem::kCoTerm * Q;
  float* xbg = vec + Smem::kXbg * Q;
  float* ddv = reinterpret_cast<float*>(smem + Smem::kDd);
  float* scratch = reinterpret_cast<float*>(smem + Smem::kScratch);
  const DtVectors dv{dts, css, masks, cov, wv, row_k, col_k, coterm, xbg};

  const MmaBlockPlace place(p, lay, Q);
  const int64_t c = place.c, g = place.g, b = place.b, h_first = place.h_first;
  const int64_t h_count = place.h_count, l0 = place.l0;
  const int qc = place.qc;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const bf16* C = static_cast<const bf16*>(p.C.data);
  const bf16* B = static_cast<const bf16*>(p.B.data);
  const bf16* X = static_cast<const bf16*>(p.x.data);
  // Buffer k % 2 of head k's x, H and G.
  auto x_tile = [&](int64_t k) {
    return reinterpret_cast<bf16*>(smem + Smem::kX + k % 2 * Smem::kXTile);
  };
  auto h_tile = [&](int64_t k) {
    return reinterpret_cast<bf16*>(smem + Smem::kH + k % 2 * Smem::kStateTile);
  };
  auto g_tile = [&](int64_t k) {
    return reinterpret_cast<bf16*>(smem + Smem::kG + k % 2 * Smem::kStateTile);
  };
  // Issues the copies of head k's x, H_{c-1} and G_c into their buffers.
  auto copy_head = [&](int64_t k) {
    const int64_t h = h_first + k, block = MmaStateBlock(p, lay, b, c, h);
    CopyTileAsync<Q, P>(x_tile(k), kLdP, qc, [&](int r) { return X + Off(p.x, b, l0 + r, h); });
    CopyTileAsync<P, N>(h_tile(k), kLdN, P,
                        [&](int r) { return hstates + block + static_cast<int64_t>(r) * N; });
    CopyTileAsync<P, N>(g_tile(k), kLdN, P,
                        [&](int r) { return gstates + block + static_cast<int64_t>(r) * N; });
  };
  CopyTileAsync<Q, N>(cs_tile, kLdN, qc, [&](int r) { return C + Off(p.C, b, l0 + r, g); });
  CopyTileAsync<Q, N>(bs_tile, kLdN, qc, [&](int r) { return B + Off(p.B, b, l0 + r, g); });
  copy_head(0);
  CpAsyncWaitAll();
  __syncthreads();
  BlockGemm<Q, Q, N, 1, 2, false, true>(cb, kLdQf, cs_tile, kLdN, bs_tile, kLdN, false);  // C B^T
  WarpBlock<2, 2> dc, db;
  dc.template Place<N>(warp);
  db.template Place<N>(warp);
  dc.Zero();
  db.Zero();

  for (int64_t k = 0; k < h_count; ++k) {
    const int64_t h = h_first + k;
    const int64_t trow = MmaTimesRow(p, lay, b, h) + l0;
    bf16* xs = x_tile(k);
    const bf16* hs = h_tile(k);
    const bf16* gs = g_tile(k);
    for (int j = threadIdx.x; j < Q * (P / 8); j += blockDim.x) {
      const int t = j / (P / 8), col = j % (P / 8) * 8;
      uint4 piece = make_uint4(0u, 0u, 0u, 0u);
      if (t < qc) {
        const int64_t z_off = p.z.data ? Off(p.z, b, l0 + t, h) + col : 0;
        piece = ScaledPiece(p.dout, Off(p.dout, b, l0 + t, h) + col, p.z, z_off, 1.0f);
      }
      *reinterpret_cast<uint4*>(dys + t * kLdP + col) = piece;
    }
    for (int t = threadIdx.x; t < Q; t += blockDim.x) {
      dts[t] = times.dt[trow + t];
      css[t] = times.cs[trow + t];
      masks[t] = times.mask[trow + t];
    }
    CpAsyncWaitAll();  // head k's copies, issued during head k - 1 (or before the loop)
    __syncthreads();   // also publishes cb on the first head
    // Head k + 1's buffers were last read by head k - 1, which ended at a barrier.
    if (k + 1 < h_count) copy_head(k + 1);

    BlockGemm<Q, Q, P, 1, 2, false, true>(ms, kLdQf, dys, kLdP, xs, kLdP, false);      // M = dY X^T
    BlockGemm<Q, P, N, 1, 2, false, true>(f1, kLdPf, cs_tile, kLdN, hs, kLdN, false);  // C H^T
    BlockGemm<Q, P, N, 1, 2, false, true>(f2, kLdPf, bs_tile, kLdN, gs, kLdN, false);  // B G^T
    float gh = 0.0f;  // this thread's share of <G_c, H_{c-1}>
    for (int i = threadIdx.x; i < P * N; i += blockDim.x) {
      const int r = i / N, n = i % N;
      gh += __bfloat162float(gs[r * kLdN + n]) * __bfloat162float(hs[r * kLdN + n]);
    }
    __syncthreads();

    // Wt, Wm, and K = L o CB o M in place of M.
    for (int i = threadIdx.x; i < Q * Q; i += blockDim.x) {
      const int t = i / Q, s = i % Q;
      float wt = 0.0f, wm = 0.0f, kk = 0.0f;
      if (s <= t) {
        const float decay = __expf(css[t] - css[s]), cbv = cb[t * kLdQf + s];
        const float mv = ms[t * kLdQf + s];
        wt = decay * dts[s] * cbv;
        wm = decay * dts[s] * mv;
        kk = decay * cbv * mv;
      }
      wts[t * kLdQ + s] = __float2bfloat16_rn(wt);
      wms[t * kLdQ + s] = __float2bfloat16_rn(wm);
      ms[t * kLdQf + s] = kk;
    }
    // Per row t (a warp each): coterm, xbg; then f1 := co (C H^T), f2 := w dt (B G^T). Each
    // lane rescales only the elements it read.
    for (int t = warp; t < Q; t += kMmaWarps) {
      constexpr int kCols = P / 32;
      float f1v[kCols], f2v[kCols], co_dot = 0.0f, bg_dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kCols; ++e) {
        const int col = lane + 32 * e;
        f1v[e] = f1[t * kLdPf + col];
        f2v[e] = f2[t * kLdPf + col];
        co_dot += f1v[e] * __bfloat162float(dys[t * kLdP + col]);
        bg_dot += f2v[e] * __bfloat162float(xs[t * kLdP + col]);
      }
      co_dot = WarpSum(co_dot);
      bg_dot = WarpSum(bg_dot);
      const float co = __expf(css[t]), w = __expf(css[Q - 1] - css[t]);
      if (lane == 0) {
        cov[t] = co;
        wv[t] = w;
        coterm[t] = co * co_dot;
        xbg[t] = bg_dot;
      }
#pragma unroll
      for (int e = 0; e < kCols; ++e) {
        const int col = lane + 32 * e;
        f1[t * kLdPf + col] = co * f1v[e];
        f2[t * kLdPf + col] = w * dts[t] * f2v[e];
      }
    }
    gh = BlockSum(gh, scratch);
    __syncthreads();

    BlockGemm<Q, P, Q, 1, 2, false, false>(f1, kLdPf, wts, kLdQ, xs, kLdP, true);  // += Wt X
    BlockGemm<Q, P, Q, 1, 2, true, false>(f2, kLdPf, wts, kLdQ, dys, kLdP, true);  // += Wt^T dY
    if (threadIdx.x < Q) {
      const int t = threadIdx.x;
      float sum = 0.0f;
      for (int s = 0; s <= t; ++s) sum += ms[t * kLdQf + s] * dts[s];
      row_k[t] = sum;
    } else if (threadIdx.x < 2 * Q) {
      const int s = threadIdx.x - Q;
      float sum = 0.0f;
      for (int t = s; t < Q; ++t) sum += ms[t * kLdQf + s];
      col_k[s] = sum;
    } else if (threadIdx.x < 2 * Q + P && p.D.data) {
      const int col = threadIdx.x - 2 * Q;
      float sum = 0.0f;
      for (int t = 0; t < qc; ++t) {
        sum += __bfloat162float(dys[t * kLdP + col]) * __bfloat162float(xs[t * kLdP + col]);
      }
      ddv[col] = sum;
    }
    __syncthreads();

    // dx and dz; then x := w dt x and dY := co dY for the dB and dC products.
    const SsdHeadView& D = p.D;
    for (int i = threadIdx.x; i < Q * P; i += blockDim.x) {
      const int t = i / P, col = i % P;
      const float x = __bfloat162float(xs[t * kLdP + col]);
      const float dy = __bfloat162float(dys[t * kLdP + col]);
      if (t < qc) {
        const float skip = D.data ? D.data[h * D.stride_head + col * D.stride_p] : 0.0f;
        if (p.dx.data) {
          StoreF32(p.dx.data, p.dx.dtype, Off(p.dx, b, l0 + t, h) + col,
                   f2[t * kLdPf + col] + skip * dy);
        }
        if (p.dz.data && p.z.data) {
          const float y = f1[t * kLdPf + col] + skip * x;
          const float zv = LoadF32(p.z.data, p.z.dtype, Off(p.z, b, l0 + t, h) + col);
          const float dout = LoadF32(p.dout.data, p.dout.dtype, Off(p.dout, b, l0 + t, h) + col);
          StoreF32(p.dz.data, p.dz.dtype, Off(p.dz, b, l0 + t, h) + col, dout * y * SiluGrad(zv));
        }
      }
      xs[t * kLdP + col] = __float2bfloat16_rn(wv[t] * dts[t] * x);
      dys[t * kLdP + col] = __float2bfloat16_rn(cov[t] * dy);
    }
    if (warp == 0) FinishDt<Q>(p, lay, b, c, h, qc, dv, gh, part);
    if (part.dD) {
      const int64_t at = (b * lay.nchunks + c) * p.nheads + h;
      if (p.d_per_channel) {
        for (int col = threadIdx.x; col < P; col += blockDim.x) part.dD[at * P + col] = ddv[col];
      } else if (threadIdx.x == 32) {  // a lane of warp 1: warp 0 is in FinishDt
        float sum = 0.0f;
        for (int col = 0; col < P; ++col) sum += ddv[col];
        part.dD[at] = sum;
      }
    }
    __syncthreads();

    dc.template Mma<P, false, false>(dys, kLdP, hs, kLdN);       // co dY H
    dc.template Mma<Q, false, false>(wms, kLdQ, bs_tile, kLdN);  // Wm B
    db.template Mma<P, false, false>(xs, kLdP, gs, kLdN);        // w dt X G
    db.template Mma<Q, true, false>(wms, kLdQ, cs_tile, kLdN);   // Wm^T C
    __syncthreads();  // the next head overwrites the per-head tiles and vectors
  }

  const int64_t ld = p.ngroups * N;
  const int64_t at = ((place.slice * p.batch + b) * lay.Lpad + l0) * ld + g * N;
  dc.Store(part.dC + at, ld);
  db.Store(part.dB + at, ld);
}

// out[b, l, g, n] = sum over slices k, in order, of partial[(((k B + b) Lpad + l) G + g) N + n].
__global__ void SumSlicesKernel(const float* __restrict__ partial, int64_t slices, int64_t batch,
                                int64_t seqlen, int64_t Lpad, int64_t ngroups, int64_t dstate,
                                SsdSeqView out) {
  const int64_t count = batch * seqlen * ngroups * dstate;
  const int64_t slice_stride = batch * Lpad * ngroups * dstate;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i % dstate, g = i / dstate % ngroups, l = i / (dstate * ngroups) % seqlen;
    const int64_t b = i / (dstate * ngroups * seqlen);
    const float* src = partial + ((b * Lpad + l) * ngroups + g) * dstate + n;
    float sum = 0.0f;
    for (int64_t k = 0; k < slices; ++k) sum += src[k * slice_stride];
    StoreF32(out.data, out.dtype, Off(out, b, l, g) + n, sum);
  }
}

Status SumSlices(const SsdBwdParams& p, const MmaLayout& lay, const float* partial,
                 const SsdSeqView& out) {
  if (!out.data) return Status::Ok();
  const int64_t count = p.batch * p.seqlen * p.ngroups * p.dstate;
  const int64_t blocks = std::min<int64_t>(CeilDiv(count, 256), 65535);
  SumSlicesKernel<<<static_cast<unsigned>(blocks), 256, 0, CurrentStream()>>>(
      partial, lay.slices, p.batch, p.seqlen, lay.Lpad, p.ngroups, p.dstate, out);
  return CheckLaunch(kOp, "SumSlicesKernel");
}

// Carves 256-byte aligned regions from one workspace, in order.
class Carver {
 public:
  explicit Carver(char* base) : at_(base) {}
  template <class T>
  T* Take(int64_t count) {
    T* region = reinterpret_cast<T*>(at_);
    at_ += RoundUp(count * static_cast<int64_t>(sizeof(T)), 256);
    return region;
  }

 private:
  char* at_;
};

}  // namespace

Status SsdBackwardMma(const SsdBwdParams& p, bool* handled) {
  *handled = false;
  if (!MmaTakes(p, &p.dout)) return Status::Ok();
  MmaLayout lay;
  bool fits = false;
  SSMKIT_RETURN_IF_ERROR(PlanMma(p, BackwardSmem<MmaShape>::kBytes, &lay, &fits));
  if (!fits) return Status::Ok();
  *handled = true;
  const int64_t state_elems = p.batch * lay.nchunks * p.nheads * p.headdim * p.dstate;
  const int64_t time_floats = p.batch * p.nheads * lay.Lpad;
  const int64_t part_floats = lay.slices * p.batch * lay.Lpad * p.ngroups * p.dstate;
  const int64_t bch = p.batch * lay.nchunks * p.nheads;
  const int64_t d_width = p.d_per_channel ? p.headdim : 1;
  auto span = [](int64_t bytes) { return RoundUp(bytes, 256); };
  const int64_t total = 2 * span(state_elems * 2) + 3 * span(time_floats * 4) +
                        2 * span(part_floats * 4) + 2 * span(bch * 4) + span(bch * d_width * 4);
  Workspace ws;
  SSMKIT_RETURN_IF_ERROR(ws.Allocate(kOp, total));
  Carver carve(ws.as<char>());
  bf16* hstates = carve.Take<bf16>(state_elems);
  bf16* gstates = carve.Take<bf16>(state_elems);
  MmaTimes times;
  times.dt = carve.Take<float>(time_floats);
  times.cs = carve.Take<float>(time_floats);
  times.mask = carve.Take<float>(time_floats);
  MmaBackwardPartials part;
  part.dB = carve.Take<float>(part_floats);
  part.dC = carve.Take<float>(part_floats);
  part.dA = carve.Take<float>(bch);
  part.dbias = carve.Take<float>(bch);
  float* dD = carve.Take<float>(bch * d_width);
  part.dD = p.D.data ? dD : nullptr;

  SSMKIT_RETURN_IF_ERROR(LaunchMmaTimes(p, lay, times));
  RecurrenceArgs forward;
  forward.u = p.x;
  forward.v = p.B;
  forward.init = p.initial_states;
  SSMKIT_RETURN_IF_ERROR(LaunchMmaRecurrence(p, lay, times, forward, hstates));
  RecurrenceArgs reverse;
  reverse.reverse = true;
  reverse.u = p.dout;
  reverse.gate = p.z;
  reverse.v = p.C;
  reverse.init = p.dfinal_states;
  reverse.last = p.dinitial_states;
  SSMKIT_RETURN_IF_ERROR(LaunchMmaRecurrence(p, lay, times, reverse, gstates));
  constexpr int smem = BackwardSmem<MmaShape>::kBytes;
  SSMKIT_RETURN_IF_ERROR(AllowSharedMemory(
      kOp, reinterpret_cast<const void*>(&MmaChunkBackwardKernel<MmaShape>), smem));
  const dim3 grid(static_cast<unsigned>(lay.nchunks),
                  static_cast<unsigned>(p.batch * p.ngroups * lay.slices));
  MmaChunkBackwardKernel<MmaShape>
      <<<grid, kMmaThreads, smem, CurrentStream()>>>(p, lay, times, hstates, gstates, part);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "MmaChunkBackwardKernel"));

  SSMKIT_RETURN_IF_ERROR(SumSlices(p, lay, part.dB, p.dB));
  SSMKIT_RETURN_IF_ERROR(SumSlices(p, lay, part.dC, p.dC));
  const int64_t parts = p.batch * lay.nchunks;
  SSMKIT_RETURN_IF_ERROR(SumHeadPartials(kOp, part.dA, parts, p.nheads, 1, p.dA));
  SSMKIT_RETURN_IF_ERROR(SumHeadPartials(kOp, part.dbias, parts, p.nheads, 1, p.ddt_bias));
  if (part.dD) {
    SSMKIT_RETURN_IF_ERROR(SumHeadPartials(kOp, part.dD, parts, p.nheads, d_width, p.dD));
  }
  return Status::Ok();
}

}  // namespace ssmkit::cuda

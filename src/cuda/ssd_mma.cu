// Mamba-2 SSD forward, the mma variant (SSMKIT_CUDA_SSD=mma; ssd_mma.cuh): bf16 tiles, bf16
// tensor-core products with f32 accumulation, three kernels:
//   1. MmaTimesKernel        dt and the within-chunk cumulative log-decay cs   (ssd_mma_state.cu)
//   2. MmaRecurrenceKernel   H_c = decay_c H_{c-1} + (w dt X)^T B, H_{c-1} per chunk (bf16)
//   3. MmaChunkOutputKernel  Y = co (C H_{c-1}^T) + (L o dt o C B^T) X + D x, gated by silu(z)
// The output kernel's block runs several heads of one group on one chunk, so C and B are
// loaded and C B^T is computed once for all of them.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk.
#include <algorithm>
#include <cstdint>

#include "cuda/backend.hpp"
#include "cuda/ssd_chunk.cuh"
#include "cuda/ssd_mma.cuh"
#include "cuda/variant.hpp"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "ssd";

// Shared memory of MmaChunkOutputKernel, byte offsets.
template <class S>
struct OutputSmem {
  static constexpr int Q = S::Q, P = S::P, N = S::N;
  static constexpr int kC = 0;                         // [Q][N] bf16
  static constexpr int kB = kC + BfTileBytes(Q, N);    // [Q][N] bf16
  static constexpr int kCB = kB + BfTileBytes(Q, N);   // [Q][Q] f32: C B^T
  static constexpr int kW = kCB + F32TileBytes(Q, Q);  // [Q][Q] bf16: L o dt o C B^T
  static constexpr int kX = kW + BfTileBytes(Q, Q);    // [Q][P] bf16
  static constexpr int kH = kX + BfTileBytes(Q, P);    // [P][N] bf16: H_{c-1}
  static constexpr int kY = kH + BfTileBytes(P, N);    // [Q][P] f32
  static constexpr int kDt = kY + F32TileBytes(Q, P);  // [Q] f32
  static constexpr int kCs = kDt + Align128(Q * 4);    // [Q] f32
  static constexpr int kBytes = kCs + Align128(Q * 4);
};

// Block: chunk c = blockIdx.x; blockIdx.y = ((b G) + g) slices + slice, running heads
// g (H / G) + slice heads_per_block + k of group g in turn.
template <class S>
__global__ void __launch_bounds__(kMmaThreads)
    MmaChunkOutputKernel(SsdParams p, MmaLayout lay, MmaTimes times, const bf16* states) {
  constexpr int Q = S::Q, P = S::P, N = S::N;
  constexpr int kLdN = BfLd(N), kLdQ = BfLd(Q), kLdP = BfLd(P), kLdQf = F32Ld(Q), kLdPf = F32Ld(P);
  using Smem = OutputSmem<S>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* cs_tile = reinterpret_cast<bf16*>(smem + Smem::kC);
  bf16* bs_tile = reinterpret_cast<bf16*>(smem + Smem::kB);
  float* cb = reinterpret_cast<float*>(smem + Smem::kCB);
  bf16* wt = reinterpret_cast<bf16*>(smem + Smem::kW);
  bf16* xs = reinterpret_cast<bf16*>(smem + Smem::kX);
  bf16* hs = reinterpret_cast<bf16*>(smem + Smem::kH);
  float* ys = reinterpret_cast<float*>(smem + Smem::kY);
  float* dts = reinterpret_cast<float*>(smem + Smem::kDt);
  float* css = reinterpret_cast<float*>(smem + Smem::kCs);

  const MmaBlockPlace place(p, lay, Q);
  const int64_t c = place.c, g = place.g, b = place.b, h_first = place.h_first;
  const int64_t h_count = place.h_count, l0 = place.l0;
  const int qc = place.qc;

  const bf16* C = static_cast<const bf16*>(p.C.data);
  const bf16* B = static_cast<const bf16*>(p.B.data);
  const bf16* X = static_cast<const bf16*>(p.x.data);
  CopyTileAsync<Q, N>(cs_tile, kLdN, qc, [&](int r) { return C + Off(p.C, b, l0 + r, g); });
  CopyTileAsync<Q, N>(bs_tile, kLdN, qc, [&](int r) { return B + Off(p.B, b, l0 + r, g); });
  CpAsyncWaitAll();
  __syncthreads();
  BlockGemm<Q, Q, N, 1, 2, false, true>(cb, kLdQf, cs_tile, kLdN, bs_tile, kLdN, false);

  for (int64_t k = 0; k < h_count; ++k) {
    const int64_t h = h_first + k;
    const int64_t trow = MmaTimesRow(p, lay, b, h) + l0;
    const bf16* hsrc = states + MmaStateBlock(p, lay, b, c, h);
    CopyTileAsync<Q, P>(xs, kLdP, qc, [&](int r) { return X + Off(p.x, b, l0 + r, h); });
    CopyTileAsync<P, N>(hs, kLdN, P, [&](int r) { return hsrc + static_cast<int64_t>(r) * N; });
    for (int t = threadIdx.x; t < Q; t += blockDim.x) {
      dts[t] = times.dt[trow + t];
      css[t] = times.cs[trow + t];
    }
    CpAsyncWaitAll();
    __syncthreads();  // also publishes cb on the first head
    BlockGemm<Q, P, N, 1, 2, false, true>(ys, kLdPf, cs_tile, kLdN, hs, kLdN, false);  // C H^T
    __syncthreads();
    for (int i = threadIdx.x; i < Q * Q; i += blockDim.x) {
      const int t = i / Q, s = i % Q;
      const float w = s <= t ? __expf(css[t] - css[s]) * dts[s] * cb[t * kLdQf + s] : 0.0f;
      wt[t * kLdQ + s] = __float2bfloat16_rn(w);
    }
    for (int i = threadIdx.x; i < Q * P; i += blockDim.x) {
      const int t = i / P, col = i % P;
      ys[t * kLdPf + col] *= __expf(css[t]);  // co (C H^T)
    }
    __syncthreads();
    BlockGemm<Q, P, Q, 1, 2, false, false>(ys, kLdPf, wt, kLdQ, xs, kLdP, true);  // += W X
    __syncthreads();
    const SsdHeadView& D = p.D;
    for (int i = threadIdx.x; i < qc * P; i += blockDim.x) {
      const int t = i / P, col = i % P;
      float y = ys[t * kLdPf + col];
      if (D.data) {
        y += D.data[h * D.stride_head + col * D.stride_p] * __bfloat162float(xs[t * kLdP + col]);
      }
      if (p.z.data) y *= Silu(LoadF32(p.z.data, p.z.dtype, Off(p.z, b, l0 + t, h) + col));
      StoreF32(p.out.data, p.out.dtype, Off(p.out, b, l0 + t, h) + col, y);
    }
    __syncthreads();  // the next head overwrites xs, hs, ys, dts, css
  }
}

bool Aligned16(const SsdSeqView& v) {
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && v.stride_batch % 8 == 0 &&
         v.stride_seq % 8 == 0 && v.stride_head % 8 == 0;
}

bool IsBf16Aligned(const SsdSeqView& v) {
  return v.data && v.dtype == DType::kBF16 && Aligned16(v);
}

}  // namespace

Status SsdPicksMma(Variant* variant) { return PickVariant(kSsdVariants, variant); }

bool MmaTakes(const SsdParams& p, const SsdSeqView* dout) {
  return p.headdim == MmaShape::P && p.dstate == MmaShape::N && !p.seq_idx && !p.cu_seqlens.data &&
         !p.initial_states_per_sequence && IsBf16Aligned(p.x) && IsBf16Aligned(p.B) &&
         IsBf16Aligned(p.C) && (!dout || IsBf16Aligned(*dout));
}

Status PlanMma(const SsdParams& p, int smem_bytes, MmaLayout* lay, bool* fits) {
  constexpr int Q = MmaShape::Q;
  *fits = false;
  lay->nchunks = CeilDiv(p.seqlen, Q);
  lay->Lpad = lay->nchunks * Q;
  const int64_t per_group = p.nheads / p.ngroups;
  lay->heads_per_block = static_cast<int>(std::min<int64_t>(per_group, kMmaHeadsPerBlock));
  lay->slices = static_cast<int>(CeilDiv(per_group, lay->heads_per_block));
  if (lay->nchunks > 0x7fffffff || p.batch * p.ngroups * lay->slices > 65535) return Status::Ok();
  int max_smem = 0;
  SSMKIT_RETURN_IF_ERROR(MaxSharedMemoryPerBlock(kOp, &max_smem));
  *fits = smem_bytes <= max_smem;
  return Status::Ok();
}

Status SsdForwardMma(const SsdParams& p, bool* handled) {
  *handled = false;
  if (!MmaTakes(p, nullptr)) return Status::Ok();
  MmaLayout lay;
  bool fits = false;
  SSMKIT_RETURN_IF_ERROR(PlanMma(p, OutputSmem<MmaShape>::kBytes, &lay, &fits));
  if (!fits) return Status::Ok();
  *handled = true;
  // Workspace: the states (B, nchunks, H, P, N) bf16 first (16-byte aligned for cp.async),
  // then dt, cs, mask (B, H, Lpad) f32 each.
  const int64_t state_bytes = p.batch * lay.nchunks * p.nheads * p.headdim * p.dstate * 2;
  const int64_t state_span = RoundUp(state_bytes, 256);
  const int64_t time_floats = p.batch * p.nheads * lay.Lpad;
  Workspace ws;
  SSMKIT_RETURN_IF_ERROR(ws.Allocate(kOp, state_span + 3 * time_floats * 4));
  bf16* states = ws.as<bf16>();
  MmaTimes times;
  times.dt = reinterpret_cast<float*>(ws.as<char>() + state_span);
  times.cs = times.dt + time_floats;
  times.mask = times.cs + time_floats;
  SSMKIT_RETURN_IF_ERROR(LaunchMmaTimes(p, lay, times));
  RecurrenceArgs rec;
  rec.u = p.x;
  rec.v = p.B;
  rec.init = p.initial_states;
  rec.last = p.final_states;
  SSMKIT_RETURN_IF_ERROR(LaunchMmaRecurrence(p, lay, times, rec, states));
  constexpr int smem = OutputSmem<MmaShape>::kBytes;
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&MmaChunkOutputKernel<MmaShape>), smem));
  const dim3 grid(static_cast<unsigned>(lay.nchunks),
                  static_cast<unsigned>(p.batch * p.ngroups * lay.slices));
  MmaChunkOutputKernel<MmaShape>
      <<<grid, kMmaThreads, smem, CurrentStream()>>>(p, lay, times, states);
  return CheckLaunch(kOp, "MmaChunkOutputKernel");
}

}  // namespace ssmkit::cuda

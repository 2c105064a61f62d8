// Mamba-2 SSD forward on CUDA (mamba_chunk_scan_combined; include/ssmkit/ssd.hpp), in chunks
// of Q positions with the matrix products on the tensor cores (TF32 WMMA, f32 accumulate):
//   1. chunk states   S_c = (w dt X)^T B                       one block per (b, c, h)
//   2. state passing  H_c = decay_c H_{c-1} + S_c              sequential over c, per element
//   3. chunk scan     Y = (L o dt o C B^T) X + co (C H_{c-1}^T) + D x, gated by silu(z)
// ssd_chunk.cuh defines L (decay), co, w and the reset handling of seq_idx.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk.
#include "cuda/backend.hpp"
#include "cuda/ssd_chunk.cuh"
#include "cuda/ssd_mma.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "ssd";

int Pad16(int64_t v) { return static_cast<int>(RoundUp(v, 16)); }

// Shared-memory floats of each kernel (the backward's are in ssd_backward.cu's comment and
// must match BackwardSmemFloats there).
int ChunkStateSmemFloats(const SsdLayout& l) {
  return TimesFloats(l.Q) + l.Q * l.ldp + l.Q * l.ldn;
}
int ChunkScanSmemFloats(const SsdLayout& l) {
  return TimesFloats(l.Q) + 3 * l.Q * l.ldp + 2 * l.Q * l.ldn + l.Pp * l.ldn + l.Q * l.ldq;
}

__global__ void __launch_bounds__(kSsdThreads)
    ChunkStateKernel(SsdParams p, SsdLayout lay, float* states, float* decay) {
  extern __shared__ __align__(32) float smem[];
  const int64_t c = blockIdx.x, h = blockIdx.y % p.nheads, b = blockIdx.y / p.nheads;
  const int64_t g = GroupOf(p, h);
  const ChunkTimes ct = CarveTimes(smem, lay.Q);
  float* xw = smem + TimesFloats(lay.Q);  // [Q][ldp]: w[s] dt_s x_s
  float* bt = xw + lay.Q * lay.ldp;       // [Q][ldn]
  ComputeTimes(p, lay, b, c, h, ct);
  __syncthreads();
  const int qc = ChunkLength(p, lay, c);
  const int64_t l0 = c * lay.Q;
  LoadTile(xw, lay.ldp, lay.Q, lay.Pp, qc, static_cast<int>(p.headdim), [&](int t, int col) {
    return ct.w[t] * ct.dt[t] * LoadF32(p.x.data, p.x.dtype, Off(p.x, b, l0 + t, h) + col);
  });
  LoadSeqTile(bt, lay.ldn, lay.Q, lay.Np, p.B, b, l0, g, qc, static_cast<int>(p.dstate));
  __syncthreads();
  BlockGemm<true, false>(states + StateBlock(lay, p.nheads, b, c, h), lay.Np, xw, lay.ldp, bt,
                         lay.ldn, lay.Pp, lay.Np, lay.Q, false);
  if (threadIdx.x == 0) decay[(b * p.nheads + h) * lay.nchunks + c] = ct.co[qc - 1];
}

__global__ void __launch_bounds__(kSsdThreads)
    StatePassingKernel(SsdParams p, SsdLayout lay, float* states, const float* decay,
                       bool write_final) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t h = blockIdx.y % p.nheads, b = blockIdx.y / p.nheads;
  if (e >= static_cast<int64_t>(lay.Pp) * lay.Np) return;
  const int64_t pp = e / lay.Np, n = e % lay.Np;
  const bool real = pp < p.headdim && n < p.dstate;
  const SsdStateView& h0 = p.initial_states;
  float state = real && h0.data
                    ? h0.data[b * h0.stride_batch + h * h0.stride_head + pp * h0.stride_p + n]
                    : 0.0f;
  const float* dec = decay + (b * p.nheads + h) * lay.nchunks;
  for (int64_t c = 0; c < lay.nchunks; ++c) {
    float* slot = states + StateBlock(lay, p.nheads, b, c, h) + e;
    const float s = *slot;
    *slot = state;
    state = dec[c] * state + s;
  }
  const SsdStateView& fs = p.final_states;
  if (write_final && real && fs.data)
    fs.data[b * fs.stride_batch + h * fs.stride_head + pp * fs.stride_p + n] = state;
}

__global__ void __launch_bounds__(kSsdThreads)
    ChunkScanKernel(SsdParams p, SsdLayout lay, const float* states) {
  extern __shared__ __align__(32) float smem[];
  const int64_t c = blockIdx.x, h = blockIdx.y % p.nheads, b = blockIdx.y / p.nheads;
  const int64_t g = GroupOf(p, h);
  const int Q = lay.Q;
  const ChunkTimes ct = CarveTimes(smem, Q);
  float* xs = smem + TimesFloats(Q);  // [Q][ldp]
  float* bt = xs + Q * lay.ldp;       // [Q][ldn]
  float* ctile = bt + Q * lay.ldn;    // [Q][ldn]
  float* hs = ctile + Q * lay.ldn;    // [Pp][ldn]: H_{c-1}
  float* cb = hs + lay.Pp * lay.ldn;  // [Q][ldq]: C B^T, then L o dt o C B^T
  float* ys = cb + Q * lay.ldq;       // [Q][ldp]
  float* ch = ys + Q * lay.ldp;       // [Q][ldp]: C H^T
  ComputeTimes(p, lay, b, c, h, ct);
  const int qc = ChunkLength(p, lay, c);
  const int64_t l0 = c * Q;
  const int P = static_cast<int>(p.headdim), N = static_cast<int>(p.dstate);
  LoadSeqTile(xs, lay.ldp, Q, lay.Pp, p.x, b, l0, h, qc, P);
  LoadSeqTile(bt, lay.ldn, Q, lay.Np, p.B, b, l0, g, qc, N);
  LoadSeqTile(ctile, lay.ldn, Q, lay.Np, p.C, b, l0, g, qc, N);
  const float* hsrc = states + StateBlock(lay, p.nheads, b, c, h);
  LoadTile(hs, lay.ldn, lay.Pp, lay.Np, lay.Pp, lay.Np,
           [&](int r, int col) { return hsrc[r * lay.Np + col]; });
  __syncthreads();
  BlockGemm<false, true>(cb, lay.ldq, ctile, lay.ldn, bt, lay.ldn, Q, Q, lay.Np, false);
  BlockGemm<false, true>(ch, lay.ldp, ctile, lay.ldn, hs, lay.ldn, Q, lay.Pp, lay.Np, false);
  __syncthreads();
  for (int i = threadIdx.x; i < Q * Q; i += blockDim.x) {
    const int t = i / Q, s = i % Q;
    cb[t * lay.ldq + s] *= Decay(ct, t, s) * ct.dt[s];
  }
  __syncthreads();
  BlockGemm<false, false>(ys, lay.ldp, cb, lay.ldq, xs, lay.ldp, Q, lay.Pp, Q, false);
  __syncthreads();
  const SsdHeadView& D = p.D;
  for (int i = threadIdx.x; i < qc * P; i += blockDim.x) {
    const int t = i / P, col = i % P;
    float y = ys[t * lay.ldp + col] + ct.co[t] * ch[t * lay.ldp + col];
    if (D.data) y += D.data[h * D.stride_head + col * D.stride_p] * xs[t * lay.ldp + col];
    if (p.z.data) y *= Silu(LoadF32(p.z.data, p.z.dtype, Off(p.z, b, l0 + t, h) + col));
    StoreF32(p.out.data, p.out.dtype, Off(p.out, b, l0 + t, h) + col, y);
  }
}

dim3 ChunkGrid(const SsdParams& p, const SsdLayout& lay) {
  return dim3(static_cast<unsigned>(lay.nchunks), static_cast<unsigned>(p.batch * p.nheads));
}

}  // namespace

int BackwardSmemFloats(const SsdLayout& lay);  // ssd_backward.cu

Status PlanSsd(const SsdParams& p, bool backward, SsdLayout* out) {
  if (p.batch * p.nheads > 65535) {
    return Status::Unsupported(std::string(kOp) + ": B * H above 65535 on CUDA");
  }
  int max_smem = 0;
  SSMKIT_RETURN_IF_ERROR(MaxSharedMemoryPerBlock(kOp, &max_smem));
  int needed = 0;
  for (int Q : {64, 32, 16}) {
    SsdLayout lay;
    lay.Q = Q;
    lay.Pp = Pad16(p.headdim);
    lay.Np = Pad16(p.dstate);
    lay.ldq = Q + 8;
    lay.ldp = lay.Pp + 8;
    lay.ldn = lay.Np + 8;
    lay.nchunks = CeilDiv(p.seqlen, Q);
    lay.Lpad = lay.nchunks * Q;
    needed = std::max(ChunkStateSmemFloats(lay),
                      backward ? BackwardSmemFloats(lay) : ChunkScanSmemFloats(lay));
    needed *= static_cast<int>(sizeof(float));
    if (needed <= max_smem && lay.nchunks <= 0x7fffffff) {
      *out = lay;
      return Status::Ok();
    }
  }
  return Status::Unsupported(
      std::string(kOp) + ": head dim P = " + std::to_string(p.headdim) +
      " and state size N = " + std::to_string(p.dstate) + " need " + std::to_string(needed) +
      " bytes of shared memory per block at Q = 16; the device grants " + std::to_string(max_smem));
}

Status LaunchChunkStates(const SsdParams& p, const SsdLayout& lay, float* states, float* decay) {
  const int smem = ChunkStateSmemFloats(lay) * static_cast<int>(sizeof(float));
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ChunkStateKernel), smem));
  ChunkStateKernel<<<ChunkGrid(p, lay), kSsdThreads, smem, CurrentStream()>>>(p, lay, states,
                                                                              decay);
  return CheckLaunch(kOp, "ChunkStateKernel");
}

Status LaunchStatePassing(const SsdParams& p, const SsdLayout& lay, float* states,
                          const float* decay, bool write_final) {
  const dim3 grid(
      static_cast<unsigned>(CeilDiv(static_cast<int64_t>(lay.Pp) * lay.Np, kSsdThreads)),
      static_cast<unsigned>(p.batch * p.nheads));
  StatePassingKernel<<<grid, kSsdThreads, 0, CurrentStream()>>>(p, lay, states, decay, write_final);
  return CheckLaunch(kOp, "StatePassingKernel");
}

Status SsdForward(const SsdParams& p) {
  Variant variant;
  SSMKIT_RETURN_IF_ERROR(SsdPicksMma(&variant));
  if (variant.index == 1) {
    bool handled = false;
    SSMKIT_RETURN_IF_ERROR(SsdForwardMma(p, &handled));
    if (handled) return Status::Ok();
    if (variant.required) return VariantDoesNotApply(kSsdVariants, variant.index);
  }
  SsdLayout lay;
  SSMKIT_RETURN_IF_ERROR(PlanSsd(p, false, &lay));
  const int64_t state_floats = p.batch * lay.nchunks * p.nheads * lay.Pp * lay.Np;
  const int64_t decay_floats = p.batch * p.nheads * lay.nchunks;
  Workspace ws;
  SSMKIT_RETURN_IF_ERROR(ws.Allocate(kOp, (state_floats + decay_floats) * 4));
  float* states = ws.as<float>();
  float* decay = states + state_floats;
  SSMKIT_RETURN_IF_ERROR(LaunchChunkStates(p, lay, states, decay));
  SSMKIT_RETURN_IF_ERROR(LaunchStatePassing(p, lay, states, decay, true));
  const int smem = ChunkScanSmemFloats(lay) * static_cast<int>(sizeof(float));
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ChunkScanKernel), smem));
  ChunkScanKernel<<<ChunkGrid(p, lay), kSsdThreads, smem, CurrentStream()>>>(p, lay, states);
  return CheckLaunch(kOp, "ChunkScanKernel");
}

}  // namespace ssmkit::cuda

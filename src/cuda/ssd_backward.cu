// Mamba-2 SSD backward on CUDA, chunk by chunk like the forward (ssd.cu), with the matrix
// products on the tensor cores. With dy = dout silu(z), G_c = dLoss/dH_c (the state at the end
// of chunk c), Wt[t,s] = L[t,s] dt_s (C_t . B_s) and Wm[t,s] = L[t,s] dt_s (dy_t . x_s):
//   dx = Wt^T dY + w dt (B G_c^T) + D dy     dB = Wm^T C + w dt (X G_c)   (per head, summed
//   dC = Wm B + co (dY H_{c-1})                                           over the group after)
//   G_{c-1} = decay_c G_c + (co dY)^T C,   dh0 = G_{-1}
// and dt's gradient: its direct uses (as a factor of Wt and of S_c) plus, through the
// cumulative log-decay cs, the terms K[t,s] = L CB dt_s M (each pair adds to dcs[t] and takes
// from dcs[s]), co (C H^T) . dY at t, w dt (x . B G^T) at s (moved to the chunk's end) and
// decay_c <G_c, H_{c-1}> at the end; d(dt_r A) = sum_{t >= r} dcs[t].
//
// Kernels: the forward's chunk states and state passing (H_{c-1} per chunk), ChunkDstate
// ((co dY)^T C per chunk), StatePassingBackward (G_c per chunk, dh0, the decay term as
// per-block partials), ChunkBackward (everything else, one block per (b, c, h)), then fixed-
// order sums: dB and dC over each group's heads, dA, dD, ddt_bias over (b, c). No atomics.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk.
#include "cuda/backend.hpp"
#include "cuda/ssd_chunk.cuh"
#include "cuda/ssd_mma.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "ssd";

// dy = dout * silu(z) (dout without z) at (b, l, h, p).
__device__ __forceinline__ float OutputGrad(const SsdBwdParams& p, int64_t b, int64_t l, int64_t h,
                                            int col) {
  float dy = LoadF32(p.dout.data, p.dout.dtype, Off(p.dout, b, l, h) + col);
  if (p.z.data) dy *= Silu(LoadF32(p.z.data, p.z.dtype, Off(p.z, b, l, h) + col));
  return dy;
}

// E_c = (co dY)^T C into dstates[b][c][h].
__global__ void __launch_bounds__(kSsdThreads)
    ChunkDstateKernel(SsdBwdParams p, SsdLayout lay, float* dstates) {
  extern __shared__ __align__(32) float smem[];
  const int64_t c = blockIdx.x, h = blockIdx.y % p.nheads, b = blockIdx.y / p.nheads;
  const ChunkTimes ct = CarveTimes(smem, lay.Q);
  float* dyc = smem + TimesFloats(lay.Q);  // [Q][ldp]
  float* ctile = dyc + lay.Q * lay.ldp;    // [Q][ldn]
  ComputeTimes(p, lay, b, c, h, ct);
  __syncthreads();
  const int qc = ChunkLength(p, lay, c);
  const int64_t l0 = c * lay.Q;
  LoadTile(dyc, lay.ldp, lay.Q, lay.Pp, qc, static_cast<int>(p.headdim),
           [&](int t, int col) { return ct.co[t] * OutputGrad(p, b, l0 + t, h, col); });
  LoadSeqTile(ctile, lay.ldn, lay.Q, lay.Np, p.C, b, l0, GroupOf(p, h), qc,
              static_cast<int>(p.dstate));
  __syncthreads();
  BlockGemm<true, false>(dstates + StateBlock(lay, p.nheads, b, c, h), lay.Np, dyc, lay.ldp, ctile,
                         lay.ldn, lay.Pp, lay.Np, lay.Q, false);
}

// Reverse over chunks per element (p, n): dstates[c] (holding E_c) becomes G_c; writes dh0 and
// kdec[((b H + h) nchunks + c) * gridDim.x + block] = decay_c * (this block's share of <G_c,
// H_{c-1}>).
__global__ void __launch_bounds__(kSsdThreads)
    StatePassingBackwardKernel(SsdBwdParams p, SsdLayout lay, const float* states, float* dstates,
                               const float* decay, float* kdec) {
  __shared__ float scratch[32];
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t h = blockIdx.y % p.nheads, b = blockIdx.y / p.nheads;
  const int64_t pp = e / lay.Np, n = e % lay.Np;
  const bool real = pp < p.headdim && n < p.dstate;  // Pp * Np is a multiple of the block size
  const SsdStateView& df = p.dfinal_states;
  float grad = real && df.data
                   ? df.data[b * df.stride_batch + h * df.stride_head + pp * df.stride_p + n]
                   : 0.0f;
  const float* dec = decay + (b * p.nheads + h) * lay.nchunks;
  for (int64_t c = lay.nchunks - 1; c >= 0; --c) {
    const int64_t slot = StateBlock(lay, p.nheads, b, c, h) + e;
    const float from_chunk = dstates[slot];
    dstates[slot] = grad;
    const float share = BlockSum(grad * states[slot], scratch);
    if (threadIdx.x == 0)
      kdec[((b * p.nheads + h) * lay.nchunks + c) * gridDim.x + blockIdx.x] = dec[c] * share;
    grad = dec[c] * grad + from_chunk;
  }
  const SsdStateView& dh0 = p.dinitial_states;
  if (real && dh0.data)
    dh0.data[b * dh0.stride_batch + h * dh0.stride_head + pp * dh0.stride_p + n] = grad;
}

// Per-head partial outputs of ChunkBackwardKernel.
struct HeadPartials {
  float* dB;          // (B, Lpad, H, Np): this head's share of dB
  float* dC;          // (B, Lpad, H, Np)
  float* dA;          // (B, nchunks, H)
  float* dbias;       // (B, nchunks, H)
  float* dD;          // (B, nchunks, H, P or 1)
  const float* kdec;  // (B, H, nchunks, kdec_parts)
  int kdec_parts;
};

int ChunkBackwardSmemFloats(const SsdLayout& l) {
  return TimesFloats(l.Q) + 4 * l.Q + 32 + 4 * l.Q * l.ldp + 2 * l.Q * l.ldn + 2 * l.Q * l.ldq +
         l.Pp * l.ldn;
}

__global__ void __launch_bounds__(kSsdThreads)
    ChunkBackwardKernel(SsdBwdParams p, SsdLayout lay, const float* states, const float* dstates,
                        HeadPartials part) {
  extern __shared__ __align__(32) float smem[];
  const int64_t c = blockIdx.x, h = blockIdx.y % p.nheads, b = blockIdx.y / p.nheads;
  const int64_t g = GroupOf(p, h);
  const int Q = lay.Q, ldp = lay.ldp, ldn = lay.ldn, ldq = lay.ldq;
  const ChunkTimes ct = CarveTimes(smem, Q);
  float* dcs_row = smem + TimesFloats(Q);  // [Q]
  float* dcs_col = dcs_row + Q;            // [Q]
  float* direct = dcs_col + Q;             // [Q]: d loss / d dt through dt as a factor
  float* red = direct + Q;                 // [Q]
  float* scratch = red + Q;                // [32]
  float* xs = scratch + 32;                // [Q][ldp]
  float* dys = xs + Q * ldp;               // [Q][ldp]
  float* t1 = dys + Q * ldp;               // [Q][ldp]
  float* t2 = t1 + Q * ldp;                // [Q][ldp]
  float* bt = t2 + Q * ldp;                // [Q][ldn]
  float* ctile = bt + Q * ldn;             // [Q][ldn]
  float* s1 = ctile + Q * ldn;             // [Q][ldq]: C B^T, then Wt
  float* s2 = s1 + Q * ldq;                // [Q][ldq]: dY X^T, then Wm
  float* st = s2 + Q * ldq;                // [Pp][ldn]: H_{c-1}, then G_c

  ComputeTimes(p, lay, b, c, h, ct);
  const int qc = ChunkLength(p, lay, c);
  const int64_t l0 = c * Q;
  const int P = static_cast<int>(p.headdim), N = static_cast<int>(p.dstate);
  const int64_t block = StateBlock(lay, p.nheads, b, c, h);
  LoadSeqTile(xs, ldp, Q, lay.Pp, p.x, b, l0, h, qc, P);
  LoadSeqTile(bt, ldn, Q, lay.Np, p.B, b, l0, g, qc, N);
  LoadSeqTile(ctile, ldn, Q, lay.Np, p.C, b, l0, g, qc, N);
  LoadTile(dys, ldp, Q, lay.Pp, qc, P,
           [&](int t, int col) { return OutputGrad(p, b, l0 + t, h, col); });
  LoadTile(st, ldn, lay.Pp, lay.Np, lay.Pp, lay.Np,
           [&](int r, int col) { return states[block + r * lay.Np + col]; });
  __syncthreads();
  BlockGemm<false, true>(s1, ldq, ctile, ldn, bt, ldn, Q, Q, lay.Np, false);       // C B^T
  BlockGemm<false, true>(s2, ldq, dys, ldp, xs, ldp, Q, Q, lay.Pp, false);         // M = dY X^T
  BlockGemm<false, true>(t1, ldp, ctile, ldn, st, ldn, Q, lay.Pp, lay.Np, false);  // C H^T
  __syncthreads();
  // K[t,s] = L CB M dt_s: row sums into dcs[t], column sums out of dcs[s]; column sums of
  // L CB M are dt's direct gradient. One thread per row, one per column: fixed order.
  if (threadIdx.x < Q) {
    const int t = threadIdx.x;
    float sum = 0.0f;
    for (int s = 0; s <= t; ++s)
      sum += Decay(ct, t, s) * s1[t * ldq + s] * s2[t * ldq + s] * ct.dt[s];
    dcs_row[t] = sum;
  } else if (threadIdx.x < 2 * Q) {
    const int s = threadIdx.x - Q;
    float sum = 0.0f;
    for (int t = s; t < Q; ++t) sum += Decay(ct, t, s) * s1[t * ldq + s] * s2[t * ldq + s];
    direct[s] = sum;
    dcs_col[s] = -sum * ct.dt[s];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Q * Q; i += blockDim.x) {
    const int t = i / Q, s = i % Q;
    const float f = Decay(ct, t, s) * ct.dt[s];
    s1[t * ldq + s] *= f;  // Wt
    s2[t * ldq + s] *= f;  // Wm
  }
  __syncthreads();
  BlockGemm<false, false>(t2, ldp, s1, ldq, xs, ldp, Q, lay.Pp, Q, false);  // Wt X
  __syncthreads();
  // y (before the gate) for dz; then t1 := co dY for the co (dY H) term of dC.
  const SsdHeadView& D = p.D;
  for (int i = threadIdx.x; i < qc * P; i += blockDim.x) {
    const int t = i / P, col = i % P;
    const float d_skip = D.data ? D.data[h * D.stride_head + col * D.stride_p] : 0.0f;
    if (p.dz.data) {
      const float y = t2[t * ldp + col] + ct.co[t] * t1[t * ldp + col] + d_skip * xs[t * ldp + col];
      const float zv = LoadF32(p.z.data, p.z.dtype, Off(p.z, b, l0 + t, h) + col);
      const float dout = LoadF32(p.dout.data, p.dout.dtype, Off(p.dout, b, l0 + t, h) + col);
      StoreF32(p.dz.data, p.dz.dtype, Off(p.dz, b, l0 + t, h) + col, dout * y * SiluGrad(zv));
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Q * lay.Pp; i += blockDim.x) {
    const int t = i / lay.Pp, col = i % lay.Pp;
    t1[t * ldp + col] = ct.co[t] * dys[t * ldp + col];
  }
  __syncthreads();
  const int64_t ld_part = p.nheads * lay.Np;
  float* dc = part.dC + ((b * lay.Lpad + l0) * p.nheads + h) * lay.Np;
  float* db = part.dB + ((b * lay.Lpad + l0) * p.nheads + h) * lay.Np;
  BlockGemm<false, false>(dc, ld_part, t1, ldp, st, ldn, Q, lay.Np, lay.Pp, false);  // co dY H
  __syncthreads();
  if (threadIdx.x < qc) {  // co (C H^T) . dY at t = C_t . (co dY H)_t
    const int t = threadIdx.x;
    float sum = 0.0f;
    for (int n = 0; n < N; ++n) sum += ctile[t * ldn + n] * dc[t * ld_part + n];
    dcs_row[t] += sum;
  }
  __syncthreads();
  BlockGemm<false, false>(dc, ld_part, s2, ldq, bt, ldn, Q, lay.Np, Q, true);  // += Wm B
  // G_c replaces H_{c-1}.
  LoadTile(st, ldn, lay.Pp, lay.Np, lay.Pp, lay.Np,
           [&](int r, int col) { return dstates[block + r * lay.Np + col]; });
  __syncthreads();
  BlockGemm<false, true>(t1, ldp, bt, ldn, st, ldn, Q, lay.Pp, lay.Np, false);  // B G^T
  BlockGemm<true, false>(t2, ldp, s1, ldq, dys, ldp, Q, lay.Pp, Q, false);      // Wt^T dY
  __syncthreads();
  if (threadIdx.x < Q) {  // the chunk-state term w dt (x . B G^T) at s
    const int s = threadIdx.x;
    float sum = 0.0f;
    for (int col = 0; col < P; ++col) sum += xs[s * ldp + col] * t1[s * ldp + col];
    const float term = ct.w[s] * sum;
    direct[s] += term;
    dcs_col[s] -= term * ct.dt[s];
    red[s] = term * ct.dt[s];
  }
  for (int i = threadIdx.x; i < qc * P; i += blockDim.x) {
    const int s = i / P, col = i % P;
    const float d_skip = D.data ? D.data[h * D.stride_head + col * D.stride_p] : 0.0f;
    const float dx =
        t2[s * ldp + col] + d_skip * dys[s * ldp + col] + ct.w[s] * ct.dt[s] * t1[s * ldp + col];
    if (p.dx.data) StoreF32(p.dx.data, p.dx.dtype, Off(p.dx, b, l0 + s, h) + col, dx);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Q * lay.Pp; i += blockDim.x) {
    const int s = i / lay.Pp, col = i % lay.Pp;
    t1[s * ldp + col] = ct.w[s] * ct.dt[s] * xs[s * ldp + col];
  }
  __syncthreads();
  BlockGemm<false, false>(db, ld_part, t1, ldp, st, ldn, Q, lay.Np, lay.Pp, false);  // w dt X G
  __syncthreads();
  BlockGemm<true, false>(db, ld_part, s2, ldq, ctile, ldn, Q, lay.Np, Q, true);  // += Wm^T C
  // dcs -> d(dt A) by a reverse sum -> ddt; per-(b, c, h) partials of dA and ddt_bias.
  if (threadIdx.x == 0) {
    const float A = p.A.data[h * p.A.stride_head];
    float moved = 0.0f;  // the chunk-state terms, moved to the end
    for (int s = 0; s < qc; ++s) moved += red[s];
    const int64_t kdec_at = ((b * p.nheads + h) * lay.nchunks + c) * part.kdec_parts;
    for (int e = 0; e < part.kdec_parts; ++e) moved += part.kdec[kdec_at + e];
    float dlog = 0.0f, dA = 0.0f, dbias = 0.0f;
    for (int r = qc - 1; r >= 0; --r) {
      dlog += dcs_row[r] + dcs_col[r] + (r == qc - 1 ? moved : 0.0f);
      const float ddt_in = (direct[r] + dlog * A) * ct.mask[r];
      red[r] = ddt_in;
      dA += dlog * ct.dt[r];
      dbias += ddt_in;
    }
    const int64_t at = (b * lay.nchunks + c) * p.nheads + h;
    part.dA[at] = dA;
    part.dbias[at] = dbias;
  }
  __syncthreads();
  if (p.ddt.data && threadIdx.x < qc) {
    StoreF32(p.ddt.data, p.ddt.dtype,
             b * p.ddt.stride_batch + (l0 + threadIdx.x) * p.ddt.stride_seq + h, red[threadIdx.x]);
  }
  if (!part.dD) return;
  const int64_t at = (b * lay.nchunks + c) * p.nheads + h;
  if (p.d_per_channel) {
    for (int col = threadIdx.x; col < P; col += blockDim.x) {
      float sum = 0.0f;
      for (int t = 0; t < qc; ++t) sum += dys[t * ldp + col] * xs[t * ldp + col];
      part.dD[at * P + col] = sum;
    }
  } else {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < qc * P; i += blockDim.x) {
      sum += dys[(i / P) * ldp + i % P] * xs[(i / P) * ldp + i % P];
    }
    sum = BlockSum(sum, scratch);
    if (threadIdx.x == 0) part.dD[at] = sum;
  }
}

// d[b, l, g, n] = sum over the heads h of group g of partial[((b Lpad + l) H + h) Np + n].
__global__ void SumGroupHeadsKernel(const float* __restrict__ partial, SsdLayout lay, int64_t batch,
                                    int64_t seqlen, int64_t nheads, int64_t ngroups, int64_t dstate,
                                    SsdSeqView out) {
  const int64_t count = batch * seqlen * ngroups * dstate, per_group = nheads / ngroups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i % dstate, g = (i / dstate) % ngroups, l = (i / (dstate * ngroups)) % seqlen;
    const int64_t b = i / (dstate * ngroups * seqlen);
    const float* src = partial + ((b * lay.Lpad + l) * nheads + g * per_group) * lay.Np + n;
    float sum = 0.0f;
    for (int64_t k = 0; k < per_group; ++k) sum += src[k * lay.Np];
    StoreF32(out.data, out.dtype, Off(out, b, l, g) + n, sum);
  }
}

Status SumGroupHeads(const SsdBwdParams& p, const SsdLayout& lay, const float* partial,
                     const SsdSeqView& out) {
  if (!out.data) return Status::Ok();
  const int64_t count = p.batch * p.seqlen * p.ngroups * p.dstate;
  const int64_t blocks = std::min<int64_t>(CeilDiv(count, 256), 65535);
  SumGroupHeadsKernel<<<static_cast<unsigned>(blocks), 256, 0, CurrentStream()>>>(
      partial, lay, p.batch, p.seqlen, p.nheads, p.ngroups, p.dstate, out);
  return CheckLaunch(kOp, "SumGroupHeadsKernel");
}

// Sums (B * nchunks) partial rows of `width` values per head into a per-head output.
Status SumOverChunks(const SsdBwdParams& p, const SsdLayout& lay, const float* partial,
                     int64_t width, const SsdHeadView& out) {
  return SumHeadPartials(kOp, partial, p.batch * lay.nchunks, p.nheads, width, out);
}

}  // namespace

int BackwardSmemFloats(const SsdLayout& lay) { return ChunkBackwardSmemFloats(lay); }

Status SsdBackward(const SsdBwdParams& p) {
  Variant variant;
  SSMKIT_RETURN_IF_ERROR(SsdPicksMma(&variant));
  if (variant.index == 1) {
    bool handled = false;
    SSMKIT_RETURN_IF_ERROR(SsdBackwardMma(p, &handled));
    if (handled) return Status::Ok();
    if (variant.required) return VariantDoesNotApply(kSsdVariants, variant.index);
  }
  SsdLayout lay;
  SSMKIT_RETURN_IF_ERROR(PlanSsd(p, true, &lay));
  const int64_t state_floats = p.batch * lay.nchunks * p.nheads * lay.Pp * lay.Np;
  const int64_t bhc = p.batch * p.nheads * lay.nchunks;
  const int kdec_parts = static_cast<int>(static_cast<int64_t>(lay.Pp) * lay.Np / kSsdThreads);
  const int64_t part_floats = p.batch * lay.Lpad * p.nheads * lay.Np;
  const int64_t d_width = p.d_per_channel ? p.headdim : 1;
  const int64_t total =
      2 * state_floats + bhc * (1 + kdec_parts) + 2 * part_floats + bhc * (2 + d_width);
  Workspace ws;
  SSMKIT_RETURN_IF_ERROR(ws.Allocate(kOp, total * 4));
  float* states = ws.as<float>();
  float* dstates = states + state_floats;
  float* decay = dstates + state_floats;
  float* kdec = decay + bhc;
  HeadPartials part;
  part.dB = kdec + bhc * kdec_parts;
  part.dC = part.dB + part_floats;
  part.dA = part.dC + part_floats;
  part.dbias = part.dA + bhc;
  part.dD = p.D.data ? part.dbias + bhc : nullptr;
  part.kdec = kdec;
  part.kdec_parts = kdec_parts;

  SSMKIT_RETURN_IF_ERROR(LaunchChunkStates(p, lay, states, decay));
  SSMKIT_RETURN_IF_ERROR(LaunchStatePassing(p, lay, states, decay, false));
  const dim3 chunk_grid(static_cast<unsigned>(lay.nchunks),
                        static_cast<unsigned>(p.batch * p.nheads));
  const int dstate_smem = (TimesFloats(lay.Q) + lay.Q * lay.ldp + lay.Q * lay.ldn) * 4;
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ChunkDstateKernel), dstate_smem));
  ChunkDstateKernel<<<chunk_grid, kSsdThreads, dstate_smem, CurrentStream()>>>(p, lay, dstates);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "ChunkDstateKernel"));
  const dim3 pass_grid(static_cast<unsigned>(kdec_parts),
                       static_cast<unsigned>(p.batch * p.nheads));
  StatePassingBackwardKernel<<<pass_grid, kSsdThreads, 0, CurrentStream()>>>(p, lay, states,
                                                                             dstates, decay, kdec);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "StatePassingBackwardKernel"));
  const int smem = ChunkBackwardSmemFloats(lay) * 4;
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ChunkBackwardKernel), smem));
  ChunkBackwardKernel<<<chunk_grid, kSsdThreads, smem, CurrentStream()>>>(p, lay, states, dstates,
                                                                          part);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "ChunkBackwardKernel"));

  SSMKIT_RETURN_IF_ERROR(SumGroupHeads(p, lay, part.dB, p.dB));
  SSMKIT_RETURN_IF_ERROR(SumGroupHeads(p, lay, part.dC, p.dC));
  SSMKIT_RETURN_IF_ERROR(SumOverChunks(p, lay, part.dA, 1, p.dA));
  SSMKIT_RETURN_IF_ERROR(SumOverChunks(p, lay, part.dbias, 1, p.ddt_bias));
  if (part.dD) SSMKIT_RETURN_IF_ERROR(SumOverChunks(p, lay, part.dD, d_width, p.dD));
  return Status::Ok();
}

}  // namespace ssmkit::cuda

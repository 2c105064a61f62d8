// Mamba-1 selective scan on CUDA, forward and backward, with the semantics of
// include/ssmkit/selective_scan.hpp (mamba_ssm's selective_scan_fn plus h0 and the final state).
//
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C.
//
// Work split. A block serves kThreads = 128 threads = cpb channels x tpc lanes; lane j of a
// channel holds the KS states n = j, j + tpc, ..., so a channel's N states are spread over tpc
// lanes of one warp (KS = 4 for N <= 128, 8 for N <= 256: two instantiations in all). A
// block's channels never straddle a B or C group (tiles are cut inside segments of gcd(D/G)
// channels), so the block stages one group's B and C rows. Grid: (channel tiles, B).
//
// Forward: the sequence is walked in chunks of kFwdSteps steps staged in shared memory (u, dt,
// z per channel, coalesced along time; B and C per step); the state stays in registers across
// chunks. y = C . h is a butterfly sum over the channel's lanes.
//
// Backward: a checkpoint pass (the forward kernel, writing the state every T = 64 / KS steps to
// a workspace, no output), then one fused reverse kernel: per chunk of T steps, from the
// checkpoint it recomputes the T states into registers (and y, for dz), then runs the adjoint
//   g_l = dy_l C_l + a_{l+1} g_{l+1},  dB_l = g dt u,  dC_l = dy h_l,  da = g h_{l-1},
//   du = sum_n g dt B + D dy,  ddt = sum_n (g B u + da a A),  dA += da a dt
// backwards over the chunk. Sums over n are butterflies over the channel's lanes. Sums over
// channels (variable dB, dC) are butterflies over the warp's channels, then a fixed-order sum
// over the block's warps, written as one partial per block; sums over batch and time (dA,
// constant dB/dC, dD, ddelta_bias) are per-thread registers written as partials per batch row.
// Partials are added in a fixed order afterwards: no float atomics, the same bits every run.
//
// Packed sequences (seq_idx, cu_seqlens): where sequence k starts, the state restarts from its
// initial state (zeros, or seq_initial_states[k]) before the step, and the checkpoint there
// holds that state (as the CPU's chunk states do). The backward's recompute restarts the same
// way; its adjoint sends a_l g_l to that initial state's gradient and restarts g from the
// gradient reaching the previous sequence's last state. The values of seq_idx / cu_seqlens
// are not checked on the device (that would synchronise): any values keep every access in
// bounds (a sequence index is clamped to [0, S)).
#include <numeric>

#include "cuda/backend.hpp"
#include "cuda/common.cuh"
#include "cuda/selective_scan_bwd_parallel.hpp"
#include "cuda/selective_scan_parallel.hpp"
#include "cuda/variant.hpp"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "selective_scan";
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kFwdSteps = 32;  // forward chunk: tuned for speed, does not affect results
constexpr float kLog2e = 1.4426950408889634f;

// How channels and states map onto blocks and lanes (see the file comment).
struct ScanLayout {
  int tpc = 1;      // lanes per channel (power of two, <= 32)
  int cpb = 128;    // channels per block
  int n_alloc = 4;  // tpc * KS >= N: state slots per channel
  int64_t seg = 1;  // channels per segment (no B/C group boundary inside one)
  int64_t tiles_per_seg = 1;
  int64_t ck_count = 0;  // backward checkpoints: ceil(L / T)
};

// The thread's place: channel index within the block, lane within the channel, channel d.
struct Place {
  int c, j;
  int64_t d0, d, b;
  int nch;  // channels in this block
  bool active;
};

__device__ __forceinline__ Place ThreadPlace(const ScanLayout& lay) {
  Place pl;
  pl.c = threadIdx.x / lay.tpc;
  pl.j = threadIdx.x % lay.tpc;
  const int64_t seg_idx = blockIdx.x / lay.tiles_per_seg, tile = blockIdx.x % lay.tiles_per_seg;
  pl.d0 = seg_idx * lay.seg + tile * lay.cpb;
  const int64_t left = lay.seg - tile * lay.cpb;
  pl.nch = static_cast<int>(left < lay.cpb ? left : lay.cpb);
  pl.d = pl.d0 + pl.c;
  pl.b = blockIdx.y;
  pl.active = pl.c < pl.nch;
  return pl;
}

// Element (b, d, n, l) of B or C for the block's group (d may be any channel of the block).
__device__ __forceinline__ int64_t BCOffset(const BCView& v, int64_t dim, int64_t b, int64_t d,
                                            int64_t n, int64_t l) {
  return b * v.stride_batch + (d / (dim / v.groups)) * v.stride_group + n * v.stride_state +
         l * v.stride_time;
}

// Sum over the lanes of one channel (offsets below tpc).
__device__ __forceinline__ float ChannelSum(float v, int tpc) {
  for (int o = tpc >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the channels of one warp (lanes with the same j: offsets tpc .. 16).
__device__ __forceinline__ float WarpChannelSum(float v, int tpc) {
  for (int o = tpc; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Stages T positions from l0 of a (B, D, L) operand for the block's cpb channel slots:
// tile[c * (T + 1) + t] (padded row: conflict-free column reads). Past the end of the sequence
// or of the block's channels: 0, so idle lanes compute with zeros and add nothing to sums.
template <int T, class Fn>
__device__ __forceinline__ void StageSeq(float* tile, const Place& pl, int cpb, int64_t l0,
                                         int64_t seqlen, Fn&& load) {
  for (int i = threadIdx.x; i < cpb * T; i += blockDim.x) {
    const int c = i / T, t = i % T;
    const int64_t l = l0 + t;
    tile[c * (T + 1) + t] = c < pl.nch && l < seqlen ? load(pl.d0 + c, l) : 0.0f;
  }
}

// Stages B or C rows of the block's group: tile[t * (n_alloc + 1) + n], 0 past N or L.
template <int T>
__device__ __forceinline__ void StageBC(float* tile, const BCView& v, const SelectiveScanParams& p,
                                        const Place& pl, int n_alloc, int64_t l0) {
  // The group's row start, once: BCOffset divides (64-bit) to find the group.
  const int64_t row0 = BCOffset(v, p.dim, pl.b, pl.d0, 0, 0);
  for (int i = threadIdx.x; i < n_alloc * T; i += blockDim.x) {
    const int n = i / T, t = i % T;
    const int64_t l = l0 + t;
    float val = 0.0f;
    if (n < p.dstate && l < p.seqlen)
      val = LoadF32(v.data, v.dtype, row0 + n * v.stride_state + l * v.stride_time);
    tile[t * (n_alloc + 1) + n] = val;
  }
}

__device__ __forceinline__ float SeqLoad(const SeqView& v, int64_t b, int64_t d, int64_t l) {
  return LoadF32(v.data, v.dtype, b * v.stride_batch + d * v.stride_dim + l);
}

// delta + delta_bias, before the softplus.
__device__ __forceinline__ float DeltaIn(const SelectiveScanParams& p, int64_t b, int64_t d,
                                         int64_t l) {
  float x = SeqLoad(p.delta, b, d, l);
  if (p.delta_bias.data) x += p.delta_bias.data[d * p.delta_bias.stride_dim];
  return x;
}

__device__ __forceinline__ float TimeStep(float x, bool softplus) {
  return softplus ? Softplus(x) : x;
}

// ---- packed sequences

__device__ __forceinline__ int64_t CuAt(const CuSeqlensView& v, int64_t k) {
  return v.dtype == DType::kI64 ? static_cast<const int64_t*>(v.data)[k * v.stride]
                                : static_cast<const int32_t*>(v.data)[k * v.stride];
}

__device__ __forceinline__ bool SeqIdxChangesAt(const SeqIdxView& v, int64_t b, int64_t l) {
  const int32_t* row = v.data + b * v.stride_batch;
  return row[l * v.stride_seq] != row[(l - 1) * v.stride_seq];
}

// The sequence (with cu_seqlens) that position l belongs to: the last k in [0, S) with
// cu[k] <= l, by bisection (in range whatever the values).
__device__ __forceinline__ int64_t SequenceOf(const CuSeqlensView& v, int64_t l) {
  int64_t lo = 0, hi = v.nseqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (CuAt(v, mid) <= l) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Walks a row's positions in order and says where a packed sequence starts (never at 0).
struct SequenceCursor {
  int64_t k = 0;             // the sequence being walked (cu_seqlens)
  int64_t next = INT64_MAX;  // where sequence k + 1 starts (cu_seqlens)
  __device__ explicit SequenceCursor(const SelectiveScanParams& p) {
    if (p.cu_seqlens.data && p.cu_seqlens.nseqs > 1) next = CuAt(p.cu_seqlens, 1);
  }
  __device__ bool StartsAt(const SelectiveScanParams& p, int64_t b, int64_t l) {
    if (p.cu_seqlens.data) {
      if (l != next) return false;
      ++k;
      next = k + 1 < p.cu_seqlens.nseqs ? CuAt(p.cu_seqlens, k + 1) : INT64_MAX;
      return true;
    }
    return p.seq_idx.data && l > 0 && SeqIdxChangesAt(p.seq_idx, b, l);
  }
};

// Which of the steps [l0, l0 + steps) start a packed sequence (bit t; steps <= 64), and the
// sequence of l0 (cu_seqlens; 0 otherwise).
__device__ __forceinline__ uint64_t SequenceStarts(const SelectiveScanParams& p, int64_t b,
                                                   int64_t l0, int steps, int64_t* k0) {
  uint64_t mask = 0;
  *k0 = 0;
  if (p.cu_seqlens.data) {
    *k0 = SequenceOf(p.cu_seqlens, l0);
    for (int64_t k = *k0; k < p.cu_seqlens.nseqs; ++k) {
      const int64_t start = CuAt(p.cu_seqlens, k);
      if (start >= l0 + steps) break;
      if (start > 0 && start >= l0) mask |= uint64_t{1} << (start - l0);
    }
  } else if (p.seq_idx.data) {
    for (int t = 0; t < steps; ++t) {
      if (l0 + t > 0 && SeqIdxChangesAt(p.seq_idx, b, l0 + t)) mask |= uint64_t{1} << t;
    }
  }
  return mask;
}

// The state view row sequence k starts from, element (d, n); 0 where there is none.
__device__ __forceinline__ float SequenceInitial(const SelectiveScanParams& p, int64_t k, int64_t d,
                                                 int64_t n) {
  const F32View& v = p.seq_initial_states;
  return v.data ? v.data[k * v.stride_batch + d * v.stride_dim + n * v.stride_state] : 0.0f;
}

// The thread's KS state indices n_k = j + k * tpc; loads per-state constants.
template <int KS>
struct ThreadStates {
  float a2[KS];          // A[d, n] * log2(e): exp(dt A) = exp2(dt a2)
  float bc[KS], cc[KS];  // constant B and C (D, N) rows, when constant
  bool valid[KS];
  __device__ void Load(const SelectiveScanParams& p, const Place& pl, int tpc) {
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      const int64_t n = pl.j + k * tpc;
      valid[k] = pl.active && n < p.dstate;
      a2[k] = valid[k] ? p.A.data[pl.d * p.A.stride_dim + n * p.A.stride_state] * kLog2e : 0.0f;
      bc[k] = valid[k] && !p.B.is_variable
                  ? LoadF32(p.B.data, p.B.dtype, BCOffset(p.B, p.dim, 0, pl.d, n, 0))
                  : 0.0f;
      cc[k] = valid[k] && !p.C.is_variable
                  ? LoadF32(p.C.data, p.C.dtype, BCOffset(p.C, p.dim, 0, pl.d, n, 0))
                  : 0.0f;
    }
  }
};

// One step of the recurrence for the thread's KS states, h = exp(dt A) h + dt B u (prev and
// next may be the same array); returns the thread's share of y = C . h. s_B, s_C: the staged
// rows (variable forms), bs their row length; t the step within the staged chunk.
template <int KS>
__device__ __forceinline__ float StepStates(const ThreadStates<KS>& st,
                                            const SelectiveScanParams& p, const float* s_B,
                                            const float* s_C, int bs, int t, const Place& pl,
                                            int tpc, float dt, float u, const float (&prev)[KS],
                                            float (&next)[KS]) {
  float y = 0.0f;
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    const int n = pl.j + k * tpc;
    const float bv = p.B.is_variable ? s_B[t * bs + n] : st.bc[k];
    const float cv = p.C.is_variable ? s_C[t * bs + n] : st.cc[k];
    next[k] = Exp2Ftz(dt * st.a2[k]) * prev[k] + dt * bv * u;
    y += cv * next[k];
  }
  return y;
}

// Forward. checkpoints == nullptr: writes out and final_state. Otherwise the backward's
// checkpoint pass: writes the state before every ck_every-th step to
// checkpoints[((b * ck_count + l / ck_every) * D + d) * N + n] and nothing else.
template <int KS>
__global__ void __launch_bounds__(kThreads)
    ScanForwardKernel(SelectiveScanParams p, ScanLayout lay, float* checkpoints, int ck_every) {
  constexpr int T = kFwdSteps;
  extern __shared__ float smem[];
  const Place pl = ThreadPlace(lay);
  const int row = T + 1;
  float* s_u = smem;                  // [cpb][T + 1]
  float* s_dt = s_u + lay.cpb * row;  // [cpb][T + 1]
  float* s_z = s_dt + lay.cpb * row;  // [cpb][T + 1]; then the gated output
  float* s_B = s_z + lay.cpb * row;   // [T][n_alloc + 1]
  float* s_C = s_B + T * (lay.n_alloc + 1);

  ThreadStates<KS> st;
  st.Load(p, pl, lay.tpc);
  float h[KS];
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    const int64_t n = pl.j + k * lay.tpc;
    const F32View& h0 = p.initial_state;
    h[k] = st.valid[k] && h0.data
               ? h0.data[pl.b * h0.stride_batch + pl.d * h0.stride_dim + n * h0.stride_state]
               : 0.0f;
  }
  const float d_skip = pl.active && p.D.data ? p.D.data[pl.d * p.D.stride_dim] : 0.0f;
  const int bs = lay.n_alloc + 1;
  const bool packed = p.seq_idx.data || p.cu_seqlens.data;
  SequenceCursor seqs(p);
  // Sequence k's last state into varlen_states (the forward proper only).
  auto store_varlen = [&](int64_t k) {
    const F32View& v = p.varlen_states;
    if (checkpoints || !v.data) return;
#pragma unroll
    for (int i = 0; i < KS; ++i) {
      if (st.valid[i])
        v.data[k * v.stride_batch + pl.d * v.stride_dim + (pl.j + i * lay.tpc) * v.stride_state] =
            h[i];
    }
  };

  for (int64_t l0 = 0; l0 < p.seqlen; l0 += T) {
    __syncthreads();  // the previous chunk's tiles are consumed
    StageSeq<T>(s_u, pl, lay.cpb, l0, p.seqlen,
                [&](int64_t d, int64_t l) { return SeqLoad(p.u, pl.b, d, l); });
    StageSeq<T>(s_dt, pl, lay.cpb, l0, p.seqlen, [&](int64_t d, int64_t l) {
      return TimeStep(DeltaIn(p, pl.b, d, l), p.delta_softplus);
    });
    if (p.z.data)
      StageSeq<T>(s_z, pl, lay.cpb, l0, p.seqlen,
                  [&](int64_t d, int64_t l) { return SeqLoad(p.z, pl.b, d, l); });
    if (p.B.is_variable) StageBC<T>(s_B, p.B, p, pl, lay.n_alloc, l0);
    if (p.C.is_variable) StageBC<T>(s_C, p.C, p, pl, lay.n_alloc, l0);
    __syncthreads();
    const int steps = p.seqlen - l0 < T ? static_cast<int>(p.seqlen - l0) : T;
    for (int t = 0; t < steps; ++t) {
      if (packed && seqs.StartsAt(p, pl.b, l0 + t)) {  // sequence seqs.k starts here
        store_varlen(seqs.k - 1);
#pragma unroll
        for (int k = 0; k < KS; ++k)
          h[k] = st.valid[k] ? SequenceInitial(p, seqs.k, pl.d, pl.j + k * lay.tpc) : 0.0f;
      }
      if (checkpoints && t % ck_every == 0) {  // l0 is a multiple of T, T of ck_every
        const int64_t ck = (l0 + t) / ck_every;
#pragma unroll
        for (int k = 0; k < KS; ++k) {
          if (st.valid[k]) {
            checkpoints[((pl.b * lay.ck_count + ck) * p.dim + pl.d) * p.dstate + pl.j +
                        k * lay.tpc] = h[k];
          }
        }
      }
      const float u = s_u[pl.c * row + t], dt = s_dt[pl.c * row + t];
      float y = StepStates<KS>(st, p, s_B, s_C, bs, t, pl, lay.tpc, dt, u, h, h);
      y = ChannelSum(y, lay.tpc);
      if (pl.j == 0 && pl.active) {
        y += d_skip * u;
        if (p.z.data) y *= Silu(s_z[pl.c * row + t]);
        s_z[pl.c * row + t] = y;
      }
    }
    if (checkpoints) continue;
    __syncthreads();
    for (int i = threadIdx.x; i < pl.nch * T; i += blockDim.x) {
      const int c = i / T, t = i % T;
      if (l0 + t < p.seqlen) {
        StoreF32(p.out.data, p.out.dtype,
                 pl.b * p.out.stride_batch + (pl.d0 + c) * p.out.stride_dim + l0 + t,
                 s_z[c * row + t]);
      }
    }
  }
  store_varlen(seqs.k);
  if (checkpoints || !p.final_state.data) return;
  const F32View& fs = p.final_state;
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    if (st.valid[k])
      fs.data[pl.b * fs.stride_batch + pl.d * fs.stride_dim +
              (pl.j + k * lay.tpc) * fs.stride_state] = h[k];
  }
}

// Partial sums the backward writes, reduced afterwards in a fixed order.
struct ScanPartials {
  float* dB = nullptr;           // variable B: (channel blocks, B, N, L); constant: (B, D, N)
  float* dC = nullptr;           // the same for C
  float* dA = nullptr;           // (B, D, N)
  float* dD = nullptr;           // (B, D)
  float* ddelta_bias = nullptr;  // (B, D)
};

template <int KS>
__global__ void __launch_bounds__(kThreads)
    ScanBackwardKernel(SelectiveScanBwdParams p, ScanLayout lay, const float* checkpoints,
                       ScanPartials part) {
  constexpr int T = 64 / KS;  // steps per chunk: T * KS recomputed states in registers
  extern __shared__ float smem[];
  const Place pl = ThreadPlace(lay);
  const int row = T + 1, bs = lay.n_alloc + 1, red_row = 2 * lay.n_alloc + 1;
  float* s_u = smem;                 // [cpb][T + 1]; then du
  float* s_x = s_u + lay.cpb * row;  // delta + bias; then ddelta
  float* s_z = s_x + lay.cpb * row;  // z; then dz
  float* s_dout = s_z + lay.cpb * row;
  float* s_y = s_dout + lay.cpb * row;  // y before D u and the gate
  float* s_B = s_y + lay.cpb * row;     // [T][n_alloc + 1]
  float* s_C = s_B + T * bs;
  float* s_red = s_C + T * bs;  // [warps][T][2 n_alloc + 1]: per-warp dB, dC sums

  ThreadStates<KS> st;
  st.Load(p, pl, lay.tpc);
  const int warp = threadIdx.x / 32;
  const bool warp_writer = (threadIdx.x % 32) < lay.tpc;  // the warp's first channel
  const float d_skip = pl.active && p.D.data ? p.D.data[pl.d * p.D.stride_dim] : 0.0f;
  float g[KS], dA[KS], dBc[KS], dCc[KS];
  // The gradient reaching sequence k's last state (dvarlen_states), element n.
  auto dvarlen = [&](int64_t k, int64_t n) {
    const F32View& v = p.dvarlen_states;
    return v.data ? v.data[k * v.stride_batch + pl.d * v.stride_dim + n * v.stride_state] : 0.0f;
  };
  const int64_t last_seq = p.cu_seqlens.data ? p.cu_seqlens.nseqs - 1 : 0;
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    const F32View& df = p.dfinal_state;
    const int64_t n = pl.j + k * lay.tpc;
    g[k] = st.valid[k] && df.data
               ? df.data[pl.b * df.stride_batch + pl.d * df.stride_dim + n * df.stride_state]
               : 0.0f;
    if (st.valid[k]) g[k] += dvarlen(last_seq, n);
    dA[k] = dBc[k] = dCc[k] = 0.0f;
  }
  float dD = 0.0f, dbias = 0.0f;

  for (int64_t ck = lay.ck_count - 1; ck >= 0; --ck) {
    const int64_t l0 = ck * T;
    const int steps = p.seqlen - l0 < T ? static_cast<int>(p.seqlen - l0) : T;
    __syncthreads();
    StageSeq<T>(s_u, pl, lay.cpb, l0, p.seqlen,
                [&](int64_t d, int64_t l) { return SeqLoad(p.u, pl.b, d, l); });
    StageSeq<T>(s_x, pl, lay.cpb, l0, p.seqlen,
                [&](int64_t d, int64_t l) { return DeltaIn(p, pl.b, d, l); });
    if (p.z.data)
      StageSeq<T>(s_z, pl, lay.cpb, l0, p.seqlen,
                  [&](int64_t d, int64_t l) { return SeqLoad(p.z, pl.b, d, l); });
    StageSeq<T>(s_dout, pl, lay.cpb, l0, p.seqlen,
                [&](int64_t d, int64_t l) { return SeqLoad(p.dout, pl.b, d, l); });
    if (p.B.is_variable) StageBC<T>(s_B, p.B, p, pl, lay.n_alloc, l0);
    if (p.C.is_variable) StageBC<T>(s_C, p.C, p, pl, lay.n_alloc, l0);
    __syncthreads();

    // Where packed sequences start in the chunk (bit t), and the sequence of l0; a step that
    // starts one (after the first) continues from that sequence's initial state.
    int64_t k0;
    const uint64_t starts = SequenceStarts(p, pl.b, l0, steps, &k0);
    auto starts_at = [&](int t) { return (starts >> t & 1) != 0; };
    auto sequence_at = [&](int t) -> int64_t {  // the sequence of step l0 + t (cu_seqlens)
      if (!p.cu_seqlens.data) return 0;
      const int64_t k = k0 + __popcll(starts & ((uint64_t{2} << t) - 1) & ~uint64_t{1});
      return k < p.cu_seqlens.nseqs ? k : p.cu_seqlens.nseqs - 1;
    };
    float h_init[KS];  // the initial state of the sequence starting at the step in hand

    // Recompute the chunk's states from its checkpoint: hs[t] = h after step l0 + t (past the
    // sequence's end they hold values never read).
    float h_start[KS], hs[T][KS];
#pragma unroll
    for (int k = 0; k < KS; ++k) {
      h_start[k] = st.valid[k]
                       ? checkpoints[((pl.b * lay.ck_count + ck) * p.dim + pl.d) * p.dstate + pl.j +
                                     k * lay.tpc]
                       : 0.0f;
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float dt = TimeStep(s_x[pl.c * row + t], p.delta_softplus), u = s_u[pl.c * row + t];
      const bool restart = t > 0 && starts_at(t);  // at t = 0 the checkpoint is that state
      if (restart) {
#pragma unroll
        for (int k = 0; k < KS; ++k)
          h_init[k] =
              st.valid[k] ? SequenceInitial(p, sequence_at(t), pl.d, pl.j + k * lay.tpc) : 0.0f;
      }
      float y =
          StepStates<KS>(st, p, s_B, s_C, bs, t, pl, lay.tpc, dt, u,
                         t == 0 ? h_start : (restart ? h_init : hs[t > 0 ? t - 1 : 0]), hs[t]);
      y = ChannelSum(y, lay.tpc);
      if (pl.j == 0) s_y[pl.c * row + t] = y;
    }
    __syncwarp();

    // The adjoint, backwards over the chunk.
#pragma unroll
    for (int t = T - 1; t >= 0; --t) {
      if (t >= steps) continue;
      const float x = s_x[pl.c * row + t], u = s_u[pl.c * row + t];
      const float dt = TimeStep(x, p.delta_softplus);
      const float ddt_dx = p.delta_softplus && x <= 20.0f ? Sigmoid(x) : 1.0f;
      const float dout = s_dout[pl.c * row + t];
      float dy = dout, dz = 0.0f;
      if (p.z.data) {
        const float zv = s_z[pl.c * row + t];
        const float y = s_y[pl.c * row + t] + d_skip * u;
        dz = dout * y * SiluGrad(zv);
        dy = dout * Silu(zv);
      }
      float du = 0.0f, ddt = 0.0f, vals[2 * KS];
      const bool restart = t > 0 && starts_at(t);
      if (restart) {
#pragma unroll
        for (int k = 0; k < KS; ++k)
          h_init[k] =
              st.valid[k] ? SequenceInitial(p, sequence_at(t), pl.d, pl.j + k * lay.tpc) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        const int n = pl.j + k * lay.tpc;
        const float bv = p.B.is_variable ? s_B[t * bs + n] : st.bc[k];
        const float cv = p.C.is_variable ? s_C[t * bs + n] : st.cc[k];
        const float prev = t == 0 ? h_start[k] : (restart ? h_init[k] : hs[t > 0 ? t - 1 : 0][k]);
        const float a = Exp2Ftz(dt * st.a2[k]);
        const float a_coef = st.a2[k] * (1.0f / kLog2e);
        g[k] += dy * cv;  // dLoss/dh_l
        const float da = g[k] * prev;
        vals[k] = g[k] * dt * u;       // dB_l
        vals[KS + k] = dy * hs[t][k];  // dC_l
        du += g[k] * dt * bv;
        ddt += g[k] * bv * u + da * a * a_coef;
        dA[k] += da * a * dt;
        if (!p.B.is_variable) dBc[k] += vals[k];
        if (!p.C.is_variable) dCc[k] += vals[KS + k];
        g[k] *= a;  // dLoss/dh_{l-1} through this step
      }
      if (starts_at(t)) {  // g is the gradient of the initial state of the sequence starting here
        const int64_t seq = sequence_at(t);
        const F32View& v = p.dseq_initial_states;
#pragma unroll
        for (int k = 0; k < KS; ++k) {
          if (!st.valid[k]) continue;
          const int64_t n = pl.j + k * lay.tpc;
          if (v.data)
            v.data[seq * v.stride_batch + pl.d * v.stride_dim + n * v.stride_state] = g[k];
          g[k] = seq > 0 ? dvarlen(seq - 1, n) : 0.0f;
        }
      }
      du = ChannelSum(du, lay.tpc);
      ddt = ChannelSum(ddt, lay.tpc);
      if (p.B.is_variable || p.C.is_variable) {
        float* red = s_red + (warp * T + t) * red_row;
#pragma unroll
        for (int k = 0; k < 2 * KS; ++k) vals[k] = WarpChannelSum(vals[k], lay.tpc);
        if (warp_writer) {
#pragma unroll
          for (int k = 0; k < KS; ++k) {
            red[pl.j + k * lay.tpc] = vals[k];
            red[lay.n_alloc + pl.j + k * lay.tpc] = vals[KS + k];
          }
        }
      }
      // Lane 0 overwrites step t's u, x and z with their gradients: every lane of the warp must
      // have read them first (the butterflies above order this in practice, not in the memory
      // model).
      __syncwarp();
      if (pl.j == 0 && pl.active) {
        const float ddelta = ddt * ddt_dx;
        dD += dy * u;
        dbias += ddelta;
        s_u[pl.c * row + t] = du + d_skip * dy;
        s_x[pl.c * row + t] = ddelta;
        s_z[pl.c * row + t] = dz;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < pl.nch * T; i += blockDim.x) {
      const int c = i / T, t = i % T;
      const int64_t l = l0 + t, d = pl.d0 + c;
      if (l >= p.seqlen) continue;
      if (p.du.data)
        StoreF32(p.du.data, p.du.dtype, pl.b * p.du.stride_batch + d * p.du.stride_dim + l,
                 s_u[c * row + t]);
      if (p.ddelta.data)
        StoreF32(p.ddelta.data, p.ddelta.dtype,
                 pl.b * p.ddelta.stride_batch + d * p.ddelta.stride_dim + l, s_x[c * row + t]);
      if (p.dz.data)
        StoreF32(p.dz.data, p.dz.dtype, pl.b * p.dz.stride_batch + d * p.dz.stride_dim + l,
                 s_z[c * row + t]);
    }
    // This block's share of variable dB / dC: the sum over its warps, in warp order.
    for (int i = threadIdx.x; i < 2 * lay.n_alloc * T; i += blockDim.x) {
      const int slot = i / T, t = i % T;
      const int which = slot / lay.n_alloc, n = slot % lay.n_alloc;
      float* dst = which == 0 ? part.dB : part.dC;
      const bool variable = which == 0 ? p.B.is_variable : p.C.is_variable;
      if (!dst || !variable || n >= p.dstate || l0 + t >= p.seqlen) continue;
      float sum = 0.0f;
      for (int w = 0; w < kWarps; ++w) sum += s_red[(w * T + t) * red_row + slot];
      dst[((blockIdx.x * static_cast<int64_t>(gridDim.y) + pl.b) * p.dstate + n) * p.seqlen + l0 +
          t] = sum;
    }
  }

  // Per-(b, d) results and partials.
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    if (!st.valid[k]) continue;
    const int64_t n = pl.j + k * lay.tpc, bdn = (pl.b * p.dim + pl.d) * p.dstate + n;
    const F32View& dh0 = p.dinitial_state;
    if (dh0.data)
      dh0.data[pl.b * dh0.stride_batch + pl.d * dh0.stride_dim + n * dh0.stride_state] = g[k];
    if (part.dA) part.dA[bdn] = dA[k];
    if (part.dB && !p.B.is_variable) part.dB[bdn] = dBc[k];
    if (part.dC && !p.C.is_variable) part.dC[bdn] = dCc[k];
  }
  if (pl.j == 0 && pl.active) {
    if (part.dD) part.dD[pl.b * p.dim + pl.d] = dD;
    if (part.ddelta_bias) part.ddelta_bias[pl.b * p.dim + pl.d] = dbias;
  }
}

// dB[b, g, n, l] = sum over the channel blocks q of group g of partial[q][b][n][l].
__global__ void SumVariableBCKernel(const float* __restrict__ partial, int64_t blocks_per_group,
                                    int64_t batch, int64_t dstate, int64_t seqlen, BCView out) {
  const int64_t count = batch * out.groups * dstate * seqlen;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = i % seqlen, n = (i / seqlen) % dstate;
    const int64_t g = (i / (seqlen * dstate)) % out.groups, b = i / (seqlen * dstate * out.groups);
    float sum = 0.0f;
    for (int64_t q = g * blocks_per_group; q < (g + 1) * blocks_per_group; ++q) {
      sum += partial[((q * batch + b) * dstate + n) * seqlen + l];
    }
    StoreF32(
        out.data, out.dtype,
        b * out.stride_batch + g * out.stride_group + n * out.stride_state + l * out.stride_time,
        sum);
  }
}

int StatesPerLane(int64_t dstate) { return dstate <= 128 ? 4 : 8; }

ScanLayout MakeLayout(const SelectiveScanParams& p, int ks) {
  ScanLayout lay;
  while (lay.tpc * ks < p.dstate) lay.tpc *= 2;
  lay.cpb = kThreads / lay.tpc;
  lay.n_alloc = lay.tpc * ks;
  lay.seg = p.dim;
  if (p.B.is_variable) lay.seg = std::gcd(lay.seg, p.dim / p.B.groups);
  if (p.C.is_variable) lay.seg = std::gcd(lay.seg, p.dim / p.C.groups);
  lay.tiles_per_seg = CeilDiv(lay.seg, lay.cpb);
  return lay;
}

Status CheckGrid(const SelectiveScanParams& p, const ScanLayout& lay, dim3* grid) {
  const int64_t x = (p.dim / lay.seg) * lay.tiles_per_seg;
  if (x > 0x7fffffff || p.batch > 65535) {
    return Status::Unsupported(std::string(kOp) +
                               ": batch above 65535 (or too many channel tiles) on CUDA");
  }
  *grid = dim3(static_cast<unsigned>(x), static_cast<unsigned>(p.batch));
  return Status::Ok();
}

int ForwardSmem(const ScanLayout& lay) {
  return static_cast<int>(sizeof(float)) *
         (3 * lay.cpb * (kFwdSteps + 1) + 2 * kFwdSteps * (lay.n_alloc + 1));
}

int BackwardSmem(const ScanLayout& lay, int ks) {
  const int T = 64 / ks;
  return static_cast<int>(sizeof(float)) *
         (5 * lay.cpb * (T + 1) + 2 * T * (lay.n_alloc + 1) + kWarps * T * (2 * lay.n_alloc + 1));
}

template <int KS>
Status LaunchForward(const SelectiveScanParams& p, const ScanLayout& lay, float* checkpoints,
                     int ck_every) {
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(CheckGrid(p, lay, &grid));
  const int smem = ForwardSmem(lay);
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ScanForwardKernel<KS>), smem));
  ScanForwardKernel<KS><<<grid, kThreads, smem, CurrentStream()>>>(p, lay, checkpoints, ck_every);
  return CheckLaunch(kOp, "ScanForwardKernel");
}

template <int KS>
Status RunBackward(const SelectiveScanBwdParams& p) {
  constexpr int T = 64 / KS;
  ScanLayout lay = MakeLayout(p, KS);
  lay.ck_count = CeilDiv(p.seqlen, T);
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(CheckGrid(p, lay, &grid));
  const int64_t bdn = p.batch * p.dim * p.dstate, bd = p.batch * p.dim;
  const int64_t bnl = p.batch * p.dstate * p.seqlen;
  const int64_t dB_size = p.dB.data ? (p.B.is_variable ? grid.x * bnl : bdn) : 0;
  const int64_t dC_size = p.dC.data ? (p.C.is_variable ? grid.x * bnl : bdn) : 0;
  const int64_t ck_size = p.batch * lay.ck_count * p.dim * p.dstate;
  const int64_t total = ck_size + dB_size + dC_size + (p.dA.data ? bdn : 0) + (p.dD.data ? bd : 0) +
                        (p.ddelta_bias.data ? bd : 0);
  Workspace ws;
  SSMKIT_RETURN_IF_ERROR(ws.Allocate(kOp, total * 4));
  FloatCarver pieces(ws.as<float>());
  float* checkpoints = pieces.Take(true, ck_size);
  ScanPartials part;
  part.dB = pieces.Take(p.dB.data != nullptr, dB_size);
  part.dC = pieces.Take(p.dC.data != nullptr, dC_size);
  part.dA = pieces.Take(p.dA.data != nullptr, bdn);
  part.dD = pieces.Take(p.D.data && p.dD.data, bd);
  part.ddelta_bias = pieces.Take(p.ddelta_bias.data != nullptr, bd);

  SSMKIT_RETURN_IF_ERROR(LaunchForward<KS>(p, lay, checkpoints, T));
  const int smem = BackwardSmem(lay, KS);
  int max_smem = 0;
  SSMKIT_RETURN_IF_ERROR(MaxSharedMemoryPerBlock(kOp, &max_smem));
  if (smem > max_smem) {
    return Status::Unsupported(std::string(kOp) + ": backward needs " + std::to_string(smem) +
                               " bytes of shared memory per block, the device grants " +
                               std::to_string(max_smem));
  }
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ScanBackwardKernel<KS>), smem));
  ScanBackwardKernel<KS><<<grid, kThreads, smem, CurrentStream()>>>(p, lay, checkpoints, part);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "ScanBackwardKernel"));

  // Fixed-order sums of the partials.
  auto sum_over_batch = [&](const float* partial, void* data, DType dtype, int64_t s_dim,
                            int64_t s_state, int64_t states) {
    StridedOut out;
    out.data = data;
    out.dtype = dtype;
    out.dims[1] = p.dim;
    out.dims[2] = states;
    out.strides[1] = s_dim;
    out.strides[2] = s_state;
    return SumPartials(kOp, partial, p.batch, out);
  };
  auto sum_bc = [&](const float* partial, const BCView& in, const BCView& out) -> Status {
    if (!partial) return Status::Ok();
    if (!in.is_variable)
      return sum_over_batch(partial, out.data, out.dtype, out.stride_group, out.stride_state,
                            p.dstate);
    const int64_t blocks_per_group = grid.x / in.groups;
    const int64_t count = p.batch * in.groups * p.dstate * p.seqlen;
    const int64_t blocks = std::min<int64_t>(CeilDiv(count, 256), 65535);
    SumVariableBCKernel<<<static_cast<unsigned>(blocks), 256, 0, CurrentStream()>>>(
        partial, blocks_per_group, p.batch, p.dstate, p.seqlen, out);
    return CheckLaunch(kOp, "SumVariableBCKernel");
  };
  SSMKIT_RETURN_IF_ERROR(sum_bc(part.dB, p.B, p.dB));
  SSMKIT_RETURN_IF_ERROR(sum_bc(part.dC, p.C, p.dC));
  if (part.dA)
    SSMKIT_RETURN_IF_ERROR(sum_over_batch(part.dA, p.dA.data, DType::kF32, p.dA.stride_dim,
                                          p.dA.stride_state, p.dstate));
  if (part.dD)
    SSMKIT_RETURN_IF_ERROR(sum_over_batch(part.dD, p.dD.data, DType::kF32, p.dD.stride_dim, 0, 1));
  if (part.ddelta_bias) {
    SSMKIT_RETURN_IF_ERROR(sum_over_batch(part.ddelta_bias, p.ddelta_bias.data, DType::kF32,
                                          p.ddelta_bias.stride_dim, 0, 1));
  }
  return Status::Ok();
}

}  // namespace

Status SelectiveScanForward(const SelectiveScanParams& p) {
  Variant variant;
  SSMKIT_RETURN_IF_ERROR(PickVariant(kScanVariants, &variant));
  if (variant.index == 1) {
    if (ScanForwardParallelApplies(p)) return ScanForwardParallel(p);
    if (variant.required) return VariantDoesNotApply(kScanVariants, variant.index);
  }
  const int ks = StatesPerLane(p.dstate);
  const ScanLayout lay = MakeLayout(p, ks);
  return ks == 4 ? LaunchForward<4>(p, lay, nullptr, 1) : LaunchForward<8>(p, lay, nullptr, 1);
}

Status SelectiveScanBackward(const SelectiveScanBwdParams& p) {
  Variant variant;
  SSMKIT_RETURN_IF_ERROR(PickVariant(kScanBackwardVariants, &variant));
  if (variant.index == 1) {
    if (ScanBackwardParallelApplies(p)) return ScanBackwardParallel(p);
    if (variant.required) return VariantDoesNotApply(kScanBackwardVariants, variant.index);
  }
  return StatesPerLane(p.dstate) == 4 ? RunBackward<4>(p) : RunBackward<8>(p);
}

}  // namespace ssmkit::cuda

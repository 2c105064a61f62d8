// The SSD mma variant's per-(b, h) passes over the chunks (ssd_mma.cuh):
//   MmaTimesKernel       dt, mask and the within-chunk cumulative log-decay cs, a warp per chunk
//   MmaRecurrenceKernel  the state recurrence, chunk states and state passing fused: a block
//                        holds R rows of one head's (P x N) state in f32 accumulators
//                        (registers) and walks the chunks in order (forward: H) or backwards
//                        (reverse: G, the state's gradient), writing the state it holds at
//                        each chunk (bf16) for the chunk kernels, then adding the chunk's
//                        (u X)^T V product on the tensor cores.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk,
// R state rows per block.
#include "cuda/backend.hpp"
#include "cuda/ssd_chunk.cuh"
#include "cuda/ssd_mma.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "ssd";

// Rows of P per recurrence block (tuned for speed, does not affect results).
constexpr int kRecurrenceRows = 32;

template <int Q>
__global__ void __launch_bounds__(kMmaThreads)
    MmaTimesKernel(SsdParams p, MmaLayout lay, MmaTimes times) {
  static_assert(Q % 32 == 0, "a lane owns Q / 32 consecutive positions");
  constexpr int kPer = Q / 32;
  const int64_t chunk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (chunk >= p.batch * p.nheads * lay.nchunks) return;  // the whole warp
  const int64_t c = chunk % lay.nchunks, bh = chunk / lay.nchunks;
  const int64_t h = bh % p.nheads, b = bh / p.nheads;
  const float A = p.A.data[h * p.A.stride_head];
  const float bias = p.dt_bias.data ? p.dt_bias.data[h * p.dt_bias.stride_head] : 0.0f;
  float dt[kPer], mask[kPer], sum = 0.0f;
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const int64_t l = c * Q + lane * kPer + e;
    dt[e] = 0.0f;
    mask[e] = 0.0f;
    if (l < p.seqlen) {
      const float raw =
          LoadF32(p.dt.data, p.dt.dtype, b * p.dt.stride_batch + l * p.dt.stride_seq + h) + bias;
      dt[e] = EffectiveDt(p, raw, &mask[e]);
    }
    sum += dt[e] * A;
  }
  float inclusive = sum;  // over lanes <= this one
  for (int o = 1; o < 32; o <<= 1) {
    const float s = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += s;
  }
  float run = inclusive - sum;
  const int64_t at = MmaTimesRow(p, lay, b, h) + c * Q + lane * kPer;
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    run += dt[e] * A;
    times.dt[at + e] = dt[e];
    times.cs[at + e] = run;
    times.mask[at + e] = mask[e];
  }
}

// Shared memory of MmaRecurrenceKernel, byte offsets.
template <class S>
struct RecurrenceSmem {
  static constexpr int kU = 0;                                        // [Q][R] bf16: u X
  static constexpr int kV = kU + BfTileBytes(S::Q, kRecurrenceRows);  // [Q][N] bf16
  static constexpr int kStage = kV + BfTileBytes(S::Q, S::N);         // [R][N] f32
  static constexpr int kBytes = kStage + F32TileBytes(kRecurrenceRows, S::N);
};

// Block: state rows [p0, p0 + R) of head h, batch row b; blockIdx.x = (b H + h) (P / R) + p0 / R.
// Warp w holds the (16 x 32) block Place<N>(w) of those R x N states.
template <class S>
__global__ void __launch_bounds__(kMmaThreads)
    MmaRecurrenceKernel(SsdParams p, MmaLayout lay, MmaTimes times, RecurrenceArgs args,
                        bf16* states) {
  constexpr int Q = S::Q, P = S::P, N = S::N, R = kRecurrenceRows, TM = 1, TN = 2;
  constexpr int kLdU = BfLd(R), kLdV = BfLd(N), kLdS = F32Ld(N);
  static_assert(P % R == 0 && R % 8 == 0, "R must divide P; u rows copy in 8s");
  static_assert(R / (16 * TM) * (N / (16 * TN)) == kMmaWarps, "one state block per warp");
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* us = reinterpret_cast<bf16*>(smem + RecurrenceSmem<S>::kU);
  bf16* vs = reinterpret_cast<bf16*>(smem + RecurrenceSmem<S>::kV);
  float* stage = reinterpret_cast<float*>(smem + RecurrenceSmem<S>::kStage);

  constexpr int kSlices = P / R;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x % kSlices) * R;
  const int64_t bh = blockIdx.x / kSlices;
  const int64_t h = bh % p.nheads, b = bh / p.nheads;
  const int64_t g = GroupOf(p, h);
  const int64_t trow = MmaTimesRow(p, lay, b, h);
  const int lane = threadIdx.x % 32;
  WarpBlock<TM, TN> st;
  st.template Place<N>(threadIdx.x / 32);
  constexpr int kBlockRows = 16 * TM, kBlockCols = 16 * TN;

  const SsdStateView& init = args.init;
  if (init.data) {
    for (int i = threadIdx.x; i < R * N; i += blockDim.x) {
      const int r = i / N, n = i % N;
      stage[r * kLdS + n] =
          init.data[b * init.stride_batch + h * init.stride_head + (p0 + r) * init.stride_p + n];
    }
    __syncthreads();
    st.Load(stage, kLdS);  // each warp reads and later writes only its own block of `stage`
  } else {
    st.Zero();
  }

  for (int64_t i = 0; i < lay.nchunks; ++i) {
    const int64_t c = args.reverse ? lay.nchunks - 1 - i : i;
    const int64_t l0 = c * Q;
    const int qc = MmaChunkLength(p, l0, Q);
    // The state this block holds at chunk c (H_{c-1} forward, G_c reverse), rounded to bf16.
    st.Store(stage, kLdS);
    __syncwarp();
    bf16* out = states + MmaStateBlock(p, lay, b, c, h) + p0 * N;
    for (int e = lane; e < kBlockRows * kBlockCols / 2; e += 32) {
      const int m = st.m0 + e / (kBlockCols / 2), n = st.n0 + e % (kBlockCols / 2) * 2;
      *reinterpret_cast<__nv_bfloat162*>(out + m * N + n) =
          __floats2bfloat162_rn(stage[m * kLdS + n], stage[m * kLdS + n + 1]);
    }
    __syncwarp();
    // u X of the chunk (u = w dt forward, co reverse; X = x, or dY = dout silu(z)) and V.
    const float cs_end = times.cs[trow + l0 + Q - 1];
    for (int j = threadIdx.x; j < Q * (R / 8); j += blockDim.x) {
      const int t = j / (R / 8), col = j % (R / 8) * 8;
      uint4 piece = make_uint4(0u, 0u, 0u, 0u);
      if (t < qc) {
        const float cs_t = times.cs[trow + l0 + t];
        const float scale =
            args.reverse ? __expf(cs_t) : __expf(cs_end - cs_t) * times.dt[trow + l0 + t];
        const int64_t gate_off = args.gate.data ? Off(args.gate, b, l0 + t, h) + p0 + col : 0;
        piece =
            ScaledPiece(args.u, Off(args.u, b, l0 + t, h) + p0 + col, args.gate, gate_off, scale);
      }
      *reinterpret_cast<uint4*>(us + t * kLdU + col) = piece;
    }
    const bf16* v = static_cast<const bf16*>(args.v.data);
    CopyTileAsync<Q, N>(vs, kLdV, qc, [&](int r) { return v + Off(args.v, b, l0 + r, g); });
    CpAsyncWaitAll();
    __syncthreads();
    // state = decay_c state + (u X)^T V: A = (u X)^T read transposed from [Q][R], B = V [Q][N].
    st.Scale(__expf(cs_end));
    st.template Mma<Q, true, false>(us, kLdU, vs, kLdV);
    __syncthreads();  // the next chunk overwrites us and vs
  }

  const SsdStateView& last = args.last;
  if (!last.data) return;
  st.Store(stage, kLdS);
  __syncwarp();
  for (int e = lane; e < kBlockRows * kBlockCols; e += 32) {
    const int m = st.m0 + e / kBlockCols, n = st.n0 + e % kBlockCols;
    last.data[b * last.stride_batch + h * last.stride_head + (p0 + m) * last.stride_p + n] =
        stage[m * kLdS + n];
  }
}

}  // namespace

Status LaunchMmaTimes(const SsdParams& p, const MmaLayout& lay, const MmaTimes& times) {
  const int64_t warps = p.batch * p.nheads * lay.nchunks;
  const int64_t blocks = CeilDiv(warps, kMmaWarps);
  if (blocks > 0x7fffffff) return Status::Unsupported(std::string(kOp) + ": too many chunks");
  MmaTimesKernel<MmaShape::Q>
      <<<static_cast<unsigned>(blocks), kMmaThreads, 0, CurrentStream()>>>(p, lay, times);
  return CheckLaunch(kOp, "MmaTimesKernel");
}

Status LaunchMmaRecurrence(const SsdParams& p, const MmaLayout& lay, const MmaTimes& times,
                           const RecurrenceArgs& args, bf16* states) {
  constexpr int smem = RecurrenceSmem<MmaShape>::kBytes;
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&MmaRecurrenceKernel<MmaShape>), smem));
  const int64_t blocks = p.batch * p.nheads * (MmaShape::P / kRecurrenceRows);
  if (blocks > 0x7fffffff) return Status::Unsupported(std::string(kOp) + ": B * H too large");
  MmaRecurrenceKernel<MmaShape>
      <<<static_cast<unsigned>(blocks), kMmaThreads, smem, CurrentStream()>>>(p, lay, times, args,
                                                                              states);
  return CheckLaunch(kOp, "MmaRecurrenceKernel");
}

}  // namespace ssmkit::cuda

// The Mamba-1 selective scan forward, variant "parallel" (SSMKIT_CUDA_SCAN=parallel; the
// verified kernel in selective_scan.cu stays the default until a GPU run decides).
//
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C.
//
// Why this layout. A step of the recurrence costs, per state, one exp2 on the special-function
// unit (a quarter of the FMA rate) and three FP ops; at the training shapes (B * D >= 32K
// channels) the channels alone fill the GPU, so nothing is gained by also splitting time
// across threads, and everything a time split costs (a block scan per state, a second pass
// applying the prefixes) is saved. So a lane holds kLaneStates = 16 states of one channel in
// registers (N <= 16: the whole channel, y = C . h with no shuffle; larger N spreads a channel
// over tpc = ceil(N / 16) lanes, summed by a butterfly) and walks time sequentially.
// Memory: u, delta, z and out are read and written by each lane straight from its own row,
// kSub = 16 steps at a time as whole 16-byte vectors (a bf16 row segment of 16 steps is one
// 32-byte sector: every sector fetched is used in full), the next segment loaded before the
// current one is computed. B and C rows (shared by all channels of a group) are staged per
// kChunk steps in shared memory, transposed to [step][state] so a lane reads its 16 states of
// a step as four broadcast float4 loads.
//
// Taken only where it applies (ScanForwardParallelApplies): variable B and C, no packed
// sequences, N <= 256, u / delta / z / out of one dtype with 16-byte aligned rows. Otherwise
// the verified kernel runs.
#include <numeric>

#include "cuda/common.cuh"
#include "cuda/selective_scan_parallel.hpp"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "selective_scan";
constexpr int kLaneStates = 16;  // states per lane
constexpr int kStatePad = 4;     // floats after each lane's 16 states: conflict-free float4 reads
constexpr int kThreads = 64;     // tuned for speed (small blocks even out the waves), no effect
constexpr int kSub = 16;         // steps per register segment: one 32-byte bf16 sector per row
constexpr int kChunk = 64;       // steps of B and C per staging barrier: tuned for speed
constexpr int kMaxLanes = 16;    // N <= 256
constexpr float kLog2e = 1.4426950408889634f;

struct ParallelLayout {
  int tpc = 1;      // lanes per channel (power of two)
  int cpb = 64;     // channels per block
  int64_t seg = 1;  // channels per segment: no B/C group boundary inside one
  int64_t tiles_per_seg = 1;
  int bc_row = kLaneStates + kStatePad;  // floats per staged step: tpc * (16 + 4)
};

// kSub consecutive steps of one (B, D, L) row in the storage type, kept packed in registers.
template <class E>
struct Segment {
  static constexpr int kWords = kSub * static_cast<int>(sizeof(E)) / 16;  // 16-byte vectors
  union {
    uint4 words[kWords];
    E v[kSub];
  };
  __device__ float at(int t) const { return ToF32(v[t]); }

  // Steps [l, l + steps) of `row`; whole vectors when steps == kSub (the row is 16-byte
  // aligned there: ScanForwardParallelApplies), zeros past `steps` otherwise.
  __device__ void Load(const E* row, int64_t l, int steps) {
    if (steps == kSub) {
      const uint4* src = reinterpret_cast<const uint4*>(row + l);
#pragma unroll
      for (int w = 0; w < kWords; ++w) words[w] = __ldg(src + w);
    } else {
#pragma unroll
      for (int t = 0; t < kSub; ++t) v[t] = t < steps ? row[l + t] : FromF32<E>(0.0f);
    }
  }
  __device__ void Store(E* row, int64_t l, int steps) const {
    if (steps == kSub) {
      uint4* dst = reinterpret_cast<uint4*>(row + l);
#pragma unroll
      for (int w = 0; w < kWords; ++w) dst[w] = words[w];
    } else {
#pragma unroll
      for (int t = 0; t < kSub; ++t) {
        if (t < steps) row[l + t] = v[t];
      }
    }
  }
};

// Stages steps [l0, l0 + steps) of the block's B or C rows: tile[t * bc_row + slot(n)] with
// slot(n) = (n / 16) * 20 + n % 16; 0 past N or the steps.
__device__ __forceinline__ void StageBC(float* tile, const BCView& v, const SelectiveScanParams& p,
                                        const ParallelLayout& lay, int64_t b, int64_t d0,
                                        int64_t l0, int steps) {
  const int64_t base = b * v.stride_batch + (d0 / (p.dim / v.groups)) * v.stride_group;
  const int slots = lay.tpc * kLaneStates;
  const bool time_fastest = v.stride_time == 1;  // coalesce along whichever axis is contiguous
  for (int i = threadIdx.x; i < kChunk * slots; i += blockDim.x) {
    const int n = time_fastest ? i / kChunk : i % slots;
    const int t = time_fastest ? i % kChunk : i / slots;
    float val = 0.0f;
    if (n < p.dstate && t < steps)
      val = LoadF32(v.data, v.dtype, base + n * v.stride_state + (l0 + t) * v.stride_time);
    tile[t * lay.bc_row + (n / kLaneStates) * (kLaneStates + kStatePad) + n % kLaneStates] = val;
  }
}

template <class E, bool kHasZ>
__global__ void __launch_bounds__(kThreads)
    ScanForwardParallelKernel(SelectiveScanParams p, ParallelLayout lay) {
  extern __shared__ float smem[];
  float* s_B = smem;                       // [kChunk][bc_row]
  float* s_C = s_B + kChunk * lay.bc_row;  // [kChunk][bc_row]
  const int c = threadIdx.x / lay.tpc, j = threadIdx.x % lay.tpc;
  const int64_t seg_idx = blockIdx.x / lay.tiles_per_seg, tile = blockIdx.x % lay.tiles_per_seg;
  const int64_t d0 = seg_idx * lay.seg + tile * lay.cpb;
  // Lanes past the segment's last channel compute channel d0's values (in bounds, uniform
  // control flow for the barriers and shuffles) and store nothing.
  const bool active = tile * lay.cpb + c < lay.seg;
  const int64_t d = active ? d0 + c : d0, b = blockIdx.y;

  float a2[kLaneStates], h[kLaneStates];
#pragma unroll
  for (int k = 0; k < kLaneStates; ++k) {
    const int64_t n = j * kLaneStates + k;
    const bool valid = n < p.dstate;  // invalid states: decay 1, input 0, C 0: stay 0
    a2[k] = valid ? p.A.data[d * p.A.stride_dim + n * p.A.stride_state] * kLog2e : 0.0f;
    const F32View& h0 = p.initial_state;
    h[k] = valid && h0.data ? h0.data[b * h0.stride_batch + d * h0.stride_dim + n * h0.stride_state]
                            : 0.0f;
  }
  const float bias = p.delta_bias.data ? p.delta_bias.data[d * p.delta_bias.stride_dim] : 0.0f;
  const float d_skip = p.D.data ? p.D.data[d * p.D.stride_dim] : 0.0f;
  const E* u_row = static_cast<const E*>(p.u.data) + b * p.u.stride_batch + d * p.u.stride_dim;
  const E* dt_row =
      static_cast<const E*>(p.delta.data) + b * p.delta.stride_batch + d * p.delta.stride_dim;
  const E* z_row =
      kHasZ ? static_cast<const E*>(p.z.data) + b * p.z.stride_batch + d * p.z.stride_dim : nullptr;
  E* out_row = static_cast<E*>(p.out.data) + b * p.out.stride_batch + d * p.out.stride_dim;
  const bool writer = active && j == 0;

  const int64_t L = p.seqlen;
  Segment<E> u, dt, z, u_next, dt_next, z_next, y;
  int steps = L < kSub ? static_cast<int>(L) : kSub;
  u.Load(u_row, 0, steps);
  dt.Load(dt_row, 0, steps);
  if (kHasZ) z.Load(z_row, 0, steps);
  for (int64_t l = 0; l < L; l += kSub) {
    const int64_t lc = l % kChunk;  // the step's place in the staged chunk
    if (lc == 0) {
      const int chunk_steps = L - l < kChunk ? static_cast<int>(L - l) : kChunk;
      __syncthreads();  // the previous chunk's rows are consumed
      StageBC(s_B, p.B, p, lay, b, d0, l, chunk_steps);
      StageBC(s_C, p.C, p, lay, b, d0, l, chunk_steps);
      __syncthreads();
    }
    // The next segment's loads are in flight while this one computes.
    const int64_t next_left = L - l - kSub;
    const int next_steps = next_left <= 0 ? 0 : (next_left < kSub ? int(next_left) : kSub);
    if (next_steps > 0) {
      u_next.Load(u_row, l + kSub, next_steps);
      dt_next.Load(dt_row, l + kSub, next_steps);
      if (kHasZ) z_next.Load(z_row, l + kSub, next_steps);
    }
#pragma unroll
    for (int t = 0; t < kSub; ++t) {
      if (t >= steps) break;  // uniform: only the last segment is short
      const float x = dt.at(t) + bias;
      const float delta = p.delta_softplus ? Softplus(x) : x;
      const float uv = u.at(t), dtu = delta * uv;
      const float* bq = s_B + (lc + t) * lay.bc_row + j * (kLaneStates + kStatePad);
      const float* cq = s_C + (lc + t) * lay.bc_row + j * (kLaneStates + kStatePad);
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains: y's sum is not one long FMA chain
#pragma unroll
      for (int q = 0; q < kLaneStates / 4; ++q) {
        const float4 bv = *reinterpret_cast<const float4*>(bq + 4 * q);
        const float4 cv = *reinterpret_cast<const float4*>(cq + 4 * q);
        const float bs[4] = {bv.x, bv.y, bv.z, bv.w}, cs[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = 4 * q + e;
          h[k] = Exp2Ftz(delta * a2[k]) * h[k] + dtu * bs[e];
          acc[e] += cs[e] * h[k];
        }
      }
      float yv = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      for (int o = lay.tpc >> 1; o > 0; o >>= 1) yv += __shfl_xor_sync(0xffffffffu, yv, o);
      yv += d_skip * uv;
      if (kHasZ) yv *= Silu(z.at(t));
      y.v[t] = FromF32<E>(yv);
    }
    if (writer) y.Store(out_row, l, steps);
    u = u_next;
    dt = dt_next;
    if (kHasZ) z = z_next;
    steps = next_steps;
  }

  const F32View& fs = p.final_state;
  if (!active || !fs.data) return;
#pragma unroll
  for (int k = 0; k < kLaneStates; ++k) {
    const int64_t n = j * kLaneStates + k;
    if (n < p.dstate) fs.data[b * fs.stride_batch + d * fs.stride_dim + n * fs.stride_state] = h[k];
  }
}

bool Aligned16(const SeqView& v, DType dtype) {
  const int64_t per_vector = 16 / DTypeSize(dtype);
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && v.stride_batch % per_vector == 0 &&
         v.stride_dim % per_vector == 0;
}

ParallelLayout MakeParallelLayout(const SelectiveScanParams& p) {
  ParallelLayout lay;
  while (lay.tpc * kLaneStates < p.dstate) lay.tpc *= 2;
  lay.cpb = kThreads / lay.tpc;
  lay.bc_row = lay.tpc * (kLaneStates + kStatePad);
  lay.seg = std::gcd(std::gcd(p.dim, p.dim / p.B.groups), p.dim / p.C.groups);
  lay.tiles_per_seg = CeilDiv(lay.seg, lay.cpb);
  return lay;
}

template <class E>
Status Launch(const SelectiveScanParams& p) {
  const ParallelLayout lay = MakeParallelLayout(p);
  const int64_t x = (p.dim / lay.seg) * lay.tiles_per_seg;
  if (x > 0x7fffffff || p.batch > 65535) {
    return Status::Unsupported(std::string(kOp) +
                               ": batch above 65535 (or too many channel tiles) on CUDA");
  }
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(p.batch));
  const int smem = static_cast<int>(sizeof(float)) * 2 * kChunk * lay.bc_row;
  const void* kernel = p.z.data
                           ? reinterpret_cast<const void*>(&ScanForwardParallelKernel<E, true>)
                           : reinterpret_cast<const void*>(&ScanForwardParallelKernel<E, false>);
  SSMKIT_RETURN_IF_ERROR(AllowSharedMemory(kOp, kernel, smem));
  if (p.z.data) {
    ScanForwardParallelKernel<E, true><<<grid, kThreads, smem, CurrentStream()>>>(p, lay);
  } else {
    ScanForwardParallelKernel<E, false><<<grid, kThreads, smem, CurrentStream()>>>(p, lay);
  }
  return CheckLaunch(kOp, "ScanForwardParallelKernel");
}

}  // namespace

bool ScanForwardParallelApplies(const SelectiveScanParams& p) {
  const DType e = p.u.dtype;
  const bool same_dtype = p.delta.dtype == e && p.out.dtype == e && (!p.z.data || p.z.dtype == e);
  return p.B.is_variable && p.C.is_variable && !p.seq_idx.data && !p.cu_seqlens.data &&
         p.dstate <= kMaxLanes * kLaneStates && same_dtype && Aligned16(p.u, e) &&
         Aligned16(p.delta, e) && Aligned16(p.out, e) && (!p.z.data || Aligned16(p.z, e));
}

Status ScanForwardParallel(const SelectiveScanParams& p) {
  switch (p.u.dtype) {
    case DType::kBF16:
      return Launch<__nv_bfloat16>(p);
    case DType::kF16:
      return Launch<__half>(p);
    default:
      return Launch<float>(p);
  }
}

}  // namespace ssmkit::cuda

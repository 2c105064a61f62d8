// The Mamba-1 selective scan forward, variant "parallel": the default since its first GPU runs
// (H200, 2026-11-28: 0.886 ms at m1-2.8b against the original kernel's 3.88; docs/cuda.md).
// SSMKIT_CUDA_SCAN=original picks the first kernel (selective_scan.cu), which also runs the
// calls this one does not cover.
//
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C.
//
// Why this layout. A step of the recurrence costs, per state, one exp2 on the special-function
// unit (a quarter of the FMA rate) and three FP ops; at the training shapes (B * D >= 32K
// channels) the channels alone fill the GPU, so nothing is gained by also splitting time
// across threads, and everything a time split costs (a block scan per state, a second pass
// applying the prefixes) is saved. So a lane holds KS states of one channel in registers and
// walks time sequentially: KS = 16 where B * D fills the GPU (N <= 16 is the whole channel,
// y = C . h with no shuffle), KS = 8 below that (twice the lanes, one shuffle per step); larger
// N spreads a channel over tpc = ceil(N / KS) lanes, summed by a butterfly. The per-step
// activations use the special-function unit's approximations (softplus as log(1 + e^x), silu
// through a fast division): a few ulp, no slow paths. Memory: u, delta, z and out are read and
// written by each lane straight from its own row, kSub = 16 steps at a time as whole 16-byte
// vectors (a bf16 row segment of 16 steps is one 32-byte sector: every sector fetched is used in
// full), the next segment loaded before the current one is computed. B and C rows (shared by all
// channels of a group) are staged per kChunk steps in shared memory, transposed to [step][state] so
// a lane reads its states of a step as broadcast float4 loads. Where B and C are rows of u's dtype
// contiguous in time (mamba_ssm's layout), each chunk arrives as 16-byte vectors loaded into
// registers one chunk ahead, so the staging barrier never waits on memory.
//
// Taken only where it applies (ScanForwardParallelApplies): variable B and C, no packed
// sequences, N <= 256, u / delta / z / out of one dtype with 16-byte aligned rows. Otherwise
// the verified kernel runs.
#include <numeric>

#include "cuda/common.cuh"
#include "cuda/selective_scan_parallel.hpp"
#include "cuda/typed_io.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "selective_scan";
constexpr int kStatePad = 4;   // floats after each lane's states: conflict-free float4 reads
constexpr int kThreads = 64;   // tuned for speed (small blocks even out the waves), no effect
constexpr int kSub = 16;       // steps per register segment: one 32-byte bf16 sector per row
constexpr int kChunk = 64;     // steps of B and C per staging barrier: tuned for speed
constexpr int kBCVectors = 4;  // B/C 16-byte vectors a thread prefetches per chunk, at most
// Blocks resident per SM the register budget must allow (<= 170 registers at 64 threads): the
// m1-2.8b grid has ~4.9 blocks per SM of an H100, and they should all run in one wave.
constexpr int kMinBlocks = 6;
constexpr int kMaxStates = 256;
constexpr int64_t kWideChannels = 32768;  // see ScanForwardParallel: tuned for speed, no effect
constexpr float kLog2e = 1.4426950408889634f;

struct ParallelLayout {
  int ks = 16;      // states per lane
  int tpc = 1;      // lanes per channel (power of two)
  int cpb = 64;     // channels per block
  int64_t seg = 1;  // channels per segment: no B/C group boundary inside one
  int64_t tiles_per_seg = 1;
  int bc_row = 20;         // floats per staged step: tpc * (ks + kStatePad)
  bool vector_bc = false;  // B and C staged from prefetched 16-byte vectors (BCPrefetch)
};

// softplus(x) = log(1 + e^x) by the special-function unit (the identity above 20, as
// mamba_ssm): for x below about -17, 1 + e^x rounds to 1 and the result to 0, a difference
// under 1e-7 in dt.
__device__ __forceinline__ float SoftplusFast(float x) {
  return x > 20.0f ? x : __logf(1.0f + __expf(x));
}
// silu(z) = z / (1 + e^-z) with the fast division (0 once e^-z overflows, as silu's limit).
__device__ __forceinline__ float SiluFast(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

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

// Stages steps [l0, l0 + steps) of the block's B or C rows (`row`: the block's group row at
// step 0): tile[t * bc_row + slot(n)] with slot(n) = (n / ks) * (ks + 4) + n % ks; 0 past N or
// the steps.
__device__ __forceinline__ void StageBC(float* tile, const BCView& v, const void* row, int dstate,
                                        const ParallelLayout& lay, int64_t l0, int steps) {
  const int slots = lay.tpc * lay.ks;
  const bool time_fastest = v.stride_time == 1;  // coalesce along whichever axis is contiguous
  for (int i = threadIdx.x; i < kChunk * slots; i += blockDim.x) {
    const int n = time_fastest ? i / kChunk : i % slots;
    const int t = time_fastest ? i % kChunk : i / slots;
    float val = 0.0f;
    if (n < dstate && t < steps) {
      val = LoadF32(row, v.dtype, n * v.stride_state + (l0 + t) * v.stride_time);
    }
    tile[t * lay.bc_row + (n / lay.ks) * (lay.ks + kStatePad) + n % lay.ks] = val;
  }
}

// The lane's KS states and per-channel constants, stepped through segments of time.
// The block's next chunk of B and C rows as 16-byte vectors in registers: vector i of the
// 2 * slots * (kChunk / V) in a chunk (V steps of one state row; n fastest, so the transposed
// stores below fall in distinct banks) belongs to thread i % kThreads, slot i / kThreads.
// Rows of u's dtype, contiguous in time, 16-byte aligned, L a multiple of V (host-checked).
template <class E>
struct BCPrefetch {
  static constexpr int kV = 16 / static_cast<int>(sizeof(E));  // steps per vector
  uint4 vec[kBCVectors];

  // The vector register r of this thread holds: state n, steps [q kV, q kV + kV), of B or C.
  struct Slot {
    bool used, is_b;
    int n, q;
  };
  static __device__ Slot SlotOf(int r, const ParallelLayout& lay) {
    const int slots = lay.tpc * lay.ks, per_op = slots * (kChunk / kV);
    const int i = threadIdx.x + r * kThreads, rem = i % per_op;
    return {i < 2 * per_op, i < per_op, rem % slots, rem / slots};
  }

  __device__ void Load(const E* b_row, const E* c_row, int64_t stride_state, int dstate,
                       const ParallelLayout& lay, int64_t l0, int steps) {
#pragma unroll
    for (int r = 0; r < kBCVectors; ++r) {
      const Slot slot = SlotOf(r, lay);
      if (!slot.used) break;
      const int n = slot.n, q = slot.q;
      const E* row = slot.is_b ? b_row : c_row;
      vec[r] = n < dstate && q * kV < steps
                   ? __ldg(reinterpret_cast<const uint4*>(row + n * stride_state + l0 + q * kV))
                   : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ void Store(float* s_B, float* s_C, const ParallelLayout& lay) const {
#pragma unroll
    for (int r = 0; r < kBCVectors; ++r) {
      const Slot slot = SlotOf(r, lay);
      if (!slot.used) break;
      const int n = slot.n, q = slot.q;
      float* tile = (slot.is_b ? s_B : s_C) + (n / lay.ks) * (lay.ks + kStatePad) + n % lay.ks;
      const E* v = reinterpret_cast<const E*>(&vec[r]);
#pragma unroll
      for (int e = 0; e < kV; ++e) tile[(q * kV + e) * lay.bc_row] = ToF32(v[e]);
    }
  }
};

template <class E, int KS, bool kHasZ>
struct LaneScan {
  float a2[KS], h[KS];  // A[d, n] log2(e); the state
  float bias, d_skip;
  bool softplus;
  int tpc;

  // Steps [l, l + steps) of one segment (t0: the segment's first step within the staged chunk,
  // bq/cq: the lane's states of that step in s_B / s_C). kFull: steps == kSub, no bounds.
  template <bool kFull>
  __device__ __forceinline__ void Run(const Segment<E>& u, const Segment<E>& dt,
                                      const Segment<E>& z, const float* bq, const float* cq,
                                      int row, int steps, Segment<E>& y) {
#pragma unroll
    for (int t = 0; t < kSub; ++t) {
      if (!kFull && t >= steps) break;
      const float x = dt.at(t) + bias;
      const float delta = softplus ? SoftplusFast(x) : x;
      const float uv = u.at(t), dtu = delta * uv;
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains: y's sum is not one long FMA chain
#pragma unroll
      for (int q = 0; q < KS / 4; ++q) {
        const float4 bv = *reinterpret_cast<const float4*>(bq + t * row + 4 * q);
        const float4 cv = *reinterpret_cast<const float4*>(cq + t * row + 4 * q);
        const float bs[4] = {bv.x, bv.y, bv.z, bv.w}, cs[4] = {cv.x, cv.y, cv.z, cv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int k = 4 * q + e;
          h[k] = Exp2Ftz(delta * a2[k]) * h[k] + dtu * bs[e];
          acc[e] += cs[e] * h[k];
        }
      }
      float yv = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      for (int o = tpc >> 1; o > 0; o >>= 1) yv += __shfl_xor_sync(0xffffffffu, yv, o);
      yv += d_skip * uv;
      if (kHasZ) yv *= SiluFast(z.at(t));
      y.v[t] = FromF32<E>(yv);
    }
  }
};

template <class E, int KS, bool kHasZ>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
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

  LaneScan<E, KS, kHasZ> lane;
#pragma unroll
  for (int k = 0; k < KS; ++k) {
    const int64_t n = j * KS + k;
    const bool valid = n < p.dstate;  // invalid states: decay 1, input 0, C 0: stay 0
    lane.a2[k] = valid ? p.A.data[d * p.A.stride_dim + n * p.A.stride_state] * kLog2e : 0.0f;
    const F32View& h0 = p.initial_state;
    lane.h[k] = valid && h0.data
                    ? h0.data[b * h0.stride_batch + d * h0.stride_dim + n * h0.stride_state]
                    : 0.0f;
  }
  lane.bias = p.delta_bias.data ? p.delta_bias.data[d * p.delta_bias.stride_dim] : 0.0f;
  lane.d_skip = p.D.data ? p.D.data[d * p.D.stride_dim] : 0.0f;
  lane.softplus = p.delta_softplus;
  lane.tpc = lay.tpc;
  const E* u_row = static_cast<const E*>(p.u.data) + b * p.u.stride_batch + d * p.u.stride_dim;
  const E* dt_row =
      static_cast<const E*>(p.delta.data) + b * p.delta.stride_batch + d * p.delta.stride_dim;
  const E* z_row =
      kHasZ ? static_cast<const E*>(p.z.data) + b * p.z.stride_batch + d * p.z.stride_dim : nullptr;
  E* out_row = static_cast<E*>(p.out.data) + b * p.out.stride_batch + d * p.out.stride_dim;
  const bool writer = active && j == 0;
  // The block's B and C group rows (every channel of the block is in one group of each).
  auto group_row = [&](const BCView& v) {
    const int64_t offset = b * v.stride_batch + (d0 / (p.dim / v.groups)) * v.stride_group;
    return static_cast<const char*>(v.data) + offset * DTypeSizeOnDevice(v.dtype);
  };
  const void* b_row = group_row(p.B);
  const void* c_row = group_row(p.C);
  const int lane_slot = j * (KS + kStatePad);

  const int64_t L = p.seqlen;
  BCPrefetch<E> bc;
  auto load_bc = [&](int64_t l0) {
    const int chunk_steps = L - l0 < kChunk ? static_cast<int>(L - l0) : kChunk;
    bc.Load(static_cast<const E*>(b_row), static_cast<const E*>(c_row), p.B.stride_state,
            static_cast<int>(p.dstate), lay, l0, chunk_steps);
  };
  if (lay.vector_bc) load_bc(0);
  Segment<E> u, dt, z, u_next, dt_next, z_next, y;
  int steps = L < kSub ? static_cast<int>(L) : kSub;
  u.Load(u_row, 0, steps);
  dt.Load(dt_row, 0, steps);
  if (kHasZ) z.Load(z_row, 0, steps);
  for (int64_t l = 0; l < L; l += kSub) {
    const int lc = static_cast<int>(l % kChunk);  // the segment's place in the staged chunk
    if (lc == 0) {
      const int chunk_steps = L - l < kChunk ? static_cast<int>(L - l) : kChunk;
      __syncthreads();  // the previous chunk's rows are consumed
      if (lay.vector_bc) {
        bc.Store(s_B, s_C, lay);
      } else {
        StageBC(s_B, p.B, b_row, static_cast<int>(p.dstate), lay, l, chunk_steps);
        StageBC(s_C, p.C, c_row, static_cast<int>(p.dstate), lay, l, chunk_steps);
      }
      __syncthreads();
      if (lay.vector_bc && l + kChunk < L) load_bc(l + kChunk);  // in flight over this chunk
    }
    // The next segment's loads are in flight while this one computes.
    const int64_t next_left = L - l - kSub;
    const int next_steps = next_left <= 0 ? 0 : (next_left < kSub ? int(next_left) : kSub);
    if (next_steps > 0) {
      u_next.Load(u_row, l + kSub, next_steps);
      dt_next.Load(dt_row, l + kSub, next_steps);
      if (kHasZ) z_next.Load(z_row, l + kSub, next_steps);
    }
    const float* bq = s_B + lc * lay.bc_row + lane_slot;
    const float* cq = s_C + lc * lay.bc_row + lane_slot;
    if (steps == kSub) {
      lane.template Run<true>(u, dt, z, bq, cq, lay.bc_row, steps, y);
    } else {
      lane.template Run<false>(u, dt, z, bq, cq, lay.bc_row, steps, y);
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
  for (int k = 0; k < KS; ++k) {
    const int64_t n = j * KS + k;
    if (n < p.dstate)
      fs.data[b * fs.stride_batch + d * fs.stride_dim + n * fs.stride_state] = lane.h[k];
  }
}

bool RowsAligned16(const SeqView& v) {
  return Aligned16(v.data, DTypeSize(v.dtype), {v.stride_batch, v.stride_dim});
}

ParallelLayout MakeParallelLayout(const SelectiveScanParams& p, int ks) {
  ParallelLayout lay;
  lay.ks = ks;
  while (lay.tpc * ks < p.dstate) lay.tpc *= 2;
  lay.cpb = kThreads / lay.tpc;
  lay.bc_row = lay.tpc * (ks + kStatePad);
  lay.seg = std::gcd(std::gcd(p.dim, p.dim / p.B.groups), p.dim / p.C.groups);
  lay.tiles_per_seg = CeilDiv(lay.seg, lay.cpb);
  // B and C from prefetched vectors: both rows of u's dtype, contiguous in time, every row
  // start 16-byte aligned, L whole vectors, and the chunk's vectors within kBCVectors per thread.
  const DType e = p.u.dtype;
  const int64_t v = 16 / DTypeSize(e);
  auto vector_rows = [&](const BCView& bcv) {
    return bcv.dtype == e && bcv.stride_time == 1 &&
           Aligned16(bcv.data, DTypeSize(e),
                     {bcv.stride_batch, bcv.stride_group, bcv.stride_state});
  };
  lay.vector_bc = vector_rows(p.B) && vector_rows(p.C) && p.B.stride_state == p.C.stride_state &&
                  p.seqlen % v == 0 &&
                  2 * lay.tpc * ks * (kChunk / v) <= int64_t{kThreads} * kBCVectors;
  return lay;
}

template <class E, int KS>
Status Launch(const SelectiveScanParams& p) {
  const ParallelLayout lay = MakeParallelLayout(p, KS);
  const int64_t x = (p.dim / lay.seg) * lay.tiles_per_seg;
  if (x > 0x7fffffff || p.batch > 65535) {
    return Status::Unsupported(std::string(kOp) +
                               ": batch above 65535 (or too many channel tiles) on CUDA");
  }
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(p.batch));
  const int smem = static_cast<int>(sizeof(float)) * 2 * kChunk * lay.bc_row;
  const void* kernel =
      p.z.data ? reinterpret_cast<const void*>(&ScanForwardParallelKernel<E, KS, true>)
               : reinterpret_cast<const void*>(&ScanForwardParallelKernel<E, KS, false>);
  SSMKIT_RETURN_IF_ERROR(AllowSharedMemory(kOp, kernel, smem));
  if (p.z.data) {
    ScanForwardParallelKernel<E, KS, true><<<grid, kThreads, smem, CurrentStream()>>>(p, lay);
  } else {
    ScanForwardParallelKernel<E, KS, false><<<grid, kThreads, smem, CurrentStream()>>>(p, lay);
  }
  return CheckLaunch(kOp, "ScanForwardParallelKernel");
}

template <int KS>
Status LaunchForDtype(const SelectiveScanParams& p) {
  switch (p.u.dtype) {
    case DType::kBF16:
      return Launch<__nv_bfloat16, KS>(p);
    case DType::kF16:
      return Launch<__half, KS>(p);
    default:
      return Launch<float, KS>(p);
  }
}

}  // namespace

bool ScanForwardParallelApplies(const SelectiveScanParams& p) {
  const DType e = p.u.dtype;
  const bool same_dtype = p.delta.dtype == e && p.out.dtype == e && (!p.z.data || p.z.dtype == e);
  return p.B.is_variable && p.C.is_variable && !p.seq_idx.data && !p.cu_seqlens.data &&
         p.dstate <= kMaxStates && same_dtype && RowsAligned16(p.u) && RowsAligned16(p.delta) &&
         RowsAligned16(p.out) && (!p.z.data || RowsAligned16(p.z));
}

Status ScanForwardParallel(const SelectiveScanParams& p) {
  // 16 states per lane where the channels alone fill the GPU (B * D >= kWideChannels), else 8:
  // twice the lanes for a small problem. On an H200: m1-2.8b (B * D = 40960) 0.886 ms with 16,
  // 0.962 with 8; policy (B * D = 512) 0.0426 ms with 16, 0.0355 with 8.
  return p.batch * p.dim >= kWideChannels ? LaunchForDtype<16>(p) : LaunchForDtype<8>(p);
}

}  // namespace ssmkit::cuda

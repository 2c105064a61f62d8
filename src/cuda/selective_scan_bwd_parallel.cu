// Mamba-1 selective scan backward on CUDA, the "parallel" variant (SSMKIT_CUDA_SCAN_BWD=parallel):
// the function of the verified backward in selective_scan.cu (include/ssmkit/selective_scan.hpp)
// with fewer bytes moved, fewer instructions and fewer registers. It serves N <= 16, variable
// B and C (any groups), one storage dtype for u, delta, z, B, C, and no packed sequences;
// every other call goes to the verified kernels (ScanBackwardParallelApplies).
//
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C.
//
// Work split. A block holds kChannels channels of one batch row, two lanes per channel: lane j
// holds the states n = 8j .. 8j + 7 of its channel, so a warp holds 16 channels and a lane's
// sums over n are its own 8 states plus one shuffle. Block tiles never straddle a B or C group
// (tiles are cut inside segments of gcd(D, D/G) channels, as in the verified kernel), so a block
// stages one group's B and C rows. Grid: (channel tiles, B). Every (B, D, L) and B/C tile is
// staged in shared memory by 16-byte cp.async copies issued one stage ahead (element by element
// where a row is not 16-byte aligned), in the storage dtype T, a template parameter.
//
// Checkpoints. ScanCheckpointKernel runs the recurrence h_l = a_l h_{l-1} + x_l
// (a_l = exp(dt_l A), x_l = dt_l B_l u_l) over the sequence and writes the state entering every
// kChunk-th step to a workspace (B, L / kChunk, D, 16).
//
// Reverse. ScanReverseKernel walks the chunks from the last. Per chunk of kChunk = 8 steps:
//   1. the per (channel, step) scalars are derived once into shared memory: dt, u, dy (the
//      gradient reaching y: dout silu(z)), dout silu'(z) and d dt / d delta;
//   2. from the chunk's checkpoint each lane steps its states to the middle of the chunk and
//      keeps that state;
//   3. per sub-chunk of kSub = 2 steps, the last first: the state entering it is stepped anew
//      from the nearest kept one (the middle, or the checkpoint), its 2 states are recomputed
//      into registers, then the adjoint runs backwards over them:
//        G = g + dy C,  dB_l = G dt u,  dC_l = dy h_l,  w = G a_l h_{l-1} = G (h_l - x_l),
//        du = dt sum_n G B + D dy,  ddt = u sum_n G B + sum_n w A,  dA += w dt,  g = a_l G.
//      a_l h_{l-1} is h_l - x_l, so a step needs only its own state, never the one before.
// Each state step costs up to four exp2 in all (checkpoints; middle state or stepping anew;
// recompute; adjoint, which the compiler may share with the recompute) for registers that hold
// 3 states a lane (the middle one and a sub-chunk's 2): 96 registers, 5 blocks a multiprocessor.
//
// Sums, all in a fixed order: no float atomics, the same bits every run. Over n: the lane's 8
// states, then the other lane by a shuffle. Variable dB and dC are sums over channels: each lane
// has 16 values per step (dB and dC of its 8 states), a reduce-scatter over the warp's 16
// channels (15 shuffles) leaves lane (c, j) the warp's sum of one of them, and the block's warps
// are added in shared memory: one partial per block, summed over each group's blocks by
// SumGroupedPartials. dA (per-lane registers), dD and ddelta_bias (per-channel slots in shared
// memory, added chunk by chunk) over the sequence: partials per batch row, SumPartials.
#include <algorithm>
#include <numeric>

#include "cuda/common.cuh"
#include "cuda/selective_scan_bwd_parallel.hpp"
#include "cuda/typed_io.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "selective_scan";
constexpr int kLanes = 2;                    // lanes per channel
constexpr int kStates = 8;                   // states per lane
constexpr int kMaxState = kLanes * kStates;  // larger N: the verified kernels
constexpr int kChannels = 64;  // channels per block: tuned for speed, does not affect results
constexpr int kThreads = kChannels * kLanes;
constexpr int kWarps = kThreads / 32;
// Checkpoint interval, the reverse kernel's chunk: tuned for speed, does not affect results.
constexpr int kChunk = 8;
constexpr int kMid = kChunk / 2;  // the step whose entering state the reverse kernel keeps
constexpr int kSub = 2;           // steps whose states the reverse kernel holds at once
// Steps the checkpoint kernel stages at once: tuned for speed, does not affect results.
constexpr int kFwdSteps = 32;
// Blocks per multiprocessor the registers of both kernels must allow (5: 96 registers a thread;
// m1-2.8b's 640 blocks of the reverse kernel then fit an H100's 132 multiprocessors at once):
// tuned for speed, does not affect results.
constexpr int kMinBlocks = 5;
// The same for the checkpoint kernel (4: 128 registers; at 5 the compiler spills, in some
// dtypes and architectures): tuned for speed, does not affect results.
constexpr int kCheckpointMinBlocks = 4;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

static_assert(32 / kLanes == 2 * kStates,
              "the reduce-scatter leaves each lane one of its warp's 2 x 16 dB/dC sums");
static_assert(kMid % kSub == 0, "sub-chunks do not straddle the middle of the chunk");
static_assert(kFwdSteps % kChunk == 0 && kChunk % 4 == 0, "checkpoints fall on staged steps");

__host__ __device__ constexpr int Align16(int64_t bytes) {
  return static_cast<int>((bytes + 15) / 16 * 16);
}

// Row length of the per (channel, step) f32 scalars staged for kSteps steps: 4 floats of
// padding put the float4 reads of a quarter warp (4 channels) in distinct banks.
template <int kSteps>
inline constexpr int kRow = kSteps + 4;

// ---- placement

struct TileMap {
  int64_t seg = 1;            // channels per segment: no B or C group boundary inside one
  int64_t tiles_per_seg = 1;  // blocks per segment
};

struct Tile {
  int64_t d0;  // the block's first channel
  int64_t b;   // its batch row
  int nch;     // its channels, <= kChannels
};

__device__ __forceinline__ Tile TileOf(const TileMap& m) {
  Tile tile;
  const int64_t seg_idx = blockIdx.x / m.tiles_per_seg, k = blockIdx.x % m.tiles_per_seg;
  tile.d0 = seg_idx * m.seg + k * kChannels;
  tile.b = blockIdx.y;
  const int64_t left = m.seg - k * kChannels;
  tile.nch = static_cast<int>(left < kChannels ? left : kChannels);
  return tile;
}

// The thread's place in the block.
struct Lane {
  int c;     // channel within the block
  int j;     // lane within the channel: states 8j .. 8j + 7
  int lane;  // within the warp: 2 * (channel within the warp) + j
  int warp;
  bool active;  // c < the block's channels
  int64_t d;    // the channel
};

__device__ __forceinline__ Lane LaneOf(const Tile& tile) {
  Lane ln;
  ln.c = threadIdx.x / kLanes;
  ln.j = threadIdx.x % kLanes;
  ln.lane = threadIdx.x % 32;
  ln.warp = threadIdx.x / 32;
  ln.active = ln.c < tile.nch;
  ln.d = tile.d0 + ln.c;
  return ln;
}

// ---- staging

// Stages steps [l0, l0 + kSteps) of kRows rows into dst[r * kSteps + t]: row r starts at
// src + r * row_stride, steps lie time_stride apart. Zeros past the sequence and for rows at or
// past valid_rows. vec (time_stride 1, src and row_stride 16-byte aligned): 16-byte cp.async
// copies, complete at the caller's CopyAsyncWait; otherwise element by element, at once.
template <class T, int kSteps, int kRows>
__device__ __forceinline__ void StageRows(T* dst, const T* src, int64_t row_stride,
                                          int64_t time_stride, int valid_rows, int64_t l0,
                                          int64_t seqlen, bool vec) {
  constexpr int kV = kVec16<T>, kVecs = kSteps / kV, kItems = kRows * kVecs;
  static_assert(kSteps % kV == 0, "a staged row is whole 16-byte vectors");
#pragma unroll
  for (int base = 0; base < kItems; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    if (kItems % kThreads != 0 && i >= kItems) break;
    const int r = i / kVecs, v = i % kVecs;
    const int64_t l = l0 + v * kV;
    T* to = dst + r * kSteps + v * kV;
    const bool row_ok = r < valid_rows;
    const int64_t left = row_ok ? seqlen - l : 0;  // elements of the row from l on
    if (vec && left >= kV) {
      CopyAsync16(to, src + r * row_stride + l, 16);
    } else {
      // A partial or empty vector element by element: a cp.async of fewer than 16 source bytes
      // reads only those, but names 16 (compute-sanitizer's memcheck reported such copies at a
      // row's end as reads past the allocation on an H200, 2026-11-28).
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        to[e] = row_ok && l + e < seqlen ? src[r * row_stride + (l + e) * time_stride]
                                         : FromF32<T>(0.0f);
      }
    }
  }
}

// The block's rows of a (B, D, L) operand.
template <class T, int kSteps>
__device__ __forceinline__ void StageSeq(T* dst, const SeqView& v, const Tile& tile, int64_t l0,
                                         int64_t seqlen, bool vec) {
  const T* src = static_cast<const T*>(v.data) + tile.b * v.stride_batch + tile.d0 * v.stride_dim;
  StageRows<T, kSteps, kChannels>(dst, src, v.stride_dim, 1, tile.nch, l0, seqlen, vec);
}

// The N rows of the block's group of a variable B or C: dst[n * kSteps + t], zeros for n >= N.
template <class T, int kSteps>
__device__ __forceinline__ void StageBC(T* dst, const BCView& v, const SelectiveScanParams& p,
                                        const Tile& tile, int64_t l0, bool vec) {
  const int64_t group = tile.d0 / (p.dim / v.groups);
  const T* src = static_cast<const T*>(v.data) + tile.b * v.stride_batch + group * v.stride_group;
  StageRows<T, kSteps, kMaxState>(dst, src, v.stride_state, v.stride_time,
                                  static_cast<int>(p.dstate), l0, p.seqlen, vec);
}

// Staged B or C rows [n][t] of T -> [t][n] f32, for the per-step reads of 8 consecutive n.
template <class T, int kSteps>
__device__ __forceinline__ void TransposeBC(float* dst, const T* raw) {
  static_assert(kMaxState * kSteps % kThreads == 0, "whole rounds of the block");
  // The thread index read anew (volatile): otherwise the compiler keeps this address from one
  // chunk to the next in a register the reverse kernel does not have, and spills it.
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
#pragma unroll
  for (int base = 0; base < kMaxState * kSteps; base += kThreads) {
    const int i = base + tid, t = i / kMaxState, n = i % kMaxState;
    dst[i] = ToF32(raw[n * kSteps + t]);
  }
}

// dt from x = delta + delta_bias: softplus(x) = log1p(e^x), or x above 20 or without softplus.
__device__ __forceinline__ float TimeStepOf(float x, bool softplus) {
  return softplus ? Softplus(x) : x;
}

// The same dt (the same bits) and d dt / dx = sigmoid(x) = e^x / (1 + e^x) (1 where dt = x),
// from one exponential.
__device__ __forceinline__ void TimeStepAndSlope(float x, bool softplus, float* dt, float* slope) {
  if (!softplus || x > 20.0f) {
    *dt = x;
    *slope = 1.0f;
    return;
  }
  const float e = __expf(x);
  *dt = log1pf(e);
  *slope = __fdividef(e, 1.0f + e);
}

// delta_bias of the lane's channel (0 where absent or idle).
__device__ __forceinline__ float LoadBias(const SelectiveScanParams& p, const Lane& ln) {
  return ln.active && p.delta_bias.data ? p.delta_bias.data[ln.d * p.delta_bias.stride_dim] : 0.0f;
}

// A[d, n] log2(e) of the lane's states (0 for n >= N and idle lanes: those states stay 0).
__device__ __forceinline__ void LoadA2(float (&a2)[kStates], const SelectiveScanParams& p,
                                       const Lane& ln) {
#pragma unroll
  for (int k = 0; k < kStates; ++k) {
    const int64_t n = ln.j * kStates + k;
    a2[k] = ln.active && n < p.dstate
                ? p.A.data[ln.d * p.A.stride_dim + n * p.A.stride_state] * kLog2e
                : 0.0f;
  }
}

// The lane's 8 states of a (B, D, N) view (0 where absent, past N or idle).
__device__ __forceinline__ void LoadStates(float (&h)[kStates], const F32View& v,
                                           const SelectiveScanParams& p, const Lane& ln,
                                           int64_t b) {
#pragma unroll
  for (int k = 0; k < kStates; ++k) {
    const int64_t n = ln.j * kStates + k;
    h[k] = v.data && ln.active && n < p.dstate
               ? v.data[b * v.stride_batch + ln.d * v.stride_dim + n * v.stride_state]
               : 0.0f;
  }
}

// 8 floats from 16-byte aligned shared memory.
__device__ __forceinline__ void Load8(float (&v)[kStates], const float* from) {
  const float4 lo = *reinterpret_cast<const float4*>(from);
  const float4 hi = *reinterpret_cast<const float4*>(from + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
  v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

__device__ __forceinline__ void Load4(float (&v)[4], const float* from) {
  const float4 q = *reinterpret_cast<const float4*>(from);
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}

// One step of the lane's 8 states: h = exp2(dt a2) h + dt u B.
__device__ __forceinline__ void StepStates(float (&h)[kStates], const float (&a2)[kStates],
                                           const float* B_row, float dt, float u) {
  float bv[kStates];
  Load8(bv, B_row);
  const float dtu = dt * u;
#pragma unroll
  for (int k = 0; k < kStates; ++k) h[k] = fmaf(Exp2Ftz(dt * a2[k]), h[k], dtu * bv[k]);
}

// ---- checkpoint kernel

// Shared memory of ScanCheckpointKernel (byte offsets; the host sizes it from kBytes).
template <class T>
struct CheckpointSmem {
  static constexpr int kSeqTile = kChannels * kFwdSteps, kBCTile = kMaxState * kFwdSteps;
  static constexpr int kRawBytes = Align16((2 * kSeqTile + kBCTile) * sizeof(T));  // u, delta, B
  static constexpr int kPrep = kChannels * kRow<kFwdSteps>;  // floats of one scalar array
  static constexpr int kRawOff = 0;                          // 2 buffers
  static constexpr int kDtOff = kRawOff + 2 * kRawBytes;
  static constexpr int kUOff = kDtOff + Align16(kPrep * 4);
  static constexpr int kBOff = kUOff + Align16(kPrep * 4);
  static constexpr int kBytes = kBOff + Align16(kFwdSteps * kMaxState * 4);

  char* base;
  __device__ T* raw_u(int buf) const {
    return reinterpret_cast<T*>(base + kRawOff + buf * kRawBytes);
  }
  __device__ T* raw_delta(int buf) const { return raw_u(buf) + kSeqTile; }
  __device__ T* raw_B(int buf) const { return raw_u(buf) + 2 * kSeqTile; }
  __device__ float* dt() const { return reinterpret_cast<float*>(base + kDtOff); }  // [c][kRow]
  __device__ float* u() const { return reinterpret_cast<float*>(base + kUOff); }    // [c][kRow]
  __device__ float* B() const { return reinterpret_cast<float*>(base + kBOff); }    // [t][16]
};

// Writes checkpoints[((b * nchunks + k) * D + d) * 16 + n] = the state entering step k * kChunk
// (0 for n >= N). Nothing else.
template <class T>
__global__ void __launch_bounds__(kThreads, kCheckpointMinBlocks)
    ScanCheckpointKernel(SelectiveScanParams p, TileMap map, float* __restrict__ checkpoints,
                         int64_t nchunks, bool vec) {
  extern __shared__ float4 smem[];
  const CheckpointSmem<T> s{reinterpret_cast<char*>(smem)};
  constexpr int row = kRow<kFwdSteps>;
  const Tile tile = TileOf(map);
  const Lane ln = LaneOf(tile);
  const float bias = LoadBias(p, ln);
  float a2[kStates], h[kStates];
  LoadA2(a2, p, ln);
  LoadStates(h, p.initial_state, p, ln, tile.b);

  auto stage = [&](int64_t i, int buf) {
    const int64_t l0 = i * kFwdSteps;
    StageSeq<T, kFwdSteps>(s.raw_u(buf), p.u, tile, l0, p.seqlen, vec);
    StageSeq<T, kFwdSteps>(s.raw_delta(buf), p.delta, tile, l0, p.seqlen, vec);
    StageBC<T, kFwdSteps>(s.raw_B(buf), p.B, p, tile, l0, vec);
    CopyAsyncCommit();
  };
  const int64_t stages = (p.seqlen + kFwdSteps - 1) / kFwdSteps;
  stage(0, 0);
  for (int64_t i = 0; i < stages; ++i) {
    const int buf = static_cast<int>(i & 1);
    const int64_t l0 = i * kFwdSteps;
    if (i + 1 < stages) {
      stage(i + 1, buf ^ 1);  // its buffer was last read before the previous iteration's barrier
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();  // stage i landed for every thread; stage i - 1's scalars are consumed
    // Each lane derives half of its channel's steps. dt = 0 past the sequence and the block's
    // channels: those steps leave the state as it is.
#pragma unroll 4
    for (int q = 0; q < kFwdSteps / kLanes; ++q) {
      const int t = ln.j * (kFwdSteps / kLanes) + q, e = ln.c * kFwdSteps + t;
      const bool valid = ln.active && l0 + t < p.seqlen;
      const float x = ToF32(s.raw_delta(buf)[e]) + bias;
      s.dt()[ln.c * row + t] = valid ? TimeStepOf(x, p.delta_softplus) : 0.0f;
      s.u()[ln.c * row + t] = valid ? ToF32(s.raw_u(buf)[e]) : 0.0f;
    }
    TransposeBC<T, kFwdSteps>(s.B(), s.raw_B(buf));
    __syncthreads();
    // Not unrolled over the chunks: unrolled, the compiler takes twice the registers.
#pragma unroll 1
    for (int t0 = 0; t0 < kFwdSteps; t0 += kChunk) {
      if (ln.active && l0 + t0 < p.seqlen) {
        float* to = checkpoints +
                    ((tile.b * nchunks + (l0 + t0) / kChunk) * p.dim + ln.d) * kMaxState +
                    ln.j * kStates;
        *reinterpret_cast<float4*>(to) = make_float4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<float4*>(to + 4) = make_float4(h[4], h[5], h[6], h[7]);
      }
#pragma unroll
      for (int t4 = t0; t4 < t0 + kChunk; t4 += 4) {
        float dt[4], u[4];
        Load4(dt, s.dt() + ln.c * row + t4);
        Load4(u, s.u() + ln.c * row + t4);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          StepStates(h, a2, s.B() + (t4 + q) * kMaxState + ln.j * kStates, dt[q], u[q]);
      }
    }
  }
}

// ---- reverse kernel

// The per (channel, step) scalars of a chunk: 0 dt (then du), 1 u, 2 dy, 3 dout silu'(z) (then
// dz), 4 d dt / d delta (then ddelta). The u row's padding past the chunk holds the channel's
// constants and sums over the sequence, out of registers (as the A record below): D,
// delta_bias, dD so far, ddelta_bias so far.
enum Scalar { kDt = 0, kU = 1, kDy = 2, kZf = 3, kDdx = 4, kScalars = 5 };
enum ChannelSlot { kSkip = kChunk, kBias = kChunk + 1, kDSum = kChunk + 2, kBiasSum = kChunk + 3 };
static_assert(kRow<kChunk> >= kChunk + 4, "the row padding holds the channel's slots");

// Thread-private 8-float records of the reverse kernel: A log2(e) (read where used rather than
// held in 8 registers through the loop: the registers that let 5 blocks share a multiprocessor)
// and the two checkpoint buffers.
enum Record { kA2 = 0, kCk0 = 1 };

// Shared memory of ScanReverseKernel (byte offsets; the host sizes it from kBytes). Layouts keep
// one address register per thread for all its per-thread and per-channel reads (the rest are
// immediate offsets) and a quarter warp's float4 reads in distinct banks.
template <class T>
struct ReverseSmem {
  static constexpr int kSeqTile = kChannels * kChunk, kBCTile = kMaxState * kChunk;
  // u, delta, z, dout, B, C
  static constexpr int kRawBytes = Align16((4 * kSeqTile + 2 * kBCTile) * sizeof(T));
  static constexpr int kRecords = 3;  // A log2(e), checkpoint buffers 0 and 1
  // A channel's scalars: [kScalars][kRow] (60 floats: 4 consecutive channels' float4 reads
  // fall in distinct banks).
  static constexpr int kChanFloats = kScalars * kRow<kChunk>;
  static constexpr int kRedRow =
      kChunk + 1;                    // odd: the per-step writes of 32 slots are distinct banks
  static constexpr int kRawOff = 0;  // 2 buffers
  static constexpr int kRecordOff = kRawOff + 2 * kRawBytes;  // [record][2][thread][4]
  static constexpr int kScalarOff = kRecordOff + kRecords * 2 * kThreads * 16;
  static constexpr int kBCOff = kScalarOff + Align16(kChannels * kChanFloats * 4);
  static constexpr int kRedOff = kBCOff + 2 * Align16(kChunk * kMaxState * 4);
  static constexpr int kBytes = kRedOff + Align16(kWarps * 32 * kRedRow * 4);

  char* base;
  __device__ T* raw(int buf, int i) const {  // i: 0 u, 1 delta, 2 z, 3 dout
    return reinterpret_cast<T*>(base + kRawOff + buf * kRawBytes) + i * kSeqTile;
  }
  __device__ T* raw_bc(int buf, int i) const {  // i: 0 B, 1 C
    return raw(buf, 4) + i * kBCTile;
  }
  // This thread's record r: floats 0-3 here, 4-7 at + kRecordHalf.
  __device__ float* record(int r) const {
    return reinterpret_cast<float*>(base + kRecordOff + r * 2 * kThreads * 16) + threadIdx.x * 4;
  }
  static constexpr int kRecordHalf = kThreads * 4;
  // Channel c's scalar i, [kRow] along the chunk's steps.
  __device__ float* scalar(int c, int i) const {
    return reinterpret_cast<float*>(base + kScalarOff) + c * kChanFloats + i * kRow<kChunk>;
  }
  __device__ float* bc(int i) const {  // [t][16] f32: 0 B, 1 C
    return reinterpret_cast<float*>(base + kBCOff + i * Align16(kChunk * kMaxState * 4));
  }
  // Each warp's channel sums of dB (slots 0-15) and dC (16-31) per step: [warp][slot][kRedRow].
  __device__ float* red() const { return reinterpret_cast<float*>(base + kRedOff); }
};

template <class T>
__device__ __forceinline__ void LoadRecord(float (&v)[kStates], const float* record) {
  const float4 lo = *reinterpret_cast<const float4*>(record);
  const float4 hi = *reinterpret_cast<const float4*>(record + ReverseSmem<T>::kRecordHalf);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
  v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

// Partial sums the reverse kernel writes, reduced afterwards in a fixed order.
struct Partials {
  float* dB = nullptr;           // (channel blocks, B, N, L)
  float* dC = nullptr;           // the same for C
  float* dA = nullptr;           // (B, D, N)
  float* dD = nullptr;           // (B, D)
  float* ddelta_bias = nullptr;  // (B, D)
};

// Levels 2-4 of the reduce-scatter of 16 values over the warp's 16 channels (level 1, over
// lanes 16 apart, pairs value i with value i + 8 as the values are made, leaving 8 in r). Each
// level halves the values a lane holds: it keeps the upper half where its lane bit is set and
// adds the partner's copy of that half. At the end lane (c, j) holds value c of the sum over the
// warp's lanes j: dB of state 8j + c for c < 8, dC of state 8j + c - 8 above.
__device__ __forceinline__ float ReduceScatterRest(float (&r)[kStates], int lane) {
#pragma unroll
  for (int level = 1; level < 4; ++level) {
    const int half = kStates >> level, offset = 16 >> level;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? r[i] : r[i + half];
      const float keep = upper ? r[i + half] : r[i];
      r[i] = keep + __shfl_xor_sync(kFullMask, send, offset);
    }
  }
  return r[0];
}

// One step of the lane's states from the chunk's scalars at step t.
template <class T>
__device__ __forceinline__ void AdvanceStates(float (&h)[kStates], const ReverseSmem<T>& s,
                                              const Lane& ln, int t) {
  float a2[kStates];
  LoadRecord<T>(a2, s.record(kA2));
  StepStates(h, a2, s.bc(0) + t * kMaxState + ln.j * kStates, s.scalar(ln.c, kDt)[t],
             s.scalar(ln.c, kU)[t]);
}

// The adjoint over the chunk's steps [s0, s0 + kSub), from the last: recomputes their states
// from h_in (the state entering step s0), then steps g back through them (see the file comment),
// accumulating dA, writing each step's dB/dC warp sums to red and its du, ddelta, dz over the
// scalars it no longer needs.
template <class T>
__device__ __forceinline__ void ReverseSub(const ReverseSmem<T>& s, const Lane& ln, int s0,
                                           const float (&h_in)[kStates], float (&g)[kStates],
                                           float (&dA)[kStates]) {
  const float* a2_record = s.record(kA2);
  const float* u = s.scalar(ln.c, kU) + s0;
  const float* dy = s.scalar(ln.c, kDy) + s0;
  float dt[kSub];
#pragma unroll
  for (int t = 0; t < kSub; ++t) dt[t] = s.scalar(ln.c, kDt)[s0 + t];
  __syncwarp();  // both lanes of a channel hold dt before lane 0 overwrites it with du

  float hs[kSub][kStates];  // hs[t]: the state after step s0 + t
#pragma unroll
  for (int t = 0; t < kSub; ++t) {
#pragma unroll
    for (int k = 0; k < kStates; ++k) hs[t][k] = t == 0 ? h_in[k] : hs[t - 1][k];
    float a2[kStates];
    LoadRecord<T>(a2, a2_record);
    StepStates(hs[t], a2, s.bc(0) + (s0 + t) * kMaxState + ln.j * kStates, dt[t], u[t]);
  }

  const bool upper16 = (ln.lane & 16) != 0;
  const int cw = ln.lane / kLanes;  // channel within the warp
  const int slot = (cw / kStates) * kMaxState + ln.j * kStates + cw % kStates;
#pragma unroll
  for (int t = kSub - 1; t >= 0; --t) {
    float a2[kStates], bv[kStates], cv[kStates];
    LoadRecord<T>(a2, a2_record);
    Load8(bv, s.bc(0) + (s0 + t) * kMaxState + ln.j * kStates);
    Load8(cv, s.bc(1) + (s0 + t) * kMaxState + ln.j * kStates);
    const float dtu = dt[t] * u[t];
    float sum_gb = 0.0f, sum_wa = 0.0f, y = 0.0f, r[kStates];
#pragma unroll
    for (int k = 0; k < kStates; ++k) {
      const float G = fmaf(dy[t], cv[k], g[k]);  // dLoss/dh_l
      const float w = G * (hs[t][k] - dtu * bv[k]);
      dA[k] = fmaf(w, dt[t], dA[k]);
      sum_wa = fmaf(w, a2[k], sum_wa);
      sum_gb = fmaf(G, bv[k], sum_gb);
      y = fmaf(cv[k], hs[t][k], y);
      const float db = G * dtu, dc = dy[t] * hs[t][k];
      r[k] = (upper16 ? dc : db) + __shfl_xor_sync(kFullMask, upper16 ? db : dc, 16);
      g[k] = G * Exp2Ftz(dt[t] * a2[k]);  // dLoss/dh_{l-1} through this step
    }
    s.red()[(ln.warp * 32 + slot) * ReverseSmem<T>::kRedRow + s0 + t] =
        ReduceScatterRest(r, ln.lane);
    sum_gb += __shfl_xor_sync(kFullMask, sum_gb, 1);
    sum_wa += __shfl_xor_sync(kFullMask, sum_wa, 1);
    y += __shfl_xor_sync(kFullMask, y, 1);
    if (ln.j == 0 && ln.active) {
      const int at = s0 + t;
      const float d_skip = s.scalar(ln.c, kU)[kSkip];
      s.scalar(ln.c, kDt)[at] = fmaf(dt[t], sum_gb, d_skip * dy[t]);  // du
      float* ddx = s.scalar(ln.c, kDdx);
      ddx[at] *= fmaf(u[t], sum_gb, sum_wa * kLn2);      // ddelta = d dt / d delta ddt
      s.scalar(ln.c, kZf)[at] *= fmaf(d_skip, u[t], y);  // dz = dout silu'(z) y
    }
  }
}

// Writes a chunk's (B, D, L) gradient from the channels' scalar `slot`.
template <class T>
__device__ __forceinline__ void StoreSeq(const SeqView& v, const ReverseSmem<T>& s, int slot,
                                         const Tile& tile, int64_t l0, int64_t seqlen, bool vec) {
  if (!v.data) return;
  constexpr int kV = kVec16<T>, kVecs = kChunk / kV;
  static_assert(kChunk % kV == 0, "a chunk's row is whole 16-byte vectors");
  T* base = static_cast<T*>(v.data) + tile.b * v.stride_batch + tile.d0 * v.stride_dim;
  for (int i = threadIdx.x; i < tile.nch * kVecs; i += kThreads) {
    const int c = i / kVecs, vi = i % kVecs;
    const int64_t l = l0 + vi * kV;
    float vals[kV];
#pragma unroll
    for (int q = 0; q < kV; q += 4) {
      const float4 f = *reinterpret_cast<const float4*>(s.scalar(c, slot) + vi * kV + q);
      vals[q] = f.x, vals[q + 1] = f.y, vals[q + 2] = f.z, vals[q + 3] = f.w;
    }
    T* to = base + c * v.stride_dim + l;
    if (vec && l + kV <= seqlen) {
      StoreVec16<T>(to, vals);
    } else {
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        if (l + e < seqlen) to[e] = FromF32<T>(vals[e]);
      }
    }
  }
}

// The gradients of everything from dout and dfinal_state (see the file comment); reads the
// checkpoints ScanCheckpointKernel wrote. vec_in: every staged input 16-byte aligned; vec_out:
// du, ddelta, dz.
template <class T>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    ScanReverseKernel(SelectiveScanBwdParams p, TileMap map, const float* __restrict__ checkpoints,
                      int64_t nchunks, Partials part, bool vec_in, bool vec_out) {
  extern __shared__ float4 smem[];
  const ReverseSmem<T> s{reinterpret_cast<char*>(smem)};
  const Tile tile = TileOf(map);
  const Lane ln = LaneOf(tile);
  float g[kStates], dA[kStates];
  {
    float a2[kStates];
    LoadA2(a2, p, ln);
    float* to = s.record(kA2);  // read back by this thread only
    *reinterpret_cast<float4*>(to) = make_float4(a2[0], a2[1], a2[2], a2[3]);
    *reinterpret_cast<float4*>(to + ReverseSmem<T>::kRecordHalf) =
        make_float4(a2[4], a2[5], a2[6], a2[7]);
  }
  LoadStates(g, p.dfinal_state, p, ln, tile.b);
#pragma unroll
  for (int k = 0; k < kStates; ++k) dA[k] = 0.0f;
  if (ln.j == 0) {  // read after the loop's first barrier
    float* slots = s.scalar(ln.c, kU);
    slots[kSkip] = ln.active && p.D.data ? p.D.data[ln.d * p.D.stride_dim] : 0.0f;
    slots[kBias] = LoadBias(p, ln);
    slots[kDSum] = slots[kBiasSum] = 0.0f;
  }

  auto stage = [&](int64_t k, int buf) {
    const int64_t l0 = k * kChunk;
    StageSeq<T, kChunk>(s.raw(buf, 0), p.u, tile, l0, p.seqlen, vec_in);
    StageSeq<T, kChunk>(s.raw(buf, 1), p.delta, tile, l0, p.seqlen, vec_in);
    if (p.z.data) StageSeq<T, kChunk>(s.raw(buf, 2), p.z, tile, l0, p.seqlen, vec_in);
    StageSeq<T, kChunk>(s.raw(buf, 3), p.dout, tile, l0, p.seqlen, vec_in);
    StageBC<T, kChunk>(s.raw_bc(buf, 0), p.B, p, tile, l0, vec_in);
    StageBC<T, kChunk>(s.raw_bc(buf, 1), p.C, p, tile, l0, vec_in);
    // The thread's 8 states of the checkpoint entering step l0 (the workspace is aligned).
    float* to = s.record(kCk0 + buf);
    const float* from =
        ln.active
            ? checkpoints + ((tile.b * nchunks + k) * p.dim + ln.d) * kMaxState + ln.j * kStates
            : checkpoints;
    CopyAsync16(to, from, ln.active ? 16 : 0);
    CopyAsync16(to + ReverseSmem<T>::kRecordHalf, ln.active ? from + 4 : checkpoints,
                ln.active ? 16 : 0);
    CopyAsyncCommit();
  };

  stage(nchunks - 1, 0);
  for (int64_t k = nchunks - 1; k >= 0; --k) {
    const int buf = static_cast<int>((nchunks - 1 - k) & 1);
    const int64_t l0 = k * kChunk;
    if (k > 0) {
      stage(k - 1, buf ^ 1);  // its buffers were last read before the previous chunk's barriers
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();  // chunk k landed for every thread; chunk k + 1's outputs are stored

    // 1. Per (channel, step) scalars, 0 past the sequence and the block's channels (steps
    // with dt = u = dy = 0 and B = C = 0 leave h and g as they are and add nothing).
    // Each lane derives half of its channel's steps.
#pragma unroll
    for (int q = 0; q < kChunk / kLanes; ++q) {
      const int c = ln.c, t = ln.j * (kChunk / kLanes) + q, e = c * kChunk + t;
      const bool valid = ln.active && l0 + t < p.seqlen;
      const float x = ToF32(s.raw(buf, 1)[e]) + s.scalar(c, kU)[kBias];
      const float dout = ToF32(s.raw(buf, 3)[e]);
      float dy = dout, zf = 0.0f, dt, slope;
      if (p.z.data) {
        // sigmoid(z); 1 / inf = 0 where e^-z overflows, as the limit.
        const float z = ToF32(s.raw(buf, 2)[e]), sig = __fdividef(1.0f, 1.0f + __expf(-z));
        dy = dout * z * sig;                          // dout silu(z)
        zf = dout * sig * (1.0f + z * (1.0f - sig));  // dout silu'(z)
      }
      TimeStepAndSlope(x, p.delta_softplus, &dt, &slope);
      s.scalar(c, kDt)[t] = valid ? dt : 0.0f;
      s.scalar(c, kU)[t] = valid ? ToF32(s.raw(buf, 0)[e]) : 0.0f;
      s.scalar(c, kDy)[t] = valid ? dy : 0.0f;
      s.scalar(c, kZf)[t] = valid ? zf : 0.0f;
      s.scalar(c, kDdx)[t] = valid ? slope : 0.0f;
    }
    TransposeBC<T, kChunk>(s.bc(0), s.raw_bc(buf, 0));
    TransposeBC<T, kChunk>(s.bc(1), s.raw_bc(buf, 1));
    __syncthreads();

    // 2. The state entering the middle of the chunk. 3. The sub-chunks, the last first, each
    // entering state stepped anew from the nearest kept one (the middle, or the checkpoint).
    float h_mid[kStates];
    LoadRecord<T>(h_mid, s.record(kCk0 + buf));
#pragma unroll
    for (int t = 0; t < kMid; ++t) AdvanceStates(h_mid, s, ln, t);
#pragma unroll 1
    for (int s0 = kChunk - kSub; s0 >= 0; s0 -= kSub) {  // unrolled, the sub-chunks spill
      const int from = s0 >= kMid ? kMid : 0;
      float h[kStates];
      LoadRecord<T>(h, s.record(kCk0 + buf));
#pragma unroll
      for (int k = 0; k < kStates; ++k) h[k] = from == kMid ? h_mid[k] : h[k];
#pragma unroll
      for (int r = 0; r < kMid - kSub; ++r) {  // s0 - from steps, uniform over the block
        if (from + r < s0) AdvanceStates(h, s, ln, from + r);
      }
      ReverseSub<T>(s, ln, s0, h, g, dA);
    }
    __syncthreads();

    // du, ddelta, dz, and the block's share of dB / dC: the sum over its warps, in warp order.
    StoreSeq<T>(p.du, s, kDt, tile, l0, p.seqlen, vec_out);
    StoreSeq<T>(p.ddelta, s, kDdx, tile, l0, p.seqlen, vec_out);
    StoreSeq<T>(p.dz, s, kZf, tile, l0, p.seqlen, vec_out);
    if (ln.j == 0) {  // dD += dy u, ddelta_bias += ddelta (both 0 past the sequence)
      float* u = s.scalar(ln.c, kU);  // and the channel's slots past the chunk
      float d_sum = u[kDSum], bias_sum = u[kBiasSum];
#pragma unroll
      for (int t = 0; t < kChunk; ++t) {
        d_sum = fmaf(s.scalar(ln.c, kDy)[t], u[t], d_sum);
        bias_sum += s.scalar(ln.c, kDdx)[t];
      }
      u[kDSum] = d_sum;
      u[kBiasSum] = bias_sum;
    }
    for (int e = threadIdx.x; e < 2 * kMaxState * kChunk; e += kThreads) {
      const int slot = e / kChunk, t = e % kChunk;
      const int n = slot % kMaxState;
      float* dst = slot < kMaxState ? part.dB : part.dC;
      const int64_t l = l0 + t;
      if (!dst || n >= p.dstate || l >= p.seqlen) continue;
      float sum = 0.0f;
      for (int w = 0; w < kWarps; ++w)
        sum += s.red()[(w * 32 + slot) * ReverseSmem<T>::kRedRow + t];
      dst[((blockIdx.x * static_cast<int64_t>(gridDim.y) + tile.b) * p.dstate + n) * p.seqlen + l] =
          sum;
    }
  }

  // Per (b, d) results and partials; g is now the gradient of the initial state.
#pragma unroll
  for (int k = 0; k < kStates; ++k) {
    const int64_t n = ln.j * kStates + k;
    if (!ln.active || n >= p.dstate) continue;
    const F32View& dh0 = p.dinitial_state;
    if (dh0.data)
      dh0.data[tile.b * dh0.stride_batch + ln.d * dh0.stride_dim + n * dh0.stride_state] = g[k];
    if (part.dA) part.dA[(tile.b * p.dim + ln.d) * p.dstate + n] = dA[k];
  }
  if (ln.j == 0 && ln.active) {
    const float* slots = s.scalar(ln.c, kU);  // this thread's writes: no barrier needed
    if (part.dD) part.dD[tile.b * p.dim + ln.d] = slots[kDSum];
    if (part.ddelta_bias) part.ddelta_bias[tile.b * p.dim + ln.d] = slots[kBiasSum];
  }
}

// ---- host

TileMap MakeTileMap(const SelectiveScanParams& p) {
  TileMap m;
  m.seg = std::gcd(std::gcd(p.dim, p.dim / p.B.groups), p.dim / p.C.groups);
  m.tiles_per_seg = CeilDiv(m.seg, kChannels);
  return m;
}

template <class T>
bool SeqAligned(const SeqView& v) {
  return !v.data || Aligned16(v.data, sizeof(T), {v.stride_batch, v.stride_dim});
}

template <class T>
bool BCAligned(const BCView& v) {
  return v.stride_time == 1 &&
         Aligned16(v.data, sizeof(T), {v.stride_batch, v.stride_group, v.stride_state});
}

template <class T>
Status RunParallelBackward(const SelectiveScanBwdParams& p) {
  const TileMap map = MakeTileMap(p);
  const int64_t grid_x = (p.dim / map.seg) * map.tiles_per_seg;
  if (grid_x > 0x7fffffff) {
    return Status::Unsupported(std::string(kOp) + ": too many channel tiles on CUDA");
  }
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.batch));
  const int64_t nchunks = CeilDiv(p.seqlen, kChunk);
  const int64_t bdn = p.batch * p.dim * p.dstate, bd = p.batch * p.dim;
  const int64_t bnl = p.batch * p.dstate * p.seqlen;
  const int64_t ck_size = p.batch * nchunks * p.dim * kMaxState;
  const int64_t dB_size = p.dB.data ? grid_x * bnl : 0, dC_size = p.dC.data ? grid_x * bnl : 0;
  const int64_t total = ck_size + dB_size + dC_size + (p.dA.data ? bdn : 0) +
                        (p.D.data && p.dD.data ? bd : 0) + (p.ddelta_bias.data ? bd : 0);
  Workspace ws;
  SSMKIT_RETURN_IF_ERROR(ws.Allocate(kOp, total * 4));
  FloatCarver pieces(ws.as<float>());
  float* checkpoints = pieces.Take(true, ck_size);  // first: 256-byte aligned, as cp.async needs
  Partials part;
  part.dB = pieces.Take(p.dB.data != nullptr, dB_size);
  part.dC = pieces.Take(p.dC.data != nullptr, dC_size);
  part.dA = pieces.Take(p.dA.data != nullptr, bdn);
  part.dD = pieces.Take(p.D.data && p.dD.data, bd);
  part.ddelta_bias = pieces.Take(p.ddelta_bias.data != nullptr, bd);

  const bool vec_fwd = SeqAligned<T>(p.u) && SeqAligned<T>(p.delta) && BCAligned<T>(p.B);
  const bool vec_in = vec_fwd && SeqAligned<T>(p.z) && SeqAligned<T>(p.dout) && BCAligned<T>(p.C);
  const bool vec_out = SeqAligned<T>(p.du) && SeqAligned<T>(p.ddelta) && SeqAligned<T>(p.dz);

  const int fwd_smem = CheckpointSmem<T>::kBytes;
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ScanCheckpointKernel<T>), fwd_smem));
  ScanCheckpointKernel<T>
      <<<grid, kThreads, fwd_smem, CurrentStream()>>>(p, map, checkpoints, nchunks, vec_fwd);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "ScanCheckpointKernel"));
  const int rev_smem = ReverseSmem<T>::kBytes;
  SSMKIT_RETURN_IF_ERROR(
      AllowSharedMemory(kOp, reinterpret_cast<const void*>(&ScanReverseKernel<T>), rev_smem));
  ScanReverseKernel<T><<<grid, kThreads, rev_smem, CurrentStream()>>>(p, map, checkpoints, nchunks,
                                                                      part, vec_in, vec_out);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(kOp, "ScanReverseKernel"));

  // Fixed-order sums of the partials.
  auto sum_bc = [&](const float* partial, const BCView& in, const BCView& out) -> Status {
    if (!partial) return Status::Ok();
    StridedOut o;
    o.data = out.data;
    o.dtype = out.dtype;
    o.dims[0] = p.batch;
    o.dims[1] = p.dstate;
    o.dims[2] = p.seqlen;
    o.strides[0] = out.stride_batch;
    o.strides[1] = out.stride_state;
    o.strides[2] = out.stride_time;
    return SumGroupedPartials(kOp, partial, in.groups, grid_x / in.groups, out.stride_group, o);
  };
  auto sum_over_batch = [&](const float* partial, float* data, int64_t s_dim, int64_t s_state,
                            int64_t states) -> Status {
    if (!partial) return Status::Ok();
    StridedOut o;
    o.data = data;
    o.dims[1] = p.dim;
    o.dims[2] = states;
    o.strides[1] = s_dim;
    o.strides[2] = s_state;
    return SumPartials(kOp, partial, p.batch, o);
  };
  SSMKIT_RETURN_IF_ERROR(sum_bc(part.dB, p.B, p.dB));
  SSMKIT_RETURN_IF_ERROR(sum_bc(part.dC, p.C, p.dC));
  SSMKIT_RETURN_IF_ERROR(
      sum_over_batch(part.dA, p.dA.data, p.dA.stride_dim, p.dA.stride_state, p.dstate));
  SSMKIT_RETURN_IF_ERROR(sum_over_batch(part.dD, p.dD.data, p.dD.stride_dim, 0, 1));
  return sum_over_batch(part.ddelta_bias, p.ddelta_bias.data, p.ddelta_bias.stride_dim, 0, 1);
}

}  // namespace

bool ScanBackwardParallelApplies(const SelectiveScanBwdParams& p) {
  const DType t = p.u.dtype;
  const bool one_dtype = p.delta.dtype == t && p.dout.dtype == t && p.B.dtype == t &&
                         p.C.dtype == t && (!p.z.data || p.z.dtype == t);
  return p.dstate <= kMaxState && p.B.is_variable && p.C.is_variable && one_dtype &&
         !p.seq_idx.data && !p.cu_seqlens.data && p.batch <= 65535;
}

Status ScanBackwardParallel(const SelectiveScanBwdParams& p) {
  switch (p.u.dtype) {
    case DType::kBF16:
      return RunParallelBackward<__nv_bfloat16>(p);
    case DType::kF16:
      return RunParallelBackward<__half>(p);
    default:
      return RunParallelBackward<float>(p);
  }
}

}  // namespace ssmkit::cuda

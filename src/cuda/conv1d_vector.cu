// Causal conv1d on CUDA, variant "unrolled" (cuda/conv1d_vector.hpp), the default where it
// applies. The math is conv1d.cu's.
//
// The kernels are instantiated for each width K in 2..8, so a window's taps are K
// unconditional FMAs, and silu takes its reciprocal from the special-function unit (rcp.approx,
// 1 ulp) rather than an IEEE division. Their predecessor "vector" read K at run time and
// weighted every window in 8 slots, testing each tap: Nsight Compute found its forward bound by
// instruction issue, not memory (H200, 2026-11-30: SM throughput 76%, DRAM 34%), and at m1-2.8b
// bf16 it took 0.172 ms forward and 0.870 forward + backward against 0.091 and 0.389 here.
//
// A thread handles vectors of 16 bytes of one row (b, d) along L (kVec = 8 bf16 / 4 f32
// positions), kVecThreads apart so that a warp's loads are contiguous, several per thread, all
// loads issued before the first use so that enough bytes are in flight to cover the memory
// latency. The inputs before a vector (kHistory, for the window) and after it (kFuture, for the
// backward's output gradients) are the neighbours' vectors: L1 hits. x and dout are read from
// memory once, in whole sectors, and out and dx written likewise. Rows must be 16-byte aligned
// and there is no seq_idx (the Applies functions); the original kernels run the other calls.
//
// Backward: per vector, g = dout act'(pre) over the vector and the K - 1 positions after it
// (pre recomputed from the window), dx from g, and the thread's dweight / dbias terms summed
// in order, then over the block (BlockSum, fixed order) into one partial per (b, tile).
#include "cuda/conv1d_common.cuh"
#include "cuda/conv1d_vector.hpp"
#include "cuda/typed_io.cuh"

#include <string>
#include <type_traits>

namespace ssmkit::cuda {
namespace {

constexpr int kHistory = 8;      // >= kMaxK - 1 inputs before the vector, a whole number of vectors
constexpr int kVecThreads = 64;  // tuned for speed, no effect on results
constexpr int kVecsPerThread = 4;  // tuned for speed, no effect on results

template <class E>
union Vector16 {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(E));
  uint4 word;
  E v[kVec];
};

// Elements [l, l + kVec) of a row: one vector load when whole, else element by element
// (zeros past `steps`).
template <class E>
__device__ __forceinline__ Vector16<E> LoadVector(const E* row, int64_t l, int steps) {
  Vector16<E> out;
  if (steps == Vector16<E>::kVec) {
    out.word = __ldg(reinterpret_cast<const uint4*>(row + l));
  } else {
#pragma unroll
    for (int i = 0; i < Vector16<E>::kVec; ++i)
      out.v[i] = i < steps ? row[l + i] : FromF32<E>(0.0f);
  }
  return out;
}

// sigmoid(v) with the reciprocal of the special-function unit.
__device__ __forceinline__ float FastSigmoid(float v) {
  return __fdividef(1.0f, 1.0f + __expf(-v));
}
__device__ __forceinline__ float FastSilu(float v) { return v * FastSigmoid(v); }
// d silu(v) / dv = sigmoid(v) (1 + v (1 - sigmoid(v))).
__device__ __forceinline__ float FastSiluGrad(float v) {
  const float s = FastSigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}

// K: the width (p.width).
template <class E, int K>
__global__ void __launch_bounds__(kVecThreads) Conv1dForwardVectorKernel(CausalConv1dParams p) {
  constexpr int kVec = Vector16<E>::kVec;  // outputs per vector
  constexpr int kPrev = kHistory / kVec;   // vectors of history
  const int64_t row = blockIdx.x, b = row / p.dim, d = row % p.dim;
  WriteFinalState(p, b, d);
  const E* x = static_cast<const E*>(p.x.data) + b * p.x.stride_batch + d * p.x.stride_dim;
  E* y = static_cast<E*>(p.out.data) + b * p.out.stride_batch + d * p.out.stride_dim;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kVecThreads * kVecsPerThread;
  // Every load of the thread first.
  Vector16<E> cur[kVecsPerThread], prev[kVecsPerThread][kPrev];
#pragma unroll
  for (int r = 0; r < kVecsPerThread; ++r) {
    const int64_t l = (first + r * kVecThreads + threadIdx.x) * kVec;
    if (l >= p.seqlen) break;
    const int steps = p.seqlen - l < kVec ? static_cast<int>(p.seqlen - l) : kVec;
    cur[r] = LoadVector(x, l, steps);
    if (l >= kHistory) {
#pragma unroll
      for (int q = 0; q < kPrev; ++q) prev[r][q] = LoadVector(x, l - kHistory + q * kVec, kVec);
    }
  }
  // Tap k weights position l + i + k - (K - 1).
  float w[K];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = p.weight.data[d * p.weight.stride_dim + k];
  const float bias = p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f;
#pragma unroll
  for (int r = 0; r < kVecsPerThread; ++r) {
    const int64_t l = (first + r * kVecThreads + threadIdx.x) * kVec;
    if (l >= p.seqlen) break;
    const int steps = p.seqlen - l < kVec ? static_cast<int>(p.seqlen - l) : kVec;
    // win[m]: the input at position l - kHistory + m (initial state or 0 before position 0).
    float win[kHistory + kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) win[kHistory + i] = ToF32(cur[r].v[i]);
    if (l >= kHistory) {
#pragma unroll
      for (int q = 0; q < kPrev; ++q) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) win[q * kVec + i] = ToF32(prev[r][q].v[i]);
      }
    } else {
      // Position l - kHistory + m as xpad index j = position + K - 1 (Xpad reads the initial
      // state for j < K - 1, x after); positions before the initial state are never weighted.
#pragma unroll
      for (int m = 0; m < kHistory; ++m) {
        const int64_t j = l - kHistory + m + K - 1;
        win[m] = j >= 0 ? Xpad(p, b, d, j) : 0.0f;
      }
    }
    Vector16<E> out;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float acc = bias;
#pragma unroll
      for (int k = 0; k < K; ++k) acc += w[k] * win[kHistory + i + k - (K - 1)];
      out.v[i] = FromF32<E>(p.silu ? FastSilu(acc) : acc);
    }
    if (steps == kVec) {
      *reinterpret_cast<uint4*>(y + l) = out.word;
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        if (i < steps) y[l + i] = out.v[i];
      }
    }
  }
}

constexpr int kFuture = 8;            // >= kMaxK - 1 positions after a vector: its g window
constexpr int kBwdVecsPerThread = 2;  // tuned for speed, no effect on results

// partial_w: (B * tiles, D, K), partial_b: (B * tiles, D); part = b * tiles + tile. K: the
// width.
template <class E, int K>
__global__ void __launch_bounds__(kVecThreads)
    Conv1dBackwardVectorKernel(CausalConv1dBwdParams p, float* partial_w, float* partial_b) {
  constexpr int kVec = Vector16<E>::kVec;
  constexpr int kPrev = kHistory / kVec, kNext = kFuture / kVec;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, b = row / p.dim, d = row % p.dim, L = p.seqlen;
  if (p.dinitial_states.data && blockIdx.y == 0 && threadIdx.x < K - 1) {
    const SeqView& h = p.dinitial_states;
    StoreF32(h.data, h.dtype, b * h.stride_batch + d * h.stride_dim + threadIdx.x,
             PaddedGrad(p, b, d, threadIdx.x));
  }
  const E* x = static_cast<const E*>(p.x.data) + b * p.x.stride_batch + d * p.x.stride_dim;
  const E* dout =
      static_cast<const E*>(p.dout.data) + b * p.dout.stride_batch + d * p.dout.stride_dim;
  E* dx = p.dx.data ? static_cast<E*>(p.dx.data) + b * p.dx.stride_batch + d * p.dx.stride_dim
                    : nullptr;
  auto steps_at = [&](int64_t l) {  // positions of the vector at l inside the row
    return l >= L ? 0 : (L - l < kVec ? static_cast<int>(L - l) : kVec);
  };
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kVecThreads * kBwdVecsPerThread;
  // Every load of the thread first: x before, at and after each vector; dout at and after.
  Vector16<E> xs[kBwdVecsPerThread][kPrev + 1 + kNext], gs[kBwdVecsPerThread][1 + kNext];
#pragma unroll
  for (int r = 0; r < kBwdVecsPerThread; ++r) {
    const int64_t l = (first + r * kVecThreads + threadIdx.x) * kVec;
    if (l >= L) break;
    if (l >= kHistory) {
#pragma unroll
      for (int q = 0; q < kPrev; ++q) xs[r][q] = LoadVector(x, l - kHistory + q * kVec, kVec);
    }
#pragma unroll
    for (int q = 0; q <= kNext; ++q) {
      const int64_t lq = l + q * kVec;
      xs[r][kPrev + q] = LoadVector(x, lq, steps_at(lq));
      gs[r][q] = LoadVector(dout, lq, steps_at(lq));
    }
  }
  float w[K];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = p.weight.data[d * p.weight.stride_dim + k];
  const float bias = p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f;
  float dw[K] = {}, db = 0.0f;
#pragma unroll
  for (int r = 0; r < kBwdVecsPerThread; ++r) {
    const int64_t l = (first + r * kVecThreads + threadIdx.x) * kVec;
    if (l >= L) break;
    const int steps = steps_at(l);
    // xw[m]: xpad at position l - kHistory + m (the initial state or 0 before position 0).
    float xw[kHistory + kVec + kFuture];
    if (l >= kHistory) {
#pragma unroll
      for (int q = 0; q < kPrev; ++q) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) xw[q * kVec + i] = ToF32(xs[r][q].v[i]);
      }
    } else {
#pragma unroll
      for (int m = 0; m < kHistory; ++m) {
        const int64_t j = l - kHistory + m + K - 1;
        xw[m] = j >= 0 ? Xpad(p, b, d, j) : 0.0f;
      }
    }
#pragma unroll
    for (int q = 0; q <= kNext; ++q) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) xw[kHistory + q * kVec + i] = ToF32(xs[r][kPrev + q].v[i]);
    }
    // gw[m] = g at position l + m: dout act'(pre), 0 past L (dout loaded as 0 there).
    float gw[kVec + kFuture];
#pragma unroll
    for (int q = 0; q <= kNext; ++q) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int m = q * kVec + i;
        float g = ToF32(gs[r][q].v[i]);
        if (p.silu) {
          float pre = bias;
#pragma unroll
          for (int k = 0; k < K; ++k) pre += w[k] * xw[kHistory + m + k - (K - 1)];
          g *= FastSiluGrad(pre);
        }
        gw[m] = g;
      }
    }
    // dx[l + i] = sum_k w[k] g[l + i + K - 1 - k] (+ dfinal where l + i + K - 1 >= L).
    Vector16<E> out;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) acc += w[k] * gw[i + K - 1 - k];
      const int64_t j = l + i + K - 1;  // the xpad index of position l + i
      if (p.dfinal_states.data && j >= L && i < steps) {
        const SeqView& f = p.dfinal_states;
        acc += LoadF32(f.data, f.dtype, b * f.stride_batch + d * f.stride_dim + j - L);
      }
      out.v[i] = FromF32<E>(acc);
      if (i < steps) {
        db += gw[i];
#pragma unroll
        for (int k = 0; k < K; ++k) dw[k] += gw[i] * xw[kHistory + i + k - (K - 1)];
      }
    }
    if (dx) {
      if (steps == kVec) {
        *reinterpret_cast<uint4*>(dx + l) = out.word;
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          if (i < steps) dx[l + i] = out.v[i];
        }
      }
    }
  }
  if (!partial_w && !partial_b) return;
  const int64_t part = b * gridDim.y + blockIdx.y;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float total = BlockSum(dw[k], scratch);
    if (partial_w && threadIdx.x == 0) partial_w[(part * p.dim + d) * K + k] = total;
  }
  const float total = BlockSum(db, scratch);
  if (partial_b && threadIdx.x == 0) partial_b[part * p.dim + d] = total;
}

bool RowsAligned16(const SeqView& v) {
  return Aligned16(v.data, DTypeSize(v.dtype), {v.stride_batch, v.stride_dim});
}

// The grid of a vector kernel covering vecs_per_block vectors of a row per block.
template <class E>
Status VectorGrid(const CausalConv1dParams& p, int64_t vecs_per_block, dim3* grid) {
  const int64_t per_block = vecs_per_block * (16 / static_cast<int64_t>(sizeof(E)));
  const int64_t rows = p.batch * p.dim, tiles = CeilDiv(p.seqlen, per_block);
  if (rows > 0x7fffffff || tiles > 65535) {
    return Status::Unsupported("causal_conv1d: B * D above 2^31 - 1 or L above " +
                               std::to_string(65535 * per_block) + " on CUDA");
  }
  *grid = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(tiles));
  return Status::Ok();
}

template <class E, int K>
Status LaunchForward(const CausalConv1dParams& p) {
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(VectorGrid<E>(p, int64_t{kVecThreads} * kVecsPerThread, &grid));
  Conv1dForwardVectorKernel<E, K><<<grid, kVecThreads, 0, CurrentStream()>>>(p);
  return CheckLaunch("causal_conv1d", "Conv1dForwardVectorKernel");
}

template <class E, int K>
Status LaunchBackward(const CausalConv1dBwdParams& p, float* partial_w, float* partial_b) {
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(VectorGrid<E>(p, int64_t{kVecThreads} * kBwdVecsPerThread, &grid));
  Conv1dBackwardVectorKernel<E, K>
      <<<grid, kVecThreads, 0, CurrentStream()>>>(p, partial_w, partial_b);
  return CheckLaunch("causal_conv1d", "Conv1dBackwardVectorKernel");
}

// launch(E{}, std::integral_constant<int, width>{}) with K = width tried from kMinConvWidth up:
// every width the op accepts has its kernels instantiated.
template <class E, int K = static_cast<int>(kMinConvWidth), class Launch>
Status WithWidth(int64_t width, const Launch& launch) {
  if constexpr (K > kMaxConvWidth) {
    return Status::Internal("causal_conv1d: width " + std::to_string(width) +
                            " has no CUDA kernel instantiated");
  } else {
    if (width == K) return launch(E{}, std::integral_constant<int, K>{});
    return WithWidth<E, K + 1>(width, launch);
  }
}

// WithWidth for the element type E of `dtype`.
template <class Launch>
Status ForTypeAndWidth(DType dtype, int64_t width, const Launch& launch) {
  switch (dtype) {
    case DType::kBF16:
      return WithWidth<__nv_bfloat16>(width, launch);
    case DType::kF16:
      return WithWidth<__half>(width, launch);
    default:
      return WithWidth<float>(width, launch);
  }
}

}  // namespace

bool Conv1dForwardVectorApplies(const CausalConv1dParams& p) {
  return !p.seq_idx.data && p.out.dtype == p.x.dtype && RowsAligned16(p.x) && RowsAligned16(p.out);
}

Status Conv1dForwardVector(const CausalConv1dParams& p) {
  return ForTypeAndWidth(p.x.dtype, p.width, [&](auto element, auto width) {
    return LaunchForward<decltype(element), decltype(width)::value>(p);
  });
}

bool Conv1dBackwardVectorApplies(const CausalConv1dBwdParams& p) {
  const DType e = p.x.dtype;
  return !p.seq_idx.data && RowsAligned16(p.x) && p.dout.dtype == e && RowsAligned16(p.dout) &&
         (!p.dx.data || (p.dx.dtype == e && RowsAligned16(p.dx)));
}

int64_t Conv1dBackwardVectorTiles(const CausalConv1dBwdParams& p) {
  return CeilDiv(p.seqlen, int64_t{kVecThreads} * kBwdVecsPerThread * (16 / DTypeSize(p.x.dtype)));
}

Status Conv1dBackwardVector(const CausalConv1dBwdParams& p, float* partial_w, float* partial_b) {
  return ForTypeAndWidth(p.x.dtype, p.width, [&](auto element, auto width) {
    return LaunchBackward<decltype(element), decltype(width)::value>(p, partial_w, partial_b);
  });
}

}  // namespace ssmkit::cuda

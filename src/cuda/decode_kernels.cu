// The decode step's embedding gather and greedy argmax on CUDA (cuda/decode_kernels.hpp).
#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/common.cuh"
#include "cuda/decode_kernels.hpp"

namespace ssmkit::cuda {
namespace {

constexpr int kEmbedThreads = 256;
// One block per row of logits; 1024 threads read a 50k-wide row in ~50 coalesced sweeps (tuned
// for speed, does not affect the result).
constexpr int kArgmaxThreads = 1024;

// One block per row; threads stride over the d features.
__global__ void __launch_bounds__(kEmbedThreads) EmbedRowsKernel(EmbedParams p) {
  const int64_t r = blockIdx.x;
  const int32_t id = p.ids[r];
  const bool valid = id >= 0 && id < p.vocab;
  for (int64_t e = threadIdx.x; e < p.d; e += blockDim.x) {
    const float v = valid ? LoadF32(p.table, p.table_dtype, id * p.d + e) : 0.0f;
    StoreF32(p.out, p.out_dtype, r * p.out_stride + e, v);
  }
}

// A candidate (value, index); index -1 is "none yet". Candidate a beats b when it exists and b
// does not, or it is larger, or it is as large with a smaller index: the order the CPU's greedy
// scan gives (first maximum wins).
struct Best {
  float value;
  int32_t index;
};

__device__ __forceinline__ bool Beats(const Best& a, const Best& b) {
  if (a.index < 0) return false;
  if (b.index < 0) return true;
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ __forceinline__ Best WarpBest(Best v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Best other;
    other.value = __shfl_xor_sync(0xffffffffu, v.value, offset);
    other.index = __shfl_xor_sync(0xffffffffu, v.index, offset);
    if (Beats(other, v)) v = other;
  }
  return v;
}

__global__ void __launch_bounds__(kArgmaxThreads) ArgmaxRowsKernel(ArgmaxParams p) {
  __shared__ Best warp_best[32];
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.stride;
  Best best{0.0f, -1};
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x) {
    const float v = row[i];
    // Each thread sees its indices in increasing order, so ">" keeps its first maximum.
    if (!isnan(v) && (best.index < 0 || v > best.value)) best = {v, static_cast<int32_t>(i)};
  }
  best = WarpBest(best);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp != 0) return;
  const int warps = blockDim.x >> 5;
  best = lane < warps ? warp_best[lane] : Best{0.0f, -1};
  best = WarpBest(best);
  if (lane == 0) p.out[blockIdx.x] = best.index < 0 ? 0 : best.index;
}

Status CheckRows(const char* op, int64_t rows) {
  if (rows < 1 || rows > 0x7fffffff) {
    return Status::InvalidArgument(std::string(op) + ": rows: expected 1 to 2^31 - 1, given " +
                                   std::to_string(rows));
  }
  return Status::Ok();
}

}  // namespace

Status EmbedRows(const EmbedParams& p) {
  SSMKIT_RETURN_IF_ERROR(CheckRows("embed_rows", p.rows));
  const int threads = static_cast<int>(std::min<int64_t>(kEmbedThreads, RoundUp(p.d, 32)));
  EmbedRowsKernel<<<static_cast<unsigned>(p.rows), threads, 0, CurrentStream()>>>(p);
  return CheckLaunch("embed_rows", "EmbedRowsKernel");
}

Status ArgmaxRows(const ArgmaxParams& p) {
  SSMKIT_RETURN_IF_ERROR(CheckRows("argmax_rows", p.rows));
  ArgmaxRowsKernel<<<static_cast<unsigned>(p.rows), kArgmaxThreads, 0, CurrentStream()>>>(p);
  return CheckLaunch("argmax_rows", "ArgmaxRowsKernel");
}

}  // namespace ssmkit::cuda

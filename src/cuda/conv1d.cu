// Causal depthwise conv1d on CUDA: forward, backward and the decode update, with the semantics
// of include/ssmkit/conv1d.hpp (causal-conv1d's). The math, with xpad = [initial_states, x]:
//   pre[l] = bias + sum_k w[k] xpad[l + k],  out[l] = act(pre[l]),  final = xpad[L : L+K-1]
//   g[l] = dout[l] act'(pre[l]);  dxpad[j] = sum_k w[k] g[j - k] + dfinal[j - L] (j >= L)
//   dx[l] = dxpad[K-1 + l],  dinitial[i] = dxpad[i],  dw[k] = sum_{b,l} g[l] xpad[l+k]
// With seq_idx every term pairing output l with input j counts only when j is in l's
// sequence (SameSequence), as in the CPU backend and the oracle.
//
// Dimension legend: B batch, D channels, L length, K conv width (2..8), T update steps,
// S conv_state length.
//
// Forward and backward: one block per (row (b, d), tile of kThreads * kPerThread positions);
// each thread computes kPerThread consecutive positions. dweight and dbias are reduced per
// block (fixed order), written as partials per (b, tile), then summed in order (SumPartials).
#include "cuda/backend.hpp"
#include "cuda/conv1d_common.cuh"
#include "cuda/conv1d_vector.hpp"
#include "cuda/variant.hpp"

namespace ssmkit::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kPerThread = 4;  // outputs per thread: tuned for speed, no effect on results
constexpr int kTile = kThreads * kPerThread;

__global__ void __launch_bounds__(kThreads) Conv1dForwardKernel(CausalConv1dParams p) {
  const int64_t row = blockIdx.x, b = row / p.dim, d = row % p.dim;
  const int64_t l0 = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.x * kPerThread;
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t l = l0 + i;
    if (l >= p.seqlen) break;
    const float pre = PreActivation(p, b, d, l);
    StoreF32(p.out.data, p.out.dtype, b * p.out.stride_batch + d * p.out.stride_dim + l,
             p.silu ? Silu(pre) : pre);
  }
  WriteFinalState(p, b, d);
}

// partial_w: (B * tiles, D, K), partial_b: (B * tiles, D); part = b * tiles + tile.
__global__ void __launch_bounds__(kThreads)
    Conv1dBackwardKernel(CausalConv1dBwdParams p, float* partial_w, float* partial_b) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, b = row / p.dim, d = row % p.dim;
  const int64_t l0 = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.x * kPerThread;
  const int64_t k1 = p.width - 1;
  float dw[kMaxK] = {}, db = 0.0f;
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t l = l0 + i;
    if (l >= p.seqlen) break;
    if (p.dx.data) {
      StoreF32(p.dx.data, p.dx.dtype, b * p.dx.stride_batch + d * p.dx.stride_dim + l,
               PaddedGrad(p, b, d, k1 + l));
    }
    if (partial_w || partial_b) {
      const float g = OutGrad(p, b, d, l);
      db += g;
#pragma unroll
      for (int k = 0; k < kMaxK; ++k) {
        if (k < p.width && SameSequence(p, b, l + k, l)) dw[k] += g * Xpad(p, b, d, l + k);
      }
    }
  }
  if (p.dinitial_states.data && blockIdx.y == 0 && threadIdx.x < k1) {
    const SeqView& h = p.dinitial_states;
    StoreF32(h.data, h.dtype, b * h.stride_batch + d * h.stride_dim + threadIdx.x,
             PaddedGrad(p, b, d, threadIdx.x));
  }
  if (!partial_w && !partial_b) return;
  const int64_t part = b * gridDim.y + blockIdx.y;
#pragma unroll
  for (int k = 0; k < kMaxK; ++k) {
    if (k >= p.width) break;
    const float total = BlockSum(dw[k], scratch);
    if (partial_w && threadIdx.x == 0) partial_w[(part * p.dim + d) * p.width + k] = total;
  }
  const float total = BlockSum(db, scratch);
  if (partial_b && threadIdx.x == 0) partial_b[part * p.dim + d] = total;
}

// One thread per row (b, d). The state tail that the outputs need is saved in registers first,
// then the state shifts in place, then the outputs are written from the last step down: out
// may alias x, and out[t] overwrites x[t] only after every window that reads it is done.
__global__ void Conv1dUpdateKernel(CausalConv1dUpdateParams p) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= p.batch * p.dim) return;
  const int64_t b = row / p.dim, d = row % p.dim;
  const int k1 = static_cast<int>(p.width) - 1;
  const int64_t S = p.state_len, T = p.steps;
  float* state = static_cast<float*>(p.conv_state.data) + b * p.conv_state.stride_batch +
                 d * p.conv_state.stride_dim;
  const int64_t x_row = b * p.x.stride_batch + d * p.x.stride_dim;
  float tail[kMaxK - 1];
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) tail[j] = j < k1 ? state[S - k1 + j] : 0.0f;
  // state'[i] = concat(state, x)[T + i].
  for (int64_t i = 0; i < S; ++i) {
    state[i] = i + T < S ? state[i + T] : LoadF32(p.x.data, p.x.dtype, x_row + i + T - S);
  }
  const float* w = p.weight.data + d * p.weight.stride_dim;
  const float bias = p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f;
  for (int64_t t = T - 1; t >= 0; --t) {
    // Window position k reads concat index S + t - k1 + k: the saved tail, then x.
    float acc = bias;
    for (int k = 0; k <= k1; ++k) {
      const int64_t c = t - k1 + k;  // relative to the start of x
      const float v = c >= 0 ? LoadF32(p.x.data, p.x.dtype, x_row + c) : tail[c + k1];
      acc += w[k] * v;
    }
    StoreF32(p.out.data, p.out.dtype, b * p.out.stride_batch + d * p.out.stride_dim + t,
             p.silu ? Silu(acc) : acc);
  }
}

Status TileGrid(const char* op, int64_t rows, int64_t seqlen, dim3* grid) {
  const int64_t tiles = CeilDiv(seqlen, kTile);
  if (rows > 0x7fffffff || tiles > 65535) {
    return Status::Unsupported(std::string(op) + ": B * D above 2^31 - 1 or L above " +
                               std::to_string(65535LL * kTile) + " on CUDA");
  }
  *grid = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(tiles));
  return Status::Ok();
}

}  // namespace

Status CausalConv1dForward(const CausalConv1dParams& p) {
  Variant variant;
  SSMKIT_RETURN_IF_ERROR(PickVariant(kConv1dVariants, &variant));
  const bool vector = variant.index == 1 && Conv1dForwardVectorApplies(p);
  if (variant.index == 1 && !vector && variant.required)
    return VariantDoesNotApply(kConv1dVariants, variant.index);
  if (vector) return Conv1dForwardVector(p);
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(TileGrid("causal_conv1d", p.batch * p.dim, p.seqlen, &grid));
  Conv1dForwardKernel<<<grid, kThreads, 0, CurrentStream()>>>(p);
  return CheckLaunch("causal_conv1d", "Conv1dForwardKernel");
}

Status CausalConv1dBackward(const CausalConv1dBwdParams& p) {
  const char* op = "causal_conv1d";
  Variant variant;
  SSMKIT_RETURN_IF_ERROR(PickVariant(kConv1dBackwardVariants, &variant));
  const bool vector = variant.index == 1 && Conv1dBackwardVectorApplies(p);
  if (variant.index == 1 && !vector && variant.required)
    return VariantDoesNotApply(kConv1dBackwardVariants, variant.index);
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(TileGrid(op, p.batch * p.dim, p.seqlen, &grid));
  const int64_t tiles = vector ? Conv1dBackwardVectorTiles(p) : grid.y;
  const int64_t parts = p.batch * tiles;
  const int64_t w_count = p.dim * p.width;
  Workspace partial;
  const bool want_w = p.dweight.data != nullptr, want_b = p.dbias.data != nullptr;
  if (want_w || want_b) SSMKIT_RETURN_IF_ERROR(partial.Allocate(op, parts * (w_count + p.dim) * 4));
  float* partial_w = want_w ? partial.as<float>() : nullptr;
  float* partial_b = want_b ? partial.as<float>() + parts * w_count : nullptr;
  if (vector) {
    SSMKIT_RETURN_IF_ERROR(Conv1dBackwardVector(p, partial_w, partial_b));
  } else {
    Conv1dBackwardKernel<<<grid, kThreads, 0, CurrentStream()>>>(p, partial_w, partial_b);
    SSMKIT_RETURN_IF_ERROR(CheckLaunch(op, "Conv1dBackwardKernel"));
  }
  if (want_w) {
    StridedOut out;
    out.data = p.dweight.data;
    out.dims[1] = p.dim;
    out.dims[2] = p.width;
    out.strides[1] = p.dweight.stride_dim;
    out.strides[2] = 1;
    SSMKIT_RETURN_IF_ERROR(SumPartials(op, partial_w, parts, out));
  }
  if (want_b) {
    StridedOut out;
    out.data = p.dbias.data;
    out.dims[2] = p.dim;
    out.strides[2] = p.dbias.stride_dim;
    SSMKIT_RETURN_IF_ERROR(SumPartials(op, partial_b, parts, out));
  }
  return Status::Ok();
}

Status CausalConv1dUpdate(const CausalConv1dUpdateParams& p) {
  const int threads = 128;
  const int64_t blocks = CeilDiv(p.batch * p.dim, threads);
  if (blocks > 0x7fffffff)
    return Status::Unsupported("causal_conv1d_update: B * D too large on CUDA");
  Conv1dUpdateKernel<<<static_cast<unsigned>(blocks), threads, 0, CurrentStream()>>>(p);
  return CheckLaunch("causal_conv1d_update", "Conv1dUpdateKernel");
}

}  // namespace ssmkit::cuda

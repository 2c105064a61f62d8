// RMS norms on CUDA: gated RMSNorm and residual add + RMSNorm, forward and backward, with the
// semantics of include/ssmkit/norm.hpp (one NormParams serves both, as on the CPU).
//
// Dimension legend: M rows, E features, S group size (G = E / S groups per row).
//
// Forward: one block per (group, row); the block reduces the group's sum of squares, then
// writes the normalised values. Backward: one block per (group, tile of kRowsPerBlock rows)
// walks its rows in order; each thread owns a fixed set of features, so it accumulates their
// dweight/dbias terms over the tile's rows alone, into a per-tile partial row. SumPartials adds
// the tiles in order: deterministic, no float atomics.
#include "cuda/backend.hpp"
#include "cuda/common.cuh"

namespace ssmkit::cuda {
namespace {

constexpr int kThreads = 256;
// Rows per backward block (tuned for speed, does not affect the result): fewer rows give more
// blocks but a larger partial buffer of M / kRowsPerBlock rows.
constexpr int kRowsPerBlock = 16;

// The input of the normalisation at (m, e): x, x * silu(z) (gate before), or x + residual.
__device__ __forceinline__ float NormInput(const NormParams& p, int64_t m, int64_t e) {
  float v = LoadF32(p.x.data, p.x.dtype, m * p.x.stride_row + e);
  if (p.residual.data)
    v += static_cast<const float*>(p.residual.data)[m * p.residual.stride_row + e];
  if (p.z.data && !p.norm_before_gate)
    v *= Silu(LoadF32(p.z.data, p.z.dtype, m * p.z.stride_row + e));
  return v;
}

// rstd of group [e0, e0 + S) of row m; every thread of the block gets it.
__device__ float GroupRstd(const NormParams& p, int64_t m, int64_t e0, float* scratch) {
  float sumsq = 0.0f;
  for (int64_t e = e0 + threadIdx.x; e < e0 + p.group_size; e += blockDim.x) {
    const float v = NormInput(p, m, e);
    sumsq += v * v;
  }
  const float total = BlockSum(sumsq, scratch);
  return rsqrtf(total / static_cast<float>(p.group_size) + p.eps);
}

__global__ void __launch_bounds__(kThreads) RmsNormForwardKernel(NormParams p) {
  __shared__ float scratch[32];
  const int64_t m = blockIdx.x, e0 = static_cast<int64_t>(blockIdx.y) * p.group_size;
  const float rstd = GroupRstd(p, m, e0, scratch);
  const bool gate_after = p.z.data && p.norm_before_gate;
  for (int64_t e = e0 + threadIdx.x; e < e0 + p.group_size; e += blockDim.x) {
    const float v = NormInput(p, m, e);
    if (p.residual_out.data)
      static_cast<float*>(p.residual_out.data)[m * p.residual_out.stride_row + e] = v;
    float y = v * rstd * p.weight[e] + (p.bias ? p.bias[e] : 0.0f);
    if (gate_after) y *= Silu(LoadF32(p.z.data, p.z.dtype, m * p.z.stride_row + e));
    StoreF32(p.out.data, p.out.dtype, m * p.out.stride_row + e, y);
  }
}

// partial_w, partial_b: (M tiles, E) f32, this block's tile row written (not accumulated).
__global__ void __launch_bounds__(kThreads)
    RmsNormBackwardKernel(NormBwdParams p, float* partial_w, float* partial_b) {
  __shared__ float scratch[32];
  const int64_t e0 = static_cast<int64_t>(blockIdx.y) * p.group_size;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t m1 = m0 + kRowsPerBlock < p.rows ? m0 + kRowsPerBlock : p.rows;
  const bool gate_after = p.z.data && p.norm_before_gate;
  const bool gate_before = p.z.data && !p.norm_before_gate;
  const float inv_s = 1.0f / static_cast<float>(p.group_size);
  for (int64_t m = m0; m < m1; ++m) {
    const float rstd = GroupRstd(p, m, e0, scratch);
    // dot = sum_e dy * w * xhat over the group, dy the gradient reaching y = xhat * w + b.
    float dot = 0.0f;
    for (int64_t e = e0 + threadIdx.x; e < e0 + p.group_size; e += blockDim.x) {
      const float xhat = NormInput(p, m, e) * rstd;
      float dy = LoadF32(p.dout.data, p.dout.dtype, m * p.dout.stride_row + e);
      if (gate_after) dy *= Silu(LoadF32(p.z.data, p.z.dtype, m * p.z.stride_row + e));
      dot += dy * p.weight[e] * xhat;
    }
    const float mean_dot = BlockSum(dot, scratch) * inv_s;
    for (int64_t e = e0 + threadIdx.x; e < e0 + p.group_size; e += blockDim.x) {
      const float xs = NormInput(p, m, e), xhat = xs * rstd;
      const float dout = LoadF32(p.dout.data, p.dout.dtype, m * p.dout.stride_row + e);
      float dy = dout;
      float zv = 0.0f;
      if (p.z.data) zv = LoadF32(p.z.data, p.z.dtype, m * p.z.stride_row + e);
      if (gate_after) {
        dy = dout * Silu(zv);
        if (p.dz.data) {
          const float y = xhat * p.weight[e] + (p.bias ? p.bias[e] : 0.0f);
          StoreF32(p.dz.data, p.dz.dtype, m * p.dz.stride_row + e, dout * y * SiluGrad(zv));
        }
      }
      const float dxs = rstd * (dy * p.weight[e] - xhat * mean_dot);
      float dx = dxs;
      if (gate_before) {
        const float x = LoadF32(p.x.data, p.x.dtype, m * p.x.stride_row + e);
        dx = dxs * Silu(zv);
        if (p.dz.data)
          StoreF32(p.dz.data, p.dz.dtype, m * p.dz.stride_row + e, dxs * x * SiluGrad(zv));
      }
      if (p.dresidual_out.data) {
        dx += static_cast<const float*>(p.dresidual_out.data)[m * p.dresidual_out.stride_row + e];
      }
      if (p.dx.data) StoreF32(p.dx.data, p.dx.dtype, m * p.dx.stride_row + e, dx);
      if (p.dresidual.data)
        static_cast<float*>(p.dresidual.data)[m * p.dresidual.stride_row + e] = dx;
      const int64_t slot = static_cast<int64_t>(blockIdx.x) * p.features + e;
      if (partial_w) partial_w[slot] = (m == m0 ? 0.0f : partial_w[slot]) + dy * xhat;
      if (partial_b) partial_b[slot] = (m == m0 ? 0.0f : partial_b[slot]) + dy;
    }
  }
}

// Rows (or row tiles) on grid x (up to 2^31 - 1), groups on grid y (up to 65535).
Status Grid(const char* op, int64_t row_blocks, int64_t groups, dim3* grid) {
  if (groups > 65535 || row_blocks > 0x7fffffff) {
    return Status::Unsupported(std::string(op) +
                               ": more than 65535 groups or 2^31 row blocks on CUDA");
  }
  *grid = dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(groups));
  return Status::Ok();
}

int ThreadsFor(int64_t group_size) {
  return static_cast<int>(std::min<int64_t>(kThreads, RoundUp(group_size, 32)));
}

}  // namespace

Status RmsNormForward(const char* op, const NormParams& p) {
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(Grid(op, p.rows, p.features / p.group_size, &grid));
  RmsNormForwardKernel<<<grid, ThreadsFor(p.group_size), 0, CurrentStream()>>>(p);
  return CheckLaunch(op, "RmsNormForwardKernel");
}

Status RmsNormBackward(const char* op, const NormBwdParams& p) {
  const int64_t tiles = CeilDiv(p.rows, kRowsPerBlock);
  dim3 grid;
  SSMKIT_RETURN_IF_ERROR(Grid(op, tiles, p.features / p.group_size, &grid));
  Workspace partial;
  const bool want_w = p.dweight != nullptr, want_b = p.dbias != nullptr;
  const int64_t slab = tiles * p.features;
  if (want_w || want_b) SSMKIT_RETURN_IF_ERROR(partial.Allocate(op, 2 * slab * 4));
  float* partial_w = want_w ? partial.as<float>() : nullptr;
  float* partial_b = want_b ? partial.as<float>() + slab : nullptr;
  RmsNormBackwardKernel<<<grid, ThreadsFor(p.group_size), 0, CurrentStream()>>>(p, partial_w,
                                                                                partial_b);
  SSMKIT_RETURN_IF_ERROR(CheckLaunch(op, "RmsNormBackwardKernel"));
  StridedOut out;
  out.dims[2] = p.features;
  out.strides[2] = 1;
  out.data = p.dweight;
  if (want_w) SSMKIT_RETURN_IF_ERROR(SumPartials(op, partial_w, tiles, out));
  out.data = p.dbias;
  if (want_b) SSMKIT_RETURN_IF_ERROR(SumPartials(op, partial_b, tiles, out));
  return Status::Ok();
}

}  // namespace ssmkit::cuda

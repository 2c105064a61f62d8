// selective_state_update on CUDA: one decode step in place on the state, both model families
// in the one (B, H, P, N) layout of StateUpdateParams (Mamba-1 is H = D heads of P = 1 with A
// per state element). Semantics: include/ssmkit/state_update.hpp.
//
// Dimension legend: B batch, Bs the state's batch, H heads, P head dim, N state size,
// G groups of B/C.
//
// Each (b, h, p) row is served by `tpr` lanes of one warp (tpr = N rounded up to a power of
// two, at most 32), lane j holding states n = j, j + tpr, ...: the state row is read and
// written coalesced, and y = C . h is a butterfly sum over the row's lanes.
//
// Differences from the CPU path: state_batch_indices are not read on the host (that would
// synchronise every step); a row whose index is negative or >= Bs is skipped, and distinct
// indices are the caller's promise.
#include "cuda/backend.hpp"
#include "cuda/common.cuh"

namespace ssmkit::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) StateUpdateKernel(StateUpdateParams p, int tpr) {
  const int lane_in_row = threadIdx.x % tpr;
  const int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / tpr;
  const int64_t rows = p.batch * p.heads * p.headdim;
  // Rows past the end still take part in the shuffles below, with nothing to add.
  const bool active = row < rows;
  const int64_t r = active ? row : 0;
  const int64_t pp = r % p.headdim, h = (r / p.headdim) % p.heads, b = r / (p.headdim * p.heads);
  int64_t s = b;
  if (p.state_batch_indices) s = p.state_batch_indices[b * p.indices_stride];
  const bool run = active && s >= 0 && s < p.state_batch;

  float y = 0.0f, x = 0.0f;
  if (run) {
    float dt = LoadF32(p.dt.data, p.dt.dtype, b * p.dt.stride_batch + h * p.dt.stride_head);
    if (p.dt_bias.data) dt += p.dt_bias.data[h * p.dt_bias.stride_head];
    if (p.dt_softplus) dt = Softplus(dt);
    x = LoadF32(p.x.data, p.x.dtype, b * p.x.stride_batch + h * p.x.stride_head + pp);
    // Head h reads group h / (H / G) (HeadGroup, a host function).
    const int64_t b_off = b * p.B.stride_batch + h / (p.heads / p.B.groups) * p.B.stride_group;
    const int64_t c_off = b * p.C.stride_batch + h / (p.heads / p.C.groups) * p.C.stride_group;
    float* state =
        p.state + s * p.state_stride_batch + h * p.state_stride_head + pp * p.state_stride_p;
    const float* A = p.A.data + h * p.A.stride_head;
    for (int64_t n = lane_in_row; n < p.dstate; n += tpr) {
      const float decay = __expf(dt * A[n * p.A.stride_inner]);
      const float hv = decay * state[n] + dt * LoadF32(p.B.data, p.B.dtype, b_off + n) * x;
      state[n] = hv;
      y += LoadF32(p.C.data, p.C.dtype, c_off + n) * hv;
    }
  }
  for (int offset = tpr / 2; offset > 0; offset >>= 1) y += __shfl_xor_sync(0xffffffffu, y, offset);
  if (!run || lane_in_row != 0) return;
  if (p.D.data) y += p.D.data[h * p.D.stride_head + pp * p.D.stride_inner] * x;
  if (p.z.data)
    y *= Silu(LoadF32(p.z.data, p.z.dtype, b * p.z.stride_batch + h * p.z.stride_head + pp));
  StoreF32(p.out.data, p.out.dtype, b * p.out.stride_batch + h * p.out.stride_head + pp, y);
}

}  // namespace

Status SelectiveStateUpdate(const StateUpdateParams& p) {
  int tpr = 1;
  while (tpr < p.dstate && tpr < 32) tpr *= 2;
  const int64_t blocks = CeilDiv(p.batch * p.heads * p.headdim * tpr, kThreads);
  if (blocks > 0x7fffffff)
    return Status::Unsupported("selective_state_update: too many rows on CUDA");
  StateUpdateKernel<<<static_cast<unsigned>(blocks), kThreads, 0, CurrentStream()>>>(p, tpr);
  return CheckLaunch("selective_state_update", "StateUpdateKernel");
}

}  // namespace ssmkit::cuda

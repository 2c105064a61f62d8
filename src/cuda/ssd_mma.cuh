// The SSD `mma` variant (SSMKIT_CUDA_SSD=mma; docs/cuda.md): what its three files share.
//
//   ssd_mma_state.cu     chunk times (dt, cumulative log-decay) and the state recurrence over
//                        chunks, forward (H_{c-1} per chunk) and reverse (G_c per chunk)
//   ssd_mma.cu           the forward's chunk outputs, the variant's checks, SsdForwardMma
//   ssd_mma_backward.cu  the backward's chunk gradients, SsdBackwardMma
//
// Within a chunk of Q positions t (global l = l0 + t), with cs[t] = sum_{t' <= t} dt_t' A (no
// resets: seq_idx runs the verified kernel), decay from s to t = exp(cs[t] - cs[s]) (s <= t),
// co[t] = exp(cs[t]), w[s] = exp(cs[Q-1] - cs[s]), decay_c = exp(cs[Q-1]). Positions past L
// have dt = 0, so cs stays flat there and the chunk's last row stands for its last position.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk.
#pragma once

#include "cuda/ssd_mma_tiles.cuh"
#include "cuda/variant.hpp"
#include "params/ssd_params.hpp"

namespace ssmkit::cuda {

// The shape the variant is compiled for: chunk length Q (tuned for speed, does not affect
// results), head dim P and state size N (the Mamba-2 checkpoints' 64 and 128). Other P and N
// run the verified kernel.
struct MmaShape64x128 {
  static constexpr int Q = 64, P = 64, N = 128;
};
using MmaShape = MmaShape64x128;

// Heads of one group a chunk-kernel block runs in turn (tuned for speed, does not affect
// results): B and C and C B^T are loaded or computed once per block for all of them.
constexpr int kMmaHeadsPerBlock = 8;

struct MmaLayout {
  int64_t nchunks = 0, Lpad = 0;  // chunks of Q; nchunks * Q
  int heads_per_block = 1;        // heads of one group per chunk-kernel block
  int slices = 1;                 // ceil((H / G) / heads_per_block) blocks per (b, c, g)
};

// Per-position time quantities, each (B, H, Lpad) f32: element (b, h, l) at (b H + h) Lpad + l.
struct MmaTimes {
  float* dt = nullptr;    // dt after bias, softplus and clamp; 0 past L
  float* cs = nullptr;    // inclusive cumulative sum of dt A within the chunk
  float* mask = nullptr;  // d dt / d dt_in; 0 where clamped and past L
};

__host__ __device__ inline int64_t MmaTimesRow(const SsdParams& p, const MmaLayout& lay, int64_t b,
                                               int64_t h) {
  return (b * p.nheads + h) * lay.Lpad;
}

// Positions of the chunk starting at l0 that exist: min(Q, L - l0).
__device__ __forceinline__ int MmaChunkLength(const SsdParams& p, int64_t l0, int Q) {
  const int64_t left = p.seqlen - l0;
  return left < Q ? static_cast<int>(left) : Q;
}

// The place of a chunk kernel's block (grid x: chunk c; y: (b, g, slice)): its chunk, batch
// row, group, slice, and the heads of its slice of the group, [h_first, h_first + h_count).
struct MmaBlockPlace {
  int64_t c, b, g, slice, h_first, h_count, l0;
  int qc;  // steps in the chunk
  __device__ MmaBlockPlace(const SsdParams& p, const MmaLayout& lay, int Q) {
    c = blockIdx.x;
    slice = blockIdx.y % lay.slices;
    const int64_t bg = blockIdx.y / lay.slices;
    g = bg % p.ngroups;
    b = bg / p.ngroups;
    const int64_t per_group = p.nheads / p.ngroups;
    h_first = g * per_group + slice * lay.heads_per_block;
    const int64_t h_left = per_group - slice * lay.heads_per_block;
    h_count = h_left < lay.heads_per_block ? h_left : lay.heads_per_block;
    l0 = c * Q;
    qc = MmaChunkLength(p, l0, Q);
  }
};

// Offset of the (P x N) bf16 block of (b, c, h) in a (B, nchunks, H, P, N) states workspace.
__host__ __device__ inline int64_t MmaStateBlock(const SsdParams& p, const MmaLayout& lay,
                                                 int64_t b, int64_t c, int64_t h) {
  return ((b * lay.nchunks + c) * p.nheads + h) * p.headdim * p.dstate;
}

// One direction of the state recurrence over chunks, per (b, h):
//   forward: H_c = decay_c H_{c-1} + (w dt X_c)^T B_c, writes H_{c-1} per chunk, starts at h0
//   reverse: G_{c-1} = decay_c G_c + (co dY_c)^T C_c, writes G_c per chunk, starts at dfinal
// with dY = dout silu(z) (dout without z).
struct RecurrenceArgs {
  bool reverse = false;
  SsdSeqView u;       // (B, L, H, P): x, or dout
  SsdSeqView gate;    // (B, L, H, P): z for dY (reverse only); absent: no gate
  SsdSeqView v;       // (B, L, G, N): B, or C
  SsdStateView init;  // (B, H, P, N): h0, or dfinal; absent: zeros
  SsdStateView last;  // (B, H, P, N): final_states, or dh0; absent: not written
};

// True when the variant runs this call: bf16 x, B, C (and dout), no seq_idx, a compiled
// (P, N), 16-byte aligned rows. Everything else runs the verified kernel.
bool MmaTakes(const SsdParams& p, const SsdSeqView* dout);

// The layout of a call MmaTakes accepted; *fits = false (and Ok) when the grid or the
// device's shared memory (smem_bytes per block for the largest kernel) cannot hold it, so the
// verified kernel runs instead.
Status PlanMma(const SsdParams& p, int smem_bytes, MmaLayout* lay, bool* fits);

Status LaunchMmaTimes(const SsdParams& p, const MmaLayout& lay, const MmaTimes& times);

// Writes the recurrence's per-chunk states (bf16) into `states` (B, nchunks, H, P, N).
Status LaunchMmaRecurrence(const SsdParams& p, const MmaLayout& lay, const MmaTimes& times,
                           const RecurrenceArgs& args, bf16* states);

// The variant SSMKIT_CUDA_SSD picks (index 1: mma; an unknown name is an InvalidArgument).
Status SsdPicksMma(Variant* variant);

// Run the call when MmaTakes and PlanMma accept it; *handled = false otherwise (nothing ran).
Status SsdForwardMma(const SsdParams& p, bool* handled);
Status SsdBackwardMma(const SsdBwdParams& p, bool* handled);

}  // namespace ssmkit::cuda

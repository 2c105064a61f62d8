// Pieces shared by the CPU SSD kernels (sequential and chunked): B/C packing, the per-head dt
// row, sequence resets, the work split over (batch, group, head block) and the fixed-order
// reductions that keep the backward deterministic.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to a multiple of 16 (the widest vector), Q chunk length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/round_up.hpp"
#include "params/ssd_params.hpp"

namespace ssmkit::cpu::ssd {

// ssd_sequential_forward.cpp and ssd_sequential_backward.cpp name it as ssd::RoundUp.
using ssmkit::RoundUp;

// B or C as f32 rows of Nn floats (zero beyond N): row (b, g, l) starts at
// base + (b * G + g) * stride_bg + l * ld. Either the caller's tensor itself (f32 with
// N % 16 == 0: no copy) or a packed copy (B, G, L, Nn).
struct PackedBC {
  std::vector<float> storage;  // (B, G, L, Nn) when packed, else empty
  const float* base = nullptr;
  int64_t stride_b = 0, stride_g = 0, ld = 0;
  const float* Row(int64_t b, int64_t g, int64_t l) const {
    return base + b * stride_b + g * stride_g + l * ld;
  }
};

// Fills `out` from `view` (B, L, G, N) (packing in parallel when needed).
void PackBC(const SsdParams& p, const SsdSeqView& view, PackedBC* out);

// True when a new sequence starts at position l of batch row b (never at l = 0).
inline bool ResetAt(const SsdParams& p, int64_t b, int64_t l) {
  if (p.seq_idx == nullptr || l == 0) return false;
  const int32_t* row = p.seq_idx + b * p.seq_idx_stride_batch;
  return row[l * p.seq_idx_stride_seq] != row[(l - 1) * p.seq_idx_stride_seq];
}

// The dt row of (b, h) over positions [l0, l0 + count): dt after bias, softplus and clamp,
// optionally d dt / d dt_in (0 where clamped) and the decay exp(dt * A[h]).
// Highway-dispatched (ssd_prep.cpp).
void DtRow(const SsdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count, float* dt,
           float* dt_grad, float* decay);

// out[t*P + p] (or at ld stride) = (y_scale[t] y + D x) * silu(z) for one (b, h) over
// `count` positions, written in out's dtype. y: (count, ld_y) f32; y_scale: (count) or null
// (1). Highway-dispatched (ssd_prep.cpp).
void StoreOutput(const SsdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count,
                 const float* y, int64_t ld_y, const float* y_scale = nullptr);

// dy = dout * silu(z) (dout where z is absent) for (b, h) over `count` positions, times
// scale[t] when scale is given, as f32 rows (count, ld_dst): P values, then zeros up to
// `width` (>= P).
void LoadDy(const SsdBwdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count,
            const float* scale, float* dst, int64_t ld_dst, int64_t width);

// dz = dout * y * silu'(z) for (b, h) over `count` positions, y (count, ld_y) the pre-gate
// output (with D x), written in dz's dtype.
void StoreDz(const SsdBwdParams& p, int64_t b, int64_t h, int64_t l0, int64_t count, const float* y,
             int64_t ld_y);

// x[b, l0 + t, h, :] * scale[t] as f32 rows (count, ld_dst): P values, then zeros up to
// `width` (>= P). scale may be null (1).
void LoadScaledX(const SsdSeqView& x, int64_t headdim, int64_t b, int64_t h, int64_t l0,
                 int64_t count, const float* scale, float* dst, int64_t ld_dst, int64_t width);

// Asks the cache for rows [l0, l0 + count) of head (or group) k of a (B, L, K, M) operand,
// M elements each: the kernels walk one head down L, rows K*M elements apart, which the
// hardware prefetchers do not follow. No-op for an absent view or past L. Into L2, not L1:
// the rows are read a head later, after tiles whose B and C lines fill L1 (on an Intel Xeon,
// m2-130m sequential forward and backward 1.6-1.9% faster on AVX-512, 0.3-1.3% on AVX2,
// one process alternating both).
inline void PrefetchRows(const SsdSeqView& v, int64_t width, int64_t seqlen, int64_t b, int64_t k,
                         int64_t l0, int64_t count) {
  if (!v.data) return;
  const int64_t elem = DTypeSize(v.dtype), bytes = width * elem;
  const char* base = static_cast<const char*>(v.data);
  for (int64_t l = l0; l < std::min(seqlen, l0 + count); ++l) {
    // Every line the row touches: a row need not start on a line (a malloc'd tensor starts
    // 16 bytes past a page), and then it spans one line more than bytes / 64.
    const uintptr_t row = reinterpret_cast<uintptr_t>(base + v.Offset(b, l, k) * elem);
    for (uintptr_t line = row & ~uintptr_t{63}; line < row + bytes; line += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(line), /*rw=*/0, /*locality=*/2);
    }
  }
}

// The work split shared by the backward of both algorithms (ssd_backward_driver.hpp) and the
// chunked forward:
// tasks are (b, g, head block), heads of a group cut into `blocks` contiguous runs, so that
// a per-group sum (dB, dC) has one partial per task, added in task order.
struct TaskSplit {
  int64_t batch = 0, ngroups = 0, heads_per_group = 0, blocks = 1;
  int64_t count() const { return batch * ngroups * blocks; }
  void Decode(int64_t task, int64_t* b, int64_t* g, int64_t* h_begin, int64_t* h_end) const {
    const int64_t blk = task % blocks, bg = task / blocks;
    *b = bg / ngroups;
    *g = bg % ngroups;
    *h_begin = *g * heads_per_group + heads_per_group * blk / blocks;
    *h_end = *g * heads_per_group + heads_per_group * (blk + 1) / blocks;
  }
};

// Cuts heads only as far as needed to give every thread work.
TaskSplit MakeTaskSplit(const SsdParams& p);

// Packed sequences by cu_seqlens, one by one through `algorithm` (ssd_varlen.cpp).
void VarlenForward(const SsdParams& p, SsdAlgorithm algorithm);
void VarlenBackward(const SsdBwdParams& p, SsdAlgorithm algorithm);

// The two algorithms (ssd_sequential_forward.cpp, ssd_sequential_backward.cpp, ssd_chunked.cpp,
// ssd_chunked_backward.cpp).
void SequentialForward(const SsdParams& p);
void SequentialBackward(const SsdBwdParams& p);
void ChunkedForward(const SsdParams& p);
void ChunkedBackward(const SsdBwdParams& p);

}  // namespace ssmkit::cpu::ssd

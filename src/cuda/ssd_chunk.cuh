// Pieces the SSD kernels share: the chunk layout, the per-chunk time quantities (dt, the
// cumulative log-decay, the reset segments), tile loads into shared memory, and BlockGemm, a
// block-wide matrix product on the tensor cores (TF32 WMMA, f32 accumulate).
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk
// length (the CUDA backend's own; SsdOptions::chunk_size tunes the CPU path only).
//
// Within a chunk of Qc <= Q positions t (global l = l0 + t), with a_t = exp(dt_t A) and a reset
// (a_t = 0) where seq_idx changes:
//   cs[t]  = sum_{t' <= t} dt_t' A               (inclusive cumulative log-decay)
//   sid[t] = resets at positions <= t in the chunk (positions with equal sid are connected)
//   decay from s to t (s <= t) = [sid[t] == sid[s]] exp(cs[t] - cs[s])
//   co[t]  = [sid[t] == 0] exp(cs[t])            (the previous chunk's state reaching t)
//   w[s]   = [sid[s] == sid[end]] exp(cs[end] - cs[s])   (position s reaching the chunk's end)
//   decay_c = co[end]                            (the state carried through the whole chunk)
#pragma once

#include <mma.h>

#include "cuda/common.cuh"
#include "params/ssd_params.hpp"

namespace ssmkit::cuda {

constexpr int kSsdThreads = 256;
constexpr int kSsdWarps = kSsdThreads / 32;

// Sizes shared by every SSD kernel of one call. Matrix dimensions are padded to multiples of
// 16 (the WMMA tile), leading dimensions by 8 more floats (keeps rows 32-byte aligned, as WMMA
// needs, and spreads rows over the shared-memory banks).
struct SsdLayout {
  int Q = 64;                        // chunk length
  int Pp = 16, Np = 16;              // P and N padded to multiples of 16
  int ldq = 72, ldp = 24, ldn = 24;  // shared-memory leading dimensions of Q-, P-, N-wide tiles
  int64_t nchunks = 1;
  int64_t Lpad = 64;  // nchunks * Q
};

// The time quantities of one chunk, in shared memory.
struct ChunkTimes {
  float* dt;    // [Q] dt after bias, softplus and clamp; 0 past the end
  float* mask;  // [Q] d dt / d dt_in (0 where clamped)
  float* cs;    // [Q] inclusive cumulative dt A
  float* co;    // [Q]
  float* w;     // [Q]
  int* sid;     // [Q]
  static constexpr int kFloats = 5, kInts = 1;
};

__device__ __forceinline__ ChunkTimes CarveTimes(float* smem, int Q) {
  ChunkTimes ct;
  ct.dt = smem;
  ct.mask = smem + Q;
  ct.cs = smem + 2 * Q;
  ct.co = smem + 3 * Q;
  ct.w = smem + 4 * Q;
  ct.sid = reinterpret_cast<int*>(smem + 5 * Q);
  return ct;
}

// Floats of shared memory CarveTimes uses (rounded to keep what follows 32-byte aligned).
__host__ __device__ inline int TimesFloats(int Q) {
  return ((ChunkTimes::kFloats + ChunkTimes::kInts) * Q + 7) / 8 * 8;
}

// Element (b, l, k, 0) of a (B, L, K, M) operand (SsdSeqView::Offset is host-only).
__device__ __forceinline__ int64_t Off(const SsdSeqView& v, int64_t b, int64_t l, int64_t k) {
  return b * v.stride_batch + l * v.stride_seq + k * v.stride_head;
}

// The group head h reads B and C from.
__device__ __forceinline__ int64_t GroupOf(const SsdParams& p, int64_t h) {
  return h / (p.nheads / p.ngroups);
}

// Positions of chunk c of batch row b that exist: min(Q, L - c * Q).
__device__ __forceinline__ int ChunkLength(const SsdParams& p, const SsdLayout& lay, int64_t c) {
  const int64_t left = p.seqlen - c * lay.Q;
  return left < lay.Q ? static_cast<int>(left) : lay.Q;
}

// dt after the bias (already in `raw`), the softplus (when asked) and the clamp to
// [dt_min, dt_max]; *grad = d dt / d raw, 0 where clamped. Shared by every SSD kernel variant.
__device__ __forceinline__ float EffectiveDt(const SsdParams& p, float raw, float* grad) {
  float v = raw, g = 1.0f;
  if (p.dt_softplus && raw <= 20.0f) {
    v = log1pf(__expf(raw));
    g = Sigmoid(raw);
  }
  if (v < p.dt_min || v > p.dt_max) g = 0.0f;
  *grad = g;
  return fminf(fmaxf(v, p.dt_min), p.dt_max);
}

// Fills `ct` for chunk (b, c, h). Warp 0 does the work (Q <= 64: two positions per lane, a
// shuffle scan); the caller synchronises the block afterwards.
__device__ inline void ComputeTimes(const SsdParams& p, const SsdLayout& lay, int64_t b, int64_t c,
                                    int64_t h, const ChunkTimes& ct) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x, Q = lay.Q, per = Q > 32 ? Q / 32 : 1;
  const int qc = ChunkLength(p, lay, c);
  const float A = p.A.data[h * p.A.stride_head];
  const float bias = p.dt_bias.data ? p.dt_bias.data[h * p.dt_bias.stride_head] : 0.0f;
  float dtA[2] = {0.0f, 0.0f};
  int reset[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int t = lane * per + e;
    if (e >= per || t >= Q) break;
    float dt = 0.0f, mask = 0.0f;
    if (t < qc) {
      const int64_t l = c * lay.Q + t;
      const float raw =
          LoadF32(p.dt.data, p.dt.dtype, b * p.dt.stride_batch + l * p.dt.stride_seq + h) + bias;
      dt = EffectiveDt(p, raw, &mask);
      if (p.seq_idx && l > 0) {
        const int32_t* s = p.seq_idx + b * p.seq_idx_stride_batch;
        reset[e] = s[l * p.seq_idx_stride_seq] != s[(l - 1) * p.seq_idx_stride_seq];
      }
    }
    ct.dt[t] = dt;
    ct.mask[t] = mask;
    dtA[e] = dt * A;
  }
  // Inclusive scans of dt A and of the reset flags over the chunk, lane by lane.
  float sum = dtA[0] + (per > 1 ? dtA[1] : 0.0f);
  int count = reset[0] + (per > 1 ? reset[1] : 0);
  for (int o = 1; o < 32; o <<= 1) {
    const float s = __shfl_up_sync(0xffffffffu, sum, o);
    const int n = __shfl_up_sync(0xffffffffu, count, o);
    if (lane >= o) {
      sum += s;
      count += n;
    }
  }
  float run = sum - dtA[0] - (per > 1 ? dtA[1] : 0.0f);  // exclusive prefix of this lane
  int sid = count - reset[0] - (per > 1 ? reset[1] : 0);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int t = lane * per + e;
    if (e >= per || t >= Q) break;
    run += dtA[e];
    sid += reset[e];
    ct.cs[t] = run;
    ct.sid[t] = sid;
  }
  __syncwarp();
  const int end = qc - 1;
  const float cs_end = ct.cs[end];
  const int sid_end = ct.sid[end];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int t = lane * per + e;
    if (e >= per || t >= Q) break;
    const bool live = t < qc;
    ct.co[t] = live && ct.sid[t] == 0 ? __expf(ct.cs[t]) : 0.0f;
    ct.w[t] = live && ct.sid[t] == sid_end ? __expf(cs_end - ct.cs[t]) : 0.0f;
  }
}

// decay from s to t, 0 unless s <= t in one segment.
__device__ __forceinline__ float Decay(const ChunkTimes& ct, int t, int s) {
  return s <= t && ct.sid[t] == ct.sid[s] ? __expf(ct.cs[t] - ct.cs[s]) : 0.0f;
}

// dst[r * ld + col] = value(r, col) for r < rows, col < cols (padded sizes); value is only
// called inside (valid_rows, valid_cols), zeros elsewhere.
template <class Fn>
__device__ __forceinline__ void LoadTile(float* dst, int ld, int rows, int cols, int valid_rows,
                                         int valid_cols, Fn&& value) {
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, col = i % cols;
    dst[r * ld + col] = r < valid_rows && col < valid_cols ? value(r, col) : 0.0f;
  }
}

// The rows of chunk (b, c) of an (B, L, K, M) operand at head/group k, M = valid_cols.
__device__ __forceinline__ void LoadSeqTile(float* dst, int ld, int rows, int cols,
                                            const SsdSeqView& v, int64_t b, int64_t l0, int64_t k,
                                            int valid_rows, int valid_cols) {
  LoadTile(dst, ld, rows, cols, valid_rows, valid_cols,
           [&](int r, int col) { return LoadF32(v.data, v.dtype, Off(v, b, l0 + r, k) + col); });
}

// C (M x N) = [C +] op(A) (M x K) op(B) (K x N), every dimension a multiple of 16 (K of 8).
// op(A): A[m * lda + k], or with TransA A[k * lda + m]. op(B): B[k * ldb + n], or with TransB
// B[n * ldb + k]. C may be shared or global memory (ldc and the pointers 32-byte aligned).
// Warps take the 16 x 16 output tiles in turn; operands are rounded to TF32 on the tensor
// cores, products accumulate in f32. Needs no synchronisation inside; the caller syncs
// before reading C or overwriting A and B.
template <bool TransA, bool TransB>
__device__ inline void BlockGemm(float* C, int64_t ldc, const float* A, int lda, const float* B,
                                 int ldb, int M, int N, int K, bool accumulate) {
  namespace wmma = nvcuda::wmma;
  using LayoutA = typename std::conditional<TransA, wmma::col_major, wmma::row_major>::type;
  using LayoutB = typename std::conditional<TransB, wmma::col_major, wmma::row_major>::type;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, tiles_n = N / 16;
  for (int tile = warp; tile < (M / 16) * tiles_n; tile += warps) {
    const int tm = tile / tiles_n * 16, tn = tile % tiles_n * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    float* c_tile = C + tm * ldc + tn;
    if (accumulate) {
      wmma::load_matrix_sync(acc, c_tile, static_cast<unsigned>(ldc), wmma::mem_row_major);
    } else {
      wmma::fill_fragment(acc, 0.0f);
    }
    for (int k0 = 0; k0 < K; k0 += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> bf;
      wmma::load_matrix_sync(a, TransA ? A + k0 * lda + tm : A + tm * lda + k0, lda);
      wmma::load_matrix_sync(bf, TransB ? B + tn * ldb + k0 : B + k0 * ldb + tn, ldb);
#pragma unroll
      for (int i = 0; i < a.num_elements; ++i) a.x[i] = wmma::__float_to_tf32(a.x[i]);
#pragma unroll
      for (int i = 0; i < bf.num_elements; ++i) bf.x[i] = wmma::__float_to_tf32(bf.x[i]);
      wmma::mma_sync(acc, a, bf, acc);
    }
    wmma::store_matrix_sync(c_tile, acc, static_cast<unsigned>(ldc), wmma::mem_row_major);
  }
}

}  // namespace ssmkit::cuda

namespace ssmkit::cuda {

// Picks the chunk length: the longest of 64, 32, 16 whose kernels (forward, or backward when
// `backward`) fit the device's shared memory; Unsupported when none does.
Status PlanSsd(const SsdParams& p, bool backward, SsdLayout* lay);

// The chunk states S_c = sum_s w[s] dt_s x_s B_s^T into states[b][c][h] (Pp x Np, f32), and
// decay[(b * H + h) * nchunks + c] = decay_c.
Status LaunchChunkStates(const SsdParams& p, const SsdLayout& lay, float* states, float* decay);

// In place over `states`: chunk c's S_c becomes H_{c-1}, the state entering chunk c (h0 or 0
// for c = 0), with H_c = decay_c H_{c-1} + S_c; writes p.final_states when asked.
Status LaunchStatePassing(const SsdParams& p, const SsdLayout& lay, float* states,
                          const float* decay, bool write_final);

// Sums `parts` rows of per-head partials (parts, H, width) f32 into a per-head output (dA,
// ddt_bias, dD: width 1, or P for dD per channel), in order of the rows: deterministic.
inline Status SumHeadPartials(const char* op, const float* partial, int64_t parts, int64_t nheads,
                              int64_t width, const SsdHeadView& out) {
  if (!out.data) return Status::Ok();
  StridedOut o;
  o.data = out.data;
  o.dims[1] = nheads;
  o.dims[2] = width;
  o.strides[1] = out.stride_head;
  o.strides[2] = out.stride_p;
  return SumPartials(op, partial, parts, o);
}

// Offset of chunk (b, c, h)'s (Pp x Np) block in a states workspace.
__host__ __device__ inline int64_t StateBlock(const SsdLayout& lay, int64_t nheads, int64_t b,
                                              int64_t c, int64_t h) {
  return ((b * lay.nchunks + c) * nheads + h) * lay.Pp * lay.Np;
}

}  // namespace ssmkit::cuda

// Device pieces of the SSD `mma` variant (ssd_mma*.cu): bf16 tiles in shared memory, filled by
// 16-byte cp.async copies or by loads that scale rows on the way, and matrix products on the
// tensor cores through nvcuda::wmma (m16n16k16, bf16 operands, f32 accumulation) with each
// warp holding a block of TM x TN output tiles in registers.
//
// Tile storage: a (rows x cols) tile is row-major with a padded leading dimension (BfLd, F32Ld:
// 16 bytes of padding per row, which keeps every 16 x 16 sub-tile 32-byte aligned, as WMMA
// needs, and spreads the rows of a sub-tile over the banks: 4 banks apart for tiles a
// multiple of 64 elements wide). A product's operand may also be read
// transposed: Trans = true reads logical element (r, c) at ptr[c * ld + r].
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, Q chunk.
#pragma once

#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "params/ssd_params.hpp"

namespace ssmkit::cuda {

using bf16 = __nv_bfloat16;

// Threads of every mma-variant kernel: 8 warps (tuned for speed, does not affect results).
constexpr int kMmaThreads = 256;
constexpr int kMmaWarps = kMmaThreads / 32;

// Leading dimensions (elements) of shared-memory tiles `cols` wide.
__host__ __device__ constexpr int BfLd(int cols) { return cols + 8; }
__host__ __device__ constexpr int F32Ld(int cols) { return cols + 4; }
// Bytes rounded up to 128, so every region carved from shared memory stays aligned.
__host__ __device__ constexpr int Align128(int bytes) { return (bytes + 127) / 128 * 128; }
__host__ __device__ constexpr int BfTileBytes(int rows, int cols) {
  return Align128(rows * BfLd(cols) * 2);
}
__host__ __device__ constexpr int F32TileBytes(int rows, int cols) {
  return Align128(rows * F32Ld(cols) * 4);
}

// ---- copies into shared memory ------------------------------------------------------------

__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src)
               : "memory");
}

// Waits for every cp.async this thread issued; the caller then synchronises the block.
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Copies a (ROWS x COLS) bf16 tile to dst (leading dimension ld) by 16-byte cp.async: row r
// from row(r) (a global bf16 pointer, 16-byte aligned) for r < valid_rows, zeros below.
template <int ROWS, int COLS, class RowPtr>
__device__ __forceinline__ void CopyTileAsync(bf16* dst, int ld, int valid_rows, RowPtr&& row) {
  static_assert(COLS % 8 == 0, "rows are copied in 16-byte pieces");
  constexpr int kPieces = COLS / 8;
  for (int i = threadIdx.x; i < ROWS * kPieces; i += blockDim.x) {
    const int r = i / kPieces, col = i % kPieces * 8;
    bf16* d = dst + r * ld + col;
    if (r < valid_rows) {
      CpAsync16(d, row(r) + col);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// 8 bf16 at u + off (16-byte aligned), each times silu(gate[gate_off + j]) when the gate is
// present, times `scale`, rounded back to bf16: one 16-byte piece of a scaled tile row.
__device__ __forceinline__ uint4 ScaledPiece(const SsdSeqView& u, int64_t off,
                                             const SsdSeqView& gate, int64_t gate_off,
                                             float scale) {
  const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(u.data) + off);
  const __nv_bfloat162* in = reinterpret_cast<const __nv_bfloat162*>(&raw);
  uint4 packed;
  __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 v = __bfloat1622float2(in[j]);
    float s0 = scale, s1 = scale;
    if (gate.data) {
      s0 *= Silu(LoadF32(gate.data, gate.dtype, gate_off + 2 * j));
      s1 *= Silu(LoadF32(gate.data, gate.dtype, gate_off + 2 * j + 1));
    }
    out[j] = __floats2bfloat162_rn(v.x * s0, v.y * s1);
  }
  return packed;
}

// ---- products on the tensor cores ---------------------------------------------------------

// One warp's (16 TM x 16 TN) block of f32 accumulators at rows m0, columns n0 of an output.
template <int TM, int TN>
struct WarpBlock {
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[TM][TN];
  int m0 = 0, n0 = 0;

  // The block of warp `w` when (M / 16TM) x (N / 16TN) blocks are numbered row by row.
  template <int N>
  __device__ __forceinline__ void Place(int w) {
    static_assert(N % (16 * TN) == 0, "N must be a multiple of the block width");
    constexpr int kBlocksN = N / (16 * TN);
    m0 = w / kBlocksN * 16 * TM;
    n0 = w % kBlocksN * 16 * TN;
  }

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
  }

  // Every accumulator times f (the same f for all elements: layout-agnostic).
  __device__ __forceinline__ void Scale(float f) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int e = 0; e < acc[i][j].num_elements; ++e) acc[i][j].x[e] *= f;
  }

  // acc = C[m0.., n0..] (f32, row-major, leading dimension ldc; shared or global memory).
  __device__ __forceinline__ void Load(const float* C, int64_t ldc) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
        nvcuda::wmma::load_matrix_sync(acc[i][j], C + (m0 + 16 * i) * ldc + n0 + 16 * j,
                                       static_cast<unsigned>(ldc), nvcuda::wmma::mem_row_major);
  }

  // C[m0.., n0..] = acc (f32, row-major, leading dimension ldc; shared or global memory).
  __device__ __forceinline__ void Store(float* C, int64_t ldc) const {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
        nvcuda::wmma::store_matrix_sync(C + (m0 + 16 * i) * ldc + n0 + 16 * j, acc[i][j],
                                        static_cast<unsigned>(ldc), nvcuda::wmma::mem_row_major);
  }

  // acc += op(A)[m0 : m0 + 16TM, 0 : K] op(B)[0 : K, n0 : n0 + 16TN], bf16 tiles in shared
  // memory. op(A) (M x K): A[m * lda + k], or with TransA A[k * lda + m]. op(B) (K x N):
  // B[k * ldb + n], or with TransB B[n * ldb + k].
  template <int K, bool TransA, bool TransB>
  __device__ __forceinline__ void Mma(const bf16* A, int lda, const bf16* B, int ldb) {
    namespace wmma = nvcuda::wmma;
    using LayoutA = typename std::conditional<TransA, wmma::col_major, wmma::row_major>::type;
    using LayoutB = typename std::conditional<TransB, wmma::col_major, wmma::row_major>::type;
    static_assert(K % 16 == 0, "K must be a multiple of 16");
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> a[TM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int m = m0 + 16 * i;
        wmma::load_matrix_sync(a[i], TransA ? A + k0 * lda + m : A + m * lda + k0,
                               static_cast<unsigned>(lda));
      }
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int n = n0 + 16 * j;
        wmma::load_matrix_sync(b[j], TransB ? B + n * ldb + k0 : B + k0 * ldb + n,
                               static_cast<unsigned>(ldb));
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
  }
};

// C (M x N, f32 in shared memory, leading dimension ldc) = [C +] op(A) op(B), K deep (operands
// as in WarpBlock::Mma). The warps take the (16 TM x 16 TN) blocks in turn. No
// synchronisation inside: the caller syncs before reading C or overwriting A and B.
template <int M, int N, int K, int TM, int TN, bool TransA, bool TransB>
__device__ __forceinline__ void BlockGemm(float* C, int ldc, const bf16* A, int lda, const bf16* B,
                                          int ldb, bool accumulate) {
  static_assert(M % (16 * TM) == 0 && N % (16 * TN) == 0, "blocks must tile the output");
  constexpr int kBlocks = M / (16 * TM) * (N / (16 * TN));
  for (int w = threadIdx.x / 32; w < kBlocks; w += kMmaWarps) {
    WarpBlock<TM, TN> blk;
    blk.template Place<N>(w);
    if (accumulate) {
      blk.Load(C, ldc);
    } else {
      blk.Zero();
    }
    blk.template Mma<K, TransA, TransB>(A, lda, B, ldb);
    blk.Store(C, ldc);
  }
}

}  // namespace ssmkit::cuda

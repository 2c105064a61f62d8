// Many-row products on AVX-512 BF16: out = bf16(x) bf16(W)^T + bias with f32 sums, W bf16 or a
// quantized dtype's blocks (decoded and rounded to bf16 a panel at a time).
// Dimension legend: T rows, K input features (even), M output features, J = K / 2 pairs of
// features, Jb pairs per K block.
//
// vdpbf16ps adds the two products of a pair of bf16 elements to each of 16 f32 lanes. The
// weight is packed per panel of 64 output features and K block into (Jb, 64) dwords, each the
// pair W[m, 2j], W[m, 2j + 1] as it lies in W's row; x's pair of each row is one dword, which
// the instruction broadcasts from memory. A register tile of 6 rows of x by 64 outputs (24
// accumulators, 4 weight vectors) runs over the panel's K block; the panel (256 KB at most)
// stays in L2 for all of T's tiles. The products of two bf16 are exact in f32, so the result
// differs from the f32 path by the operands' rounding (relative 2^-9 per element) and the order
// of the f32 sums. With x or out stored feature-major the roles of x and W swap (PanelProduct):
// panels of 64 rows of x are packed (from a feature-major x's f32 columns), tiles of 6 weight
// rows run over them, and each tile row is a run of a feature-major out's row or is scattered
// into a row-major out.
//
// Up to kLinearGemvMaxRows rows the few-rows kernel of linear_bf16_rows.cpp runs instead, and on
// a CPU with AMX-BF16 a bf16 weight's products at any T run linear_bf16_amx_rows.cpp's (here
// only a quantized weight's decoded panels take AMX's tiles).
#include "cpu/linear_bf16.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/amx.hpp"
#include "cpu/amx_tiles.hpp"
#include "cpu/linear.hpp"
#include "cpu/thread_scratch.hpp"
#include "ssmkit/linear.hpp"

#if SSMKIT_BF16_PRODUCTS_X86
#include <immintrin.h>
#endif

namespace ssmkit {
namespace {

bool Bf16ProductsSupported() {
#if SSMKIT_BF16_PRODUCTS_X86
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return supported;
#else
  return false;
#endif
}

bool DefaultBf16Products() {
  const char* env = std::getenv("SSMKIT_BF16_PRODUCTS");
  return env != nullptr && std::strcmp(env, "1") == 0 && Bf16ProductsSupported();
}

std::atomic<int> g_bf16_products{-1};  // -1: not yet resolved (SSMKIT_BF16_PRODUCTS)

}  // namespace

bool SetBf16Products(bool enable) {
  const bool in_use = enable && Bf16ProductsSupported();
  g_bf16_products.store(in_use ? 1 : 0);
  return in_use;
}

bool Bf16Products() {
  int state = g_bf16_products.load();
  if (state < 0) {
    state = DefaultBf16Products() ? 1 : 0;
    g_bf16_products.store(state);
  }
  return state == 1;
}

namespace cpu {

bool TakesBf16Products(const LinearParams& p) {
  if (!Bf16Products() || p.in_features % 2 != 0) return false;
  const bool bf16 = p.weight_dtype == DType::kBF16;
  if (p.rows <= kLinearGemvMaxRows) {
    // A quantized weight's few rows keep their 8-bit kernels (quant_linear.cpp); feature-major
    // few rows are copied into rows first (linear.cpp).
    return bf16 && p.rows >= 2 && p.x_row_major() && p.out_row_major();
  }
  // The transposed stores (x feature-major, out row-major) index a panel of 64 rows of out in
  // int32.
  const bool transposed = !p.x_row_major() && p.out_row_major();
  return (bf16 || DTypeIsQuantized(p.weight_dtype)) &&
         (!transposed || p.out_stride_row < (int64_t{1} << 31) / 64);
}

#if SSMKIT_BF16_PRODUCTS_X86
namespace {

constexpr int64_t kPanelOutputs = 64;  // 4 vectors of 16 f32 lanes
constexpr int kTileRows = 6;           // 24 accumulators of the 32 zmm registers
// Pairs of K per block: a packed panel of 64 x 2048 bf16, 256 KB, stays in L2 while every tile
// of rows passes over it. Tuned for speed only.
constexpr int64_t kBlockPairs = 1024;

// Wp (Jb, 64) = the dwords [j0, j0 + Jb) of the rows (rows, K) at w, rows past `rows` zero.
void PackPanel(const uint16_t* w, int64_t K, int64_t rows, int64_t j0, int64_t Jb, uint32_t* Wp) {
  for (int64_t r = 0; r < kPanelOutputs; ++r) {
    if (r >= rows) {
      for (int64_t j = 0; j < Jb; ++j) Wp[j * kPanelOutputs + r] = 0;
      continue;
    }
    uint32_t pairs[kBlockPairs];
    std::memcpy(pairs, w + r * K + 2 * j0, static_cast<size_t>(Jb) * sizeof(uint32_t));
    for (int64_t j = 0; j < Jb; ++j) Wp[j * kPanelOutputs + r] = pairs[j];
  }
}

// The pair of bf16 at p as one dword (p need only be 2-byte aligned: a checkpoint's tensor).
inline int32_t PairAt(const uint16_t* p) {
  int32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

// out[t, c] (+)= sum over the block's pairs j of x[t, 2j : 2j + 2] . Wp[j, c] for rows t < kT
// and columns c < cols; x (kT, >= 2 Jb) bf16 at row stride ldx; out[t, c] at out + t * ldo + c,
// or (kTransposed) at out + c * ldo + t, stored by scatters of 16 (ldo * 64 < 2^31). The first
// block of K stores, the others add to what is there.
template <int kT, bool kTransposed>
SSMKIT_BF16_TARGET void Tile(const uint16_t* x, int64_t ldx, const uint32_t* Wp, int64_t Jb,
                             float* out, int64_t ldo, int64_t cols, bool first) {
  constexpr int kV = kPanelOutputs / 16;
  __m512 acc[kT][kV];
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) acc[t][v] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < Jb; ++j, Wp += kPanelOutputs) {
    __m512bh w[kV];
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) w[v] = (__m512bh)_mm512_loadu_si512(Wp + 16 * v);
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(PairAt(x + t * ldx + 2 * j));
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) acc[t][v] = _mm512_dpbf16_ps(acc[t][v], xv, w[v]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      const __mmask16 mask = FirstLanes(cols - 16 * v);
      if constexpr (kTransposed) {
        const __m512i across = LaneMultiples(ldo);
        float* o = out + 16 * v * ldo + t;
        const __m512 sum =
            first ? acc[t][v]
                  : _mm512_add_ps(acc[t][v], _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask,
                                                                      across, o, sizeof(float)));
        _mm512_mask_i32scatter_ps(o, mask, across, sum, sizeof(float));
      } else {
        float* o = out + t * ldo + 16 * v;
        const __m512 sum =
            first ? acc[t][v] : _mm512_add_ps(acc[t][v], _mm512_maskz_loadu_ps(mask, o));
        _mm512_mask_storeu_ps(o, mask, sum);
      }
    }
  }
}

template <bool kTransposed, int kT = kTileRows>
SSMKIT_BF16_TARGET void TileOfRows(int n, const uint16_t* x, int64_t ldx, const uint32_t* Wp,
                                   int64_t Jb, float* out, int64_t ldo, int64_t cols, bool first) {
  if constexpr (kT > 1) {
    if (n < kT) return TileOfRows<kTransposed, kT - 1>(n, x, ldx, Wp, Jb, out, ldo, cols, first);
  }
  Tile<kT, kTransposed>(x, ldx, Wp, Jb, out, ldo, cols, first);
}

SSMKIT_BF16_TARGET void RoundToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = FirstLanes(n - i);
    const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
    _mm256_mask_storeu_epi16(dst + i, mask, (__m256i)rounded);
  }
}

}  // namespace

SSMKIT_BF16_TARGET void PackPairColumns(const float* x, int64_t ldx, int64_t K, int64_t cols,
                                        int64_t j0, int64_t Jb, uint32_t* Bp) {
  constexpr int64_t kCols = kPanelOutputs;
  // Words [a0 .. a15, b0 .. b15] to the pairs (a_i, b_i), a_i the low word.
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t j = 0; j < Jb; ++j) {
    const int64_t k = 2 * (j0 + j);
    const float* a = x + k * ldx;
    const float* b = a + ldx;
#pragma GCC unroll 4
    for (int v = 0; v < kCols / 16; ++v) {
      const __mmask16 mask = FirstLanes(cols - 16 * v);
      const __mmask16 mask_b = k + 1 < K ? mask : 0;  // an odd K's last pair: x[K, c] is zero
      const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask_b, b + 16 * v),
                                                         _mm512_maskz_loadu_ps(mask, a + 16 * v));
      _mm512_storeu_si512(Bp + j * kCols + 16 * v, _mm512_permutexvar_epi16(interleave, words));
    }
  }
}

void RoundRowsToBf16(const LinearParams& p, int64_t t_begin, int64_t t_end, uint16_t* xb) {
  const int64_t K = p.in_features;
  for (int64_t t = t_begin; t < t_end; ++t) RoundToBf16(p.x + t * p.x_stride_row, K, xb + t * K);
}

namespace {

// out[r, c] = sum_k A[r, k] B[c, k] for rows r < rows and columns [c_begin, c_end): A (rows, K)
// bf16 at row stride lda. B packed a panel of 64 columns at a time into the calling thread's
// buffer from (>= c_end, K) rows, bf16 or a quantized dtype's blocks (decoded and rounded to
// bf16 a panel at a time), or from f32 columns b_columns (K, >= c_end), b_ld apart (a
// feature-major x). out[r, c] at out + r * ldo + c, or (transposed) out + c * ldo + r.
struct PanelOperands {
  const uint16_t* A;
  int64_t lda, rows;
  const void* B;
  DType b_dtype;
  const float* b_columns;
  int64_t b_ld, K;
  float* out;
  int64_t ldo;
  bool transposed;
};

// Rows [r0, r0 + rows) of W (a quantized dtype's blocks, K per row) decoded a row at a time into
// f32 and rounded to bf16 into the thread's buffer (rows <= kPanelOutputs, K).
const uint16_t* DecodedRows(const void* W, DType dtype, int64_t K, int64_t r0, int64_t rows) {
  float* row = ThreadScratch(ScratchSlot::kLinearBf16Decoded, (kPanelOutputs / 2 + 1) * K);
  uint16_t* rounded = reinterpret_cast<uint16_t*>(row + K);  // (rows, K)
  const int64_t row_bytes = DTypeRowBytes(dtype, K);
  for (int64_t r = 0; r < rows; ++r) {
    WidenToF32(static_cast<const uint8_t*>(W) + (r0 + r) * row_bytes, dtype, K, row);
    RoundToBf16(row, K, rounded + r * K);
  }
  return rounded;
}

// W's rows [r0, r0 + rows) as bf16 (rows, K): its own, or decoded (DecodedRows).
const uint16_t* RowsOfW(const void* W, DType dtype, int64_t K, int64_t r0, int64_t rows) {
  if (dtype == DType::kBF16) return static_cast<const uint16_t*>(W) + r0 * K;
  return DecodedRows(W, dtype, K, r0, rows);
}

// With AMX's bf16 tiles (amx.hpp, AmxBf16): one tdpbf16ps multiplies 16 rows of A by 32 of K
// into 16 x 16 f32 sums, the packed panel (Jb, 64) being 4 B tiles as it lies (16 pairs of K by
// 16 columns of dwords, 256 bytes apart). Tiles: C0-C3 the panel's 4 column tiles, A tile 4, B
// tiles 5-7 in turn. Each output's sum runs over K's pairs in order, from 0 (the first block of
// K) or what the earlier blocks stored, whatever the rows and columns around it.
constexpr amx::TileConfig kBf16Tiles = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// C0-C3 += A (16 rows of 2 Jb bf16 at a, lda apart) times the panel Bp (Jb, 64), Jb a multiple
// of 16.
void AmxPanelSums(const uint16_t* a, int64_t lda, const uint32_t* Bp, int64_t Jb) {
  for (int64_t j = 0; j < Jb; j += 16) {
    const uint32_t* b = Bp + j * kPanelOutputs;
    amx::TileLoad<4>(a + 2 * j, lda * 2);
    amx::TileLoad<5>(b, kPanelOutputs * 4);
    amx::TileBf16Pairs<0, 4, 5>();
    amx::TileLoad<6>(b + 16, kPanelOutputs * 4);
    amx::TileBf16Pairs<1, 4, 6>();
    amx::TileLoad<7>(b + 32, kPanelOutputs * 4);
    amx::TileBf16Pairs<2, 4, 7>();
    amx::TileLoad<5>(b + 48, kPanelOutputs * 4);
    amx::TileBf16Pairs<3, 4, 5>();
  }
}

// Rows [0, n) (n <= 16) of A (2 Jb bf16 each at a, lda apart) by the panel's cols columns with
// AMX: out[t, c] at out + t * ldo + c, stored (first) or added to. A tile short of 16 rows or 64
// columns goes through buffers: its rows of A copied above zero rows (a tile reads 16), its sums
// started from out's valid elements (zero elsewhere) and the valid ones copied back. a16: a
// buffer of 16 rows of 2 Jb bf16; c16: of 16 x 64 f32.
void AmxTile(const uint16_t* a, int64_t lda, int64_t n, const uint32_t* Bp, int64_t Jb, float* out,
             int64_t ldo, int64_t cols, bool first, uint16_t* a16, float* c16) {
  const bool whole = n == 16 && cols == kPanelOutputs;
  if (n < 16) {
    std::memset(a16, 0, 16 * 2 * Jb * sizeof(uint16_t));
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(a16 + t * 2 * Jb, a + t * lda, 2 * Jb * sizeof(uint16_t));
    a = a16;
    lda = 2 * Jb;
  }
  float* c = whole ? out : c16;
  const int64_t ldc = whole ? ldo : kPanelOutputs;
  if (!whole) {
    std::memset(c16, 0, 16 * kPanelOutputs * sizeof(float));
    for (int64_t t = 0; t < n && !first; ++t) {
      std::memcpy(c16 + t * kPanelOutputs, out + t * ldo, cols * sizeof(float));
    }
  }
  if (first && whole) {
    amx::TileZero<0>();
    amx::TileZero<1>();
    amx::TileZero<2>();
    amx::TileZero<3>();
  } else {
    amx::TileLoad<0>(c, ldc * 4);
    amx::TileLoad<1>(c + 16, ldc * 4);
    amx::TileLoad<2>(c + 32, ldc * 4);
    amx::TileLoad<3>(c + 48, ldc * 4);
  }
  AmxPanelSums(a, lda, Bp, Jb);
  amx::TileStore<0>(c, ldc * 4);
  amx::TileStore<1>(c + 16, ldc * 4);
  amx::TileStore<2>(c + 32, ldc * 4);
  amx::TileStore<3>(c + 48, ldc * 4);
  if (whole) return;
  for (int64_t t = 0; t < n; ++t) {
    std::memcpy(out + t * ldo, c16 + t * kPanelOutputs, cols * sizeof(float));
  }
}

void PanelProduct(const PanelOperands& q, int64_t c_begin, int64_t c_end) {
  const int64_t J = q.K / 2;
  static_assert(sizeof(float) == sizeof(uint32_t));
  // AMX's tiles take K 32 at a time: a K that is not a whole number of 32 (and the transposed
  // stores) keep the AVX-512 kernel, for every row of the call.
  const bool amx_tiles = AmxBf16() && !q.transposed && J % 16 == 0;
  const int64_t Jmax = std::min(J, kBlockPairs);
  float* panel = ThreadScratch(ScratchSlot::kLinearBf16Panel,
                               Jmax * kPanelOutputs + (amx_tiles ? 16 * Jmax + 16 * 64 : 0));
  uint32_t* Bp = reinterpret_cast<uint32_t*>(panel);  // (Jb, 64)
  // A short tile's A (16, 2 Jb) and C (16, 64), for AmxTile.
  uint16_t* a16 = reinterpret_cast<uint16_t*>(panel + Jmax * kPanelOutputs);
  float* c16 = panel + Jmax * kPanelOutputs + 16 * Jmax;
  if (amx_tiles) amx::LoadTileConfig(kBf16Tiles);
  for (int64_t c0 = c_begin; c0 < c_end; c0 += kPanelOutputs) {
    const int64_t cols = std::min(kPanelOutputs, c_end - c0);
    const uint16_t* b_rows =
        q.b_columns != nullptr ? nullptr : RowsOfW(q.B, q.b_dtype, q.K, c0, cols);
    for (int64_t j0 = 0; j0 < J; j0 += kBlockPairs) {
      const int64_t Jb = std::min(kBlockPairs, J - j0);
      if (q.b_columns != nullptr) {
        PackPairColumns(q.b_columns + c0, q.b_ld, q.K, cols, j0, Jb, Bp);
      } else {
        PackPanel(b_rows, q.K, cols, j0, Jb, Bp);
      }
      if (amx_tiles) {
        for (int64_t r = 0; r < q.rows; r += 16) {
          AmxTile(q.A + r * q.lda + 2 * j0, q.lda, std::min<int64_t>(16, q.rows - r), Bp, Jb,
                  q.out + r * q.ldo + c0, q.ldo, cols, j0 == 0, a16, c16);
        }
        continue;
      }
      for (int64_t r = 0; r < q.rows; r += kTileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kTileRows, q.rows - r));
        const uint16_t* a = q.A + r * q.lda + 2 * j0;
        if (q.transposed) {
          TileOfRows<true>(n, a, q.lda, Bp, Jb, q.out + c0 * q.ldo + r, q.ldo, cols, j0 == 0);
        } else {
          TileOfRows<false>(n, a, q.lda, Bp, Jb, q.out + r * q.ldo + c0, q.ldo, cols, j0 == 0);
        }
      }
    }
  }
  if (amx_tiles) amx::ReleaseTiles();
}

}  // namespace

void Bf16ProductRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end) {
  if (p.rows <= kLinearGemvMaxRows) return Bf16FewRows(p, xb, m_begin, m_end);
  const int64_t T = p.rows, K = p.in_features;
  if (p.x_row_major() && p.out_row_major()) {
    // out (T, M): x's rows by panels of W's rows.
    PanelProduct(
        {xb, K, T, p.weight, p.weight_dtype, nullptr, 0, K, p.out, p.out_stride_row, false},
        m_begin, m_end);
  } else {
    // W's rows, 64 at a time (a quantized W's decoded), by panels of x's rows: x's rounded rows,
    // or packed from a feature-major x's f32 columns. out stored feature-major (M, T) takes each
    // tile row as a run of its row; row-major out, the transposed stores.
    const bool by_columns = !p.x_row_major(), transposed = p.out_row_major();
    const int64_t ldo = transposed ? p.out_stride_row : p.out_stride_feature;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kPanelOutputs) {
      const int64_t rows = std::min(kPanelOutputs, m_end - m0);
      const uint16_t* w = RowsOfW(p.weight, p.weight_dtype, K, m0, rows);
      float* out = p.out + m0 * (transposed ? 1 : p.out_stride_feature);
      PanelProduct({w, K, rows, xb, DType::kBF16, by_columns ? p.x : nullptr, p.x_stride_feature, K,
                    out, ldo, transposed},
                   0, T);
    }
  }
  if (p.bias == nullptr) return;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t m = m_begin; m < m_end; ++m)
      p.out[t * p.out_stride_row + m * p.out_stride_feature] += p.bias[m];
  }
}

#else  // no AVX-512 BF16: TakesBf16Products is false; the same function in scalar code

void RoundRowsToBf16(const LinearParams& p, int64_t t_begin, int64_t t_end, uint16_t* xb) {
  const int64_t K = p.in_features;
  for (int64_t t = t_begin; t < t_end; ++t) {
    for (int64_t k = 0; k < K; ++k) xb[t * K + k] = F32ToBf16(p.x[t * p.x_stride_row + k]);
  }
}

void Bf16ProductRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end) {
  const int64_t K = p.in_features, row_bytes = DTypeRowBytes(p.weight_dtype, K);
  std::vector<float> w(static_cast<size_t>(K));  // row m of W, rounded to bf16
  for (int64_t m = m_begin; m < m_end; ++m) {
    WidenToF32(static_cast<const uint8_t*>(p.weight) + m * row_bytes, p.weight_dtype, K, w.data());
    for (float& v : w) v = Bf16ToF32(F32ToBf16(v));
    for (int64_t t = 0; t < p.rows; ++t) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += Bf16ToF32(xb[t * K + k]) * w[k];
      p.out[t * p.out_stride_row + m * p.out_stride_feature] =
          sum + (p.bias != nullptr ? p.bias[m] : 0.0f);
    }
  }
}

#endif

}  // namespace cpu
}  // namespace ssmkit

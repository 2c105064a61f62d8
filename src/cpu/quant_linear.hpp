// CPU linear layer with a weight in one of llama.cpp's block formats (core/quant.hpp), for few
// rows of x (decode batches): x quantized to 8 bits once per call, then integer dot products of
// each weight block with each row's block (quant_linear.cpp).
// Dimension legend: T rows of x, K input features, M output features, B elements per block.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/cache_line_vector.hpp"
#include "core/dtype.hpp"
#include "params/linear_params.hpp"

namespace ssmkit::cpu {

// Weight rows at least this long have a later one (kPrefetchRowsAhead on) prefetched into L2
// while they are multiplied, beside the hardware's stream: the 2.8B shapes' rows (1.4-5.4 KB)
// decoded 3-6% faster with the next row, the 130M ones' (0.4-1.6 KB) did not gain. Three rows
// ahead rather than one: Q4_K's one-row product, 5120 x 2560 from memory on 2 threads, streamed
// 20-22 GB/s with the next row and 26-32 with the second or fourth (Zen 4). Tuned for speed only.
constexpr int64_t kPrefetchNextRowBytes = 1024;
constexpr int64_t kPrefetchRowsAhead = 3;

// The byte kernels of the signed formats of 32 (quant_columns_x86-inl.h) multiply each weight
// level w as the unsigned byte w + UnsignedLevelOffset: Q8_0's levels with their top bit flipped
// (with VNNI; without, |w| times x with w's sign and no offset), Q4_0's and Q5_0's nibbles (with
// the fifth bit) as stored, before their offset. Each block's sum of products then starts at
// -UnsignedLevelOffset times the sum of x's levels over the block (QuantizedRows::start).
constexpr int32_t UnsignedLevelOffset(DType weight_dtype) {
  return weight_dtype == DType::kQ4_0 ? 8 : weight_dtype == DType::kQ5_0 ? 16 : 128;
}

// The byte kernels' lone rows (QuantizedRows::paired) of Q4_0 and Q5_0 multiply two blocks per
// vector: x's levels go in pairs of blocks a, b as a 0-15, b 0-15, a 16-31, b 16-31, the order of
// their weights' low and high nibbles when the two blocks' 16 bytes are loaded side by side.
constexpr bool PairedLoneRows(DType weight_dtype) {
  return weight_dtype == DType::kQ4_0 || weight_dtype == DType::kQ5_0;
}

// The fewest rows a tile stored by columns has: below, its 8-lane kernel wastes more lanes than
// the row kernel's per-block reduction costs. Tuned for speed only (both sum in one order).
constexpr int64_t kColumnTileMinRows = 4;

// The fewest rows of x with which Q4_K and Q5_K take AMX's tiles (Q8_0 takes them from 2): the
// tiles need every weight block unpacked whatever T, which at 2 and 3 rows cost more than the
// lane-mapped VNNI kernel's products (Xeon, 2 threads, docs/benchmarks.md "AMX for quantized
// batches"). Tuned for speed only (both give the same bits).
constexpr int64_t kAmxMinRowsKQuant = 4;

// T rows of x quantized for the product with a weight of one dtype: per block of B elements
// (the weight's block: 32 for Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1, 256 for the K-quants, like GGML's
// Q8_0 and Q8_K activations) a scale s = max |x| / 127 and levels q = round(x / s) in [-127, 127],
// x ~ s q. The levels are stored in the width the dispatched kernel multiplies, so that no weight
// row widens them again: int8 where it multiplies bytes (x86 AVX2 / AVX-512: vpmaddubsw; for the
// K-quants in that kernel's order, quant_dot_x86-inl.h: Q6_K's, and without VNNI Q4_K's and
// Q5_K's, each 64 interleaved in 16-bit units; with VNNI Q4_K's and Q5_K's `lane_mapped`, each
// sub-block's levels in one 32-bit lane of the kernel's vectors), int16 elsewhere (16-bit lanes),
// in the order of x. For the K-quants, Q4_1 and Q5_1 also the sum of the levels of each 16
// elements: the Q4_K / Q5_K mins multiply those of their sub-blocks of 32 (two sums each), Q4_1 /
// Q5_1's min those of the block, the 8-bit kernel's Q6_K those of its sub-blocks of 16 (it takes
// the offset 32 off there, as GGML does).
//
// Layout: the rows go in tiles of `tile` rows (the kernel's tile of x; the last one may be
// shorter), and within a tile of n rows block by block: block b's levels of the tile's n rows
// one after the other, (blocks, n, B), so that each row of a tile is a constant offset from one
// pointer in the kernel; scale (blocks, n) and sums (blocks, n, B / 16) likewise. A tile starts
// where its first row t would start in row-major order (t K levels, t K / B scales, t K / 16
// sums), and a tile of one row (T = 1) is row-major.
//
// By columns (`columns`: the byte kernels of the signed formats of 32, quant_columns_x86-inl.h),
// a tile of kColumnTileMinRows rows or more is stored for a kernel whose vector lanes are its
// 8 rows: per block, its 8 quads (4 consecutive elements) each as the 8 rows' 4 levels,
// (blocks, 8, 8, 4), the rows past the tile's last zero (the last tile is padded to 8 rows);
// scale and start (-UnsignedLevelOffset times the sum of the block's levels) (blocks, 8). A
// shorter tile keeps each of its rows row-major, (n, blocks, B), scale and start (n, blocks),
// for Q4_0 and Q5_0 (`paired`) each pair of blocks 2k, 2k + 1 in the order PairedLoneRows
// gives (a last odd block as it is).
struct QuantizedRows {
  int64_t rows = 0, cols = 0, block = 0;  // T, K, B
  int64_t level_bytes = 0;                // 1: the levels are in q8; 2: in q
  int64_t tile = 0;                       // rows per tile
  bool vnni = false;                      // for the AVX-512 kernels with VNNI (QuantDotVnni)
  bool columns = false;                   // the tiles of kColumnTileMinRows rows by columns
  // On cache lines: the kernels load x's levels in 32-byte vectors.
  CacheLineVector<int8_t> q8;      // T K levels, as above, when level_bytes is 1
  CacheLineVector<int16_t> q;      // T K levels, as above, when level_bytes is 2
  CacheLineVector<float> scale;    // T K / B
  bool with_sums = false;          // the weight's kernel takes sums
  CacheLineVector<int16_t> sums;   // T K / 16 when with_sums
  CacheLineVector<int32_t> start;  // T K / B when columns (padded as q8)
  int32_t unsigned_offset = 0;     // the weight's level offset (UnsignedLevelOffset or 0)
  bool paired = false;             // lone rows in pairs of blocks (PairedLoneRows)
  bool lane_mapped = false;        // Q4_K / Q5_K with the VNNI kernels: their lane-mapped order
  // When lane_mapped, T K / 32: each sub-block of 32's sum of levels times its block's scale
  // (for the weight's mins), laid out as sums.
  CacheLineVector<float> scaled_sums;
  // Q8_0 at 2 rows or more, Q4_K and Q5_K at kAmxMinRowsKQuant or more, on a CPU with AMX
  // (AmxInt8, amx.hpp; quant_amx_x86-inl.h): x in groups of 8 rows (the last padded with zero
  // rows) as the tile multiplies take it. The K-quants, per group, block and pass of 64 elements
  // (two sub-blocks, s = 0 and 1): a B tile of 16 quads by 16 columns c = 2t + s of 4 levels,
  // row t's levels of the pass's sub-block s in quads 8 s .. 8 s + 7, zero in the other 8; row
  // t's scale in lanes 2t and 2t + 1; its scaled sum of sub-block s in lane c. Q8_0, per group
  // and block: a B tile of 8 quads by 8 columns t; row t's scale in lanes t and 8 + t; no sums.
  bool amx = false;
  // The K-quants' (groups, K / 256, 4, 16, 64), Q8_0's (groups, K / 32, 8, 8, 4).
  CacheLineVector<int8_t> amx_levels;
  CacheLineVector<float> amx_scales;  // (groups, K / B, 16)
  CacheLineVector<float> amx_sums;    // the K-quants' (groups, K / 256, 4, 16)

  // The rows of the tile that row t falls in, and its first row.
  int64_t TileStart(int64_t t) const { return t - t % tile; }
  int64_t TileRows(int64_t t) const { return std::min(tile, rows - TileStart(t)); }
  // Whether row t's tile is stored by columns.
  bool InColumnTile(int64_t t) const { return columns && TileRows(t) >= kColumnTileMinRows; }

  // Where block b of row t starts among the levels; its scale is at this / B, its sums at
  // this / 16.
  // (Not for a column tile: its block b starts at TileStart(t) K + 8 B b, its scales and starts
  // at that / B.)
  int64_t BlockOffset(int64_t t, int64_t b) const {
    if (columns) return t * cols + b * block;
    const int64_t t0 = TileStart(t), n = TileRows(t);
    return t0 * cols + (b * n + t - t0) * block;
  }

  // Sizes the buffers for x (T, K) and a weight of `weight_dtype`, the levels in the width of
  // the kernel the library dispatches to now; they only ever grow, so a buffer kept between
  // calls stops allocating once it has seen the largest shape.
  void Reserve(int64_t T, int64_t K, DType weight_dtype);
};

// Quantizes rows [t_begin, t_end) of p.x (row-major) into xq (Reserve'd for p's shape).
void QuantizeLinearRows(const LinearParams& p, int64_t t_begin, int64_t t_end, QuantizedRows* xq);

// out[:, m] for m in [m_begin, m_end): the integer products of the quantized weight rows with
// xq (all of p's rows), plus the bias; on the calling thread. Each output is summed in one fixed
// order whatever T, the thread count and the tile its row falls in: a row's result does not
// depend on the other rows. May throw std::bad_alloc (this thread's accumulators, kept between
// calls).
void QuantLinearRows(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin,
                     int64_t m_end);

// The AVX-512 kernels multiply bytes with VNNI (vpdpbusd, vpdpwssd) on a CPU that has it, and
// with the AVX2 kernels' vpmaddubsw / vpmaddwd otherwise; both give the same integer sums, so the
// same bits. SetQuantDotVnni(false) makes a VNNI machine run the latter too (the tests run both);
// true restores the default. Returns whether VNNI is used from now on.
bool SetQuantDotVnni(bool enable);
bool QuantDotVnni();

}  // namespace ssmkit::cpu

// The Q4_K and Q5_K (and, below, Q8_0) products of 2 to kLinearGemvMaxRows rows of x
// (quant_linear.cpp) on a CPU with AMX (Intel Sapphire Rapids and later): the integer sums by tile
// multiplies (tdpbusd, 16 x 16 x 64 byte products per instruction), the same bits as the
// lane-mapped VNNI kernels of quant_dot_x86-inl.h, which run batch 1. Dimension legend: T rows of
// x, K input features, 16 weight rows per tile, G groups of 8 rows of x, 4 passes of 64 elements
// per block.
//
// At 8 rows the VNNI kernels spend a vpdpbusd per 32 weights and row of x, 8 per row and block;
// a tile multiply does a pass of 64 elements of 16 weight rows with all 8 rows of x at once. A
// pass holds two sub-blocks of 32 (kPassSubBlock), each with its own scale, so that x goes in
// split by sub-block (QuantizedRows::amx_levels): B's column 2t + s holds row t's levels of
// the pass's sub-block s and zeros beside them, so that C's lane 2t + s is that sub-block's exact
// integer sum for row t. Each sum then takes the same f32 operations as in the VNNI kernels'
// AddBlock: times d sc (of its sub-block) times x's scale, added into an accumulator per
// sub-block, less dmin m times x's scaled sum of levels; the 8 sub-blocks' accumulators are then
// added in the VNNI kernels' order. So every output has the bits it has alone at batch 1, and a
// server's sequences keep theirs as others join or leave.
//
// The tile instructions: amx_tiles.hpp; when they run: amx.hpp (AmxInt8).
//
// A Highway "-inl.h" included once per target from quant_linear.cpp after quant_dot_x86-inl.h;
// defines i8::AmxRowsOf, AmxSignedRowsOf, StoreAmxBlock and StoreAmxBlock32 where
// SSMKIT_QUANT_DOT_VNNI is 1. Included after
// quant_columns_x86-inl.h, whose TotalOfAccumulators it uses.
#if defined(SSMKIT_CPU_QUANT_AMX_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_QUANT_AMX_X86_INL_H_
#undef SSMKIT_CPU_QUANT_AMX_X86_INL_H_
#else
#define SSMKIT_CPU_QUANT_AMX_X86_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/quant.hpp"
#include "cpu/amx_tiles.hpp"
#include "cpu/quant_linear.hpp"
#include "cpu/stream_prefetch.hpp"
#include "cpu/thread_scratch.hpp"
#include "hwy/highway.h"
#include "params/linear_params.hpp"

#if SSMKIT_QUANT_DOT_VNNI
HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace {
namespace i8 {

using amx::LoadTileConfig;
using amx::ReleaseTiles;
using amx::TileConfig;
using amx::TileLoad;
using amx::TileStore;
using amx::TileZero;

// Tiles 0-3: C, the sums of passes 0-3; kTileA: the weight rows' levels; kTileB: x's.
constexpr int kTileA = 4, kTileB = 5;

// The K-quants' tiles: C0-C3, A and B of 16 rows of 64 bytes.
constexpr TileConfig kK4K5Tiles = {1, 0, {}, {64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16}};

// C (16 x 16 int32) += A (16 x 64 unsigned bytes) B (16 quads x 16 columns x 4 signed bytes).
template <int kC>
HWY_INLINE void TileQuadProducts() {
  amx::TileUnsignedBySigned<kC, kTileA, kTileB>();
}

// The 4 passes of a block: pass p = 2h + u takes the nibbles u (low, high) of qs[64 h .. 64 h +
// 63], whose first 32 bytes hold sub-blocks 4h, 4h + 1 (low, high nibbles) and last 32 bytes
// sub-blocks 4h + 2, 4h + 3: pass p's 64 elements are sub-block kPassSubBlock[p][0]'s 32 then
// kPassSubBlock[p][1]'s. (Sub-blocks 2j, 2j + 1 per pass would take a 256-bit load and a lane
// insert per pass, these a 512-bit load per two.)
constexpr int kPassSubBlock[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
// A block's 8 per-sub-block scales reordered so that pass p's two are lanes 2p, 2p + 1.
HWY_INLINE __m256 InPassOrder(__m256 v) {
  return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7));
}

// A Q4_K / Q5_K block's 4 passes of 64 levels (kPassSubBlock) as unsigned bytes, into rows
// (pass p at rows + p stride: a weight row of each pass's A tile). Q5_K's fifth bit of element
// i of sub-block l is bit l of qh[i].
template <class F>
HWY_INLINE void StorePassLevels(const uint8_t* block, uint8_t* rows, int64_t stride) {
  const uint8_t* qs = block + offsetof(typename F::BlockLayout, qs);
  const __m512i nibble = _mm512_set1_epi8(0xF);
  for (int h = 0; h < 2; ++h) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * h);
    __m512i low = _mm512_and_si512(v, nibble);
    __m512i high = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
    if constexpr (F::kHasFifthBit) {
      const __m512i qh =
          _mm512_broadcast_i64x4(Load32(block + offsetof(typename F::BlockLayout, qh)));
      // Bytes 0-31 take bit 4h + u of qh, bytes 32-63 bit 4h + u + 2.
      const auto fifth = [&](int u) {
        return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (4 * h + u))),
                                  _mm256_set1_epi8(static_cast<char>(4 << (4 * h + u))), 1);
      };
      const __m512i bit = _mm512_set1_epi8(0x10);
      low = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(qh, fifth(0)), low, bit);
      high = _mm512_mask_add_epi8(high, _mm512_test_epi8_mask(qh, fifth(1)), high, bit);
    }
    _mm512_storeu_si512(rows + 2 * h * stride, low);
    _mm512_storeu_si512(rows + (2 * h + 1) * stride, high);
  }
}

// Row t of x's block b (levels in order (256), its scale and its 8 sub-blocks' scaled sums,
// x's scale times the sum of the sub-block's levels) into its columns 2 (t % 8) + s of group
// t / 8's B tiles (QuantizedRows::amx_levels, amx_scales, amx_sums), s = 0, 1 the pass's two
// sub-blocks (kPassSubBlock): quad q < 8 of column 2 (t % 8) its levels 4q .. 4q + 3 of
// sub-block s = 0, quad 8 + q of column 2 (t % 8) + 1 those of s = 1; the other quads of its
// columns stay zero (QuantizedRows::Reserve zeroes the tiles).
HWY_INLINE void StoreAmxBlock(QuantizedRows* xq, int64_t t, int64_t b, const int8_t* levels,
                              float scale, const float* scaled_sums) {
  const int64_t blocks = xq->cols / quant::kSuperBlock, g = t / 8, column = 2 * (t % 8);
  int8_t* tiles = xq->amx_levels.data() + (g * blocks + b) * 4 * 1024;  // (4, 16, 64)
  float* scales = xq->amx_scales.data() + (g * blocks + b) * 16;        // (16)
  float* sums = xq->amx_sums.data() + (g * blocks + b) * 4 * 16;        // (4, 16)
  // Quad q's 4 bytes: row q, column 2 (t % 8) + q / 8.
  const __m512i quad = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i at = _mm512_add_epi32(
      _mm512_mullo_epi32(quad, _mm512_set1_epi32(64)),
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(column)),
                                         _mm512_srli_epi32(quad, 3)),
                        2));
  for (int pass = 0; pass < 4; ++pass) {
    const __m512i quads =
        _mm512_inserti64x4(_mm512_castsi256_si512(Load32(levels + 32 * kPassSubBlock[pass][0])),
                           Load32(levels + 32 * kPassSubBlock[pass][1]), 1);
    _mm512_i32scatter_epi32(tiles + pass * 1024, at, quads, 1);
    for (int s = 0; s < 2; ++s) sums[pass * 16 + column + s] = scaled_sums[kPassSubBlock[pass][s]];
  }
  scales[column] = scales[column + 1] = scale;
}

// The next tile's 16 weight rows, one run of bytes, fetched into L2 a slice per block of this
// tile's: 16 rows read block by block side by side are 16 streams, which the hardware's
// prefetchers did not keep ahead of, and fetched all at once they stalled on the misses in
// flight. Tuned for speed only.
class NextTileFetch {
 public:
  // This tile's first row w (rows row_bytes apart, blocks blocks each), and the rows from it to
  // the end of the thread's.
  NextTileFetch(const uint8_t* w, int64_t row_bytes, int64_t blocks, int64_t rows_left)
      : next_(w + 16 * row_bytes),
        bytes_(std::clamp<int64_t>(rows_left - 16, 0, 16) * row_bytes),
        slice_((bytes_ / blocks + 63) / 64 * 64) {}
  // The slices of this tile's blocks [b, b + count).
  void Blocks(int64_t b, int64_t count) const {
    PrefetchLines(next_ + b * slice_, std::min(count * slice_, bytes_ - b * slice_));
  }

 private:
  const uint8_t* next_;
  int64_t bytes_, slice_;
};

// The lanes 2p, 2p + 1 of 8 floats at v (64 bits) in every pair of lanes.
HWY_INLINE __m512 BroadcastPair(const float* v) {
  double pair;
  std::memcpy(&pair, v, sizeof pair);
  return _mm512_castpd_ps(_mm512_set1_pd(pair));
}

// One block of 16 weight rows, unpacked: levels (4 passes, 16 weight rows, 64) and scales
// (16 weight rows, 2, 8: d sc and dmin m in pass order). A tile load waits for the stores of its
// bytes to reach the cache (no forwarding from the store buffer; a vector load of a stored tile
// likewise), so AmxRowsOf unpacks block b + 1 into a second UnpackedBlock between block b's
// multiplies and the f32 work on their sums: its stores drain meanwhile. (Chunks of 4 or 16
// blocks per phase ran slower: 22-28 ns per row and block against 18.)
struct UnpackedBlock {
  uint8_t* levels;
  float* scales;
};

// Block b of the weight rows at w (rows of them, row_bytes apart) into u.
template <class F>
HWY_INLINE void UnpackBlock(const uint8_t* w, int64_t row_bytes, int64_t rows, int64_t b,
                            const UnpackedBlock& u) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* block = w + r * row_bytes + b * F::kBytes;
    const typename F::Scales s = F::Prepare(block);
    _mm256_storeu_ps(u.scales + r * 16, InPassOrder(s.dsc));
    _mm256_storeu_ps(u.scales + r * 16 + 8, InPassOrder(s.dmin_m));
    StorePassLevels<F>(block, u.levels + r * 64, 16 * 64);
  }
}

// The block's 4 passes times x's (x: (4, 16, 64), as amx_levels) into sums (4 passes, 16 weight
// rows, 16 lanes).
HWY_INLINE void BlockSums(const UnpackedBlock& u, const int8_t* x, int32_t* sums) {
  TileZero<0>();
  TileZero<1>();
  TileZero<2>();
  TileZero<3>();
  TileLoad<kTileA>(u.levels, 64);
  TileLoad<kTileB>(x, 64);
  TileQuadProducts<0>();
  TileLoad<kTileA>(u.levels + 1024, 64);
  TileLoad<kTileB>(x + 1024, 64);
  TileQuadProducts<1>();
  TileLoad<kTileA>(u.levels + 2048, 64);
  TileLoad<kTileB>(x + 2048, 64);
  TileQuadProducts<2>();
  TileLoad<kTileA>(u.levels + 3072, 64);
  TileLoad<kTileB>(x + 3072, 64);
  TileQuadProducts<3>();
  TileStore<0>(sums, 64);
  TileStore<1>(sums + 256, 64);
  TileStore<2>(sums + 512, 64);
  TileStore<3>(sums + 768, 64);
}

// The block's sums (as BlockSums) into the accumulators acc (16 weight rows, 4 passes, 16
// lanes) of rows of weights, as AddBlock: each sum times d sc times x's scale (x_scale (16)),
// added, then dmin m times x's scaled sums (x_sums (4, 16)) off.
HWY_INLINE void AddBlockSums(const UnpackedBlock& u, const int32_t* sums, const float* x_scale,
                             const float* x_sums, int64_t rows, float* acc) {
  const __m512 xs = _mm512_loadu_ps(x_scale);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dsc = u.scales + r * 16;  // (8), then dmin m (8)
    for (int pass = 0; pass < 4; ++pass) {
      float* a = acc + r * 64 + 16 * pass;
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_loadu_si512(sums + pass * 256 + r * 16));
      __m512 v = _mm512_fmadd_ps(sum, _mm512_mul_ps(BroadcastPair(dsc + 2 * pass), xs),
                                 _mm512_loadu_ps(a));
      v = _mm512_fnmadd_ps(BroadcastPair(dsc + 8 + 2 * pass), _mm512_loadu_ps(x_sums + pass * 16),
                           v);
      _mm512_storeu_ps(a, v);
    }
  }
}

// The outputs of group g of x's rows (8 rows from 8 g, those below T) with weight rows
// [m0, m0 + rows) from their accumulators acc (16 weight rows, 4 passes, 16 lanes), plus the
// bias: each output's 8 sub-block accumulators a_l added in the VNNI kernels' order (Highway's
// SumOfLanes of 8 lanes), ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), for all 8 rows of x
// at once: pass 0 + pass 2 holds a0 + a4 in lane 2t, a2 + a6 in 2t + 1 (kPassSubBlock), pass 1 +
// pass 3 a1 + a5 and a3 + a7.
HWY_INLINE void StoreOutputs(const LinearParams& p, const float* acc, int64_t g, int64_t rows,
                             int64_t m0) {
  alignas(64) float totals[16][16];  // (weight rows, lanes: row t of x's total in lane 2t)
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = acc + r * 64;
    const __m512 even = _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(a + 32));
    const __m512 odd = _mm512_add_ps(_mm512_loadu_ps(a + 16), _mm512_loadu_ps(a + 48));
    const __m512 even_pairs = _mm512_add_ps(even, _mm512_permute_ps(even, 0xB1));
    const __m512 odd_pairs = _mm512_add_ps(odd, _mm512_permute_ps(odd, 0xB1));
    _mm512_store_ps(totals[r], _mm512_add_ps(even_pairs, odd_pairs));
  }
  for (int64_t t = 8 * g; t < std::min<int64_t>(p.rows, 8 * g + 8); ++t) {
    float* out = p.out + t * p.out_stride_row + m0;
    for (int64_t r = 0; r < rows; ++r) {
      const float total = totals[r][2 * (t - 8 * g)];
      out[r] = p.bias != nullptr ? total + p.bias[m0 + r] : total;
    }
  }
}

// Weight rows [m_begin, m_end) of F (K4K5LaneMapped) times every row of x (xq with amx set):
// out[t, m] (plus the bias), as RowsOf / OneRowOf sum it with the VNNI kernels. 16 weight rows
// at a time, block by block, into f32 accumulators per sub-block (lane 2t + s of pass p:
// sub-block kPassSubBlock[p][s] of row t of a group of 8), kept in this thread's buffer. May
// throw std::bad_alloc (the buffer).
template <class F>
void AmxRowsOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin, int64_t m_end) {
  const int64_t T = p.rows, blocks = p.in_features / F::kElements, row_bytes = blocks * F::kBytes;
  const int64_t groups = (T + 7) / 8;
  const uint8_t* weight = static_cast<const uint8_t*>(p.weight);  // (M, row_bytes)
  constexpr int64_t kLevelFloats = 4 * 16 * 64 / 4, kScaleFloats = 16 * 16;
  constexpr int64_t kSumFloats = 4 * 16 * 16;
  // acc (G, 16 weight rows, 4 passes, 16 lanes), sums (G, 4, 16 weight rows, 16 lanes), two
  // UnpackedBlocks.
  const int64_t acc_floats = groups * 16 * 4 * 16, sum_floats = groups * kSumFloats;
  float* acc = ThreadScratch(ScratchSlot::kQuantLinearAcc,
                             acc_floats + sum_floats + 2 * (kLevelFloats + kScaleFloats));
  int32_t* sums = reinterpret_cast<int32_t*>(acc + acc_floats);
  float* unpacked = acc + acc_floats + sum_floats;
  const UnpackedBlock two[2] = {{reinterpret_cast<uint8_t*>(unpacked), unpacked + kLevelFloats},
                                {reinterpret_cast<uint8_t*>(unpacked + kLevelFloats + kScaleFloats),
                                 unpacked + 2 * kLevelFloats + kScaleFloats}};
  LoadTileConfig(kK4K5Tiles);
  for (int64_t m0 = m_begin; m0 < m_end; m0 += 16) {
    const int64_t rows = std::min<int64_t>(16, m_end - m0);
    const uint8_t* w = weight + m0 * row_bytes;
    const NextTileFetch fetch(w, row_bytes, blocks, m_end - m0);
    // A short last tile multiplies zero levels in its missing rows.
    if (rows < 16) {
      for (const UnpackedBlock& u : two) std::memset(u.levels, 0, kLevelFloats * 4);
    }
    std::fill(acc, acc + acc_floats, 0.0f);
    UnpackBlock<F>(w, row_bytes, rows, 0, two[0]);
    for (int64_t b = 0; b < blocks; ++b) {
      fetch.Blocks(b, 1);
      const UnpackedBlock& u = two[b % 2];
      for (int64_t g = 0; g < groups; ++g) {
        BlockSums(u, xq.amx_levels.data() + (g * blocks + b) * 4 * 1024, sums + g * kSumFloats);
      }
      if (b + 1 < blocks) UnpackBlock<F>(w, row_bytes, rows, b + 1, two[(b + 1) % 2]);
      for (int64_t g = 0; g < groups; ++g) {
        AddBlockSums(u, sums + g * kSumFloats, xq.amx_scales.data() + (g * blocks + b) * 16,
                     xq.amx_sums.data() + (g * blocks + b) * 4 * 16, rows, acc + g * 16 * 64);
      }
    }
    for (int64_t g = 0; g < groups; ++g) StoreOutputs(p, acc + g * 16 * 64, g, rows, m0);
  }
  ReleaseTiles();
}

// Q8_0 (signed levels, 32 per block with one f16 d) at 2 or more rows of x: each block of 16
// weight rows is an A tile loaded straight from the weights (16 rows of its 32 level bytes,
// row_bytes apart), B the 8 rows of x's 32 levels of the block (QuantizedRows::amx_levels:
// 8 quads by 8 columns t), and C (16 x 8) its exact sums S, the integer sums the by-columns
// kernels of quant_columns_x86-inl.h form. Each then takes those kernels' f32 operations in
// their order: S times (x's scale times d) into accumulator b % 8, the 8 accumulators added
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): every output has its batch-1 bits.

// Tiles for Q8_0: C0-C3 (16 weight rows x 8 rows of x, int32), A0 and A1 (16 weight rows x 32
// levels), B0 and B1 (8 quads x 8 rows of x x 4 levels): two blocks' A and B in flight.
constexpr TileConfig kQ8Tiles = {
    1, 0, {}, {32, 32, 32, 32, 32, 32, 32, 32}, {16, 16, 16, 16, 16, 16, 8, 8}};

// Row t of x's block b of 32 levels and its scale into group t / 8's B tile (QuantizedRows::
// amx_levels: (groups, K / 32, 8 quads, 8 columns, 4)) and scales (amx_scales: (groups,
// K / 32, 16), row t's in lanes t % 8 and 8 + t % 8).
HWY_INLINE void StoreAmxBlock32(QuantizedRows* xq, int64_t t, int64_t b, const int8_t* levels,
                                float scale) {
  const int64_t blocks = xq->cols / 32, g = t / 8, column = t % 8;
  int8_t* tile = xq->amx_levels.data() + (g * blocks + b) * 256;  // (8, 8, 4)
  const __m256i at = _mm256_add_epi32(_mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224),
                                      _mm256_set1_epi32(static_cast<int32_t>(4 * column)));
  _mm256_i32scatter_epi32(tile, at, Load32(levels), 1);
  float* scales = xq->amx_scales.data() + (g * blocks + b) * 16;
  scales[column] = scales[8 + column] = scale;
}

// Blocks [b0, b0 + chunk) (chunk <= 8) of 16 weight rows times group g's 8 rows of x, their
// sums into sums (chunk, 16 weight rows, 8 rows of x); a: block b0's levels of the first row,
// rows row_bytes apart. Two blocks' tiles alternate so that loads overlap the multiplies.
template <class F>
HWY_INLINE void SignedChunkSums(const uint8_t* a, int64_t row_bytes, const int8_t* x, int64_t chunk,
                                int32_t* sums) {
  for (int64_t i = 0; i < chunk; i += 2) {
    const uint8_t* ai = a + i * F::kBytes;
    TileZero<0>();
    TileLoad<4>(ai, row_bytes);
    TileLoad<6>(x + i * 256, 32);
    amx::TileSignedBySigned<0, 4, 6>();
    if (i + 1 < chunk) {
      TileZero<1>();
      TileLoad<5>(ai + F::kBytes, row_bytes);
      TileLoad<7>(x + (i + 1) * 256, 32);
      amx::TileSignedBySigned<1, 5, 7>();
    }
    TileStore<0>(sums + i * 128, 32);
    if (i + 1 < chunk) TileStore<1>(sums + (i + 1) * 128, 32);
  }
}

// Weight rows [m_begin, m_end) of Q8_0 (F: its format) times every row of x (xq with amx set):
// out[t, m] (plus the bias), as ColumnsOf sums it. 16 weight rows at a time (a short last tile
// copied into a buffer of 16 rows, zero beyond them), 8 blocks at a time: accumulators
// (G, 8 pairs of weight rows, 8, 16 lanes: the pair's first row's 8 rows of x, then its second's)
// in this thread's buffer. May throw std::bad_alloc (the buffer).
template <class F>
void AmxSignedRowsOf(const LinearParams& p, const QuantizedRows& xq, int64_t m_begin,
                     int64_t m_end) {
  const int64_t T = p.rows, blocks = p.in_features / F::kElements, row_bytes = blocks * F::kBytes;
  const int64_t groups = (T + 7) / 8;
  const uint8_t* weight = static_cast<const uint8_t*>(p.weight);  // (M, row_bytes)
  // acc (G, 8, 8, 16), sums (8, 16, 8) int32, d (8, 16), and a short tile's rows (16, 8 blocks).
  const int64_t acc_floats = groups * 8 * 8 * 16;
  float* acc = ThreadScratch(ScratchSlot::kQuantLinearAcc,
                             acc_floats + 8 * 128 + 8 * 16 + 16 * 8 * F::kBytes / 4 + 16);
  int32_t* sums = reinterpret_cast<int32_t*>(acc + acc_floats);
  float* d = acc + acc_floats + 8 * 128;
  uint8_t* short_tile = reinterpret_cast<uint8_t*>(d + 8 * 16);  // (16, 8 blocks)
  // Lanes 0-7 take weight row 2q's d, lanes 8-15 row 2q + 1's.
  __m512i pick[8];
  for (int q = 0; q < 8; ++q) {
    pick[q] =
        _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * q), _mm512_set1_epi32(2 * q + 1));
  }
  LoadTileConfig(kQ8Tiles);
  for (int64_t m0 = m_begin; m0 < m_end; m0 += 16) {
    const int64_t rows = std::min<int64_t>(16, m_end - m0);
    const uint8_t* w = weight + m0 * row_bytes;
    const NextTileFetch fetch(w, row_bytes, blocks, m_end - m0);
    std::fill(acc, acc + acc_floats, 0.0f);
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
      const int64_t chunk = std::min<int64_t>(8, blocks - b0);
      // The tile's blocks: the weights themselves, or a short tile's copy (the rows past m_end
      // are not this thread's, or past the weights' end).
      const uint8_t* a = w + b0 * F::kBytes;
      int64_t stride = row_bytes;
      if (rows < 16) {
        std::memset(short_tile, 0, 16 * 8 * F::kBytes);
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(short_tile + r * 8 * F::kBytes, a + r * row_bytes, chunk * F::kBytes);
        }
        a = short_tile;
        stride = 8 * F::kBytes;
      }
      const __m512i row_offsets = _mm512_mullo_epi32(
          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
          _mm512_set1_epi32(static_cast<int32_t>(stride)));
      for (int64_t i = 0; i < chunk; ++i) {
        fetch.Blocks(b0 + i, 1);
        // The 16 rows' f16 d (the gather reads 4 bytes from each: d and two level bytes).
        const __m512i bits =
            _mm512_i32gather_epi32(row_offsets, a + i * F::kBytes + F::kScaleOffset, 1);
        _mm512_storeu_ps(d + 16 * i, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(bits)));
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int8_t* x = xq.amx_levels.data() + (g * blocks + b0) * 256;      // (chunk, 8, 8, 4)
        const float* x_scale = xq.amx_scales.data() + (g * blocks + b0) * 16;  // (chunk, 16)
        SignedChunkSums<F>(a + offsetof(quant::BlockQ8_0, qs), stride, x, chunk, sums);
        float* ag = acc + g * 8 * 8 * 16;
        for (int q = 0; q < (rows + 1) / 2; ++q) {
          for (int64_t i = 0; i < chunk; ++i) {
            float* a_qi = ag + (q * 8 + i) * 16;
            const __m512 sum = _mm512_cvtepi32_ps(_mm512_loadu_si512(sums + i * 128 + q * 16));
            const __m512 scale =
                _mm512_mul_ps(_mm512_loadu_ps(x_scale + 16 * i),
                              _mm512_permutexvar_ps(pick[q], _mm512_loadu_ps(d + 16 * i)));
            _mm512_storeu_ps(a_qi, _mm512_fmadd_ps(sum, scale, _mm512_loadu_ps(a_qi)));
          }
        }
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      const float* ag = acc + g * 8 * 8 * 16;
      for (int q = 0; q < (rows + 1) / 2; ++q) {
        __m512 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm512_loadu_ps(ag + (q * 8 + j) * 16);
        alignas(64) float total[16];
        _mm512_store_ps(
            total, TotalOfAccumulators(a, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); }));
        for (int64_t h = 0; h < 2 && 2 * q + h < rows; ++h) {
          const int64_t m = m0 + 2 * q + h;
          for (int64_t t = 8 * g; t < std::min<int64_t>(T, 8 * g + 8); ++t) {
            const float v = total[8 * h + t - 8 * g];
            p.out[t * p.out_stride_row + m] = p.bias != nullptr ? v + p.bias[m] : v;
          }
        }
      }
    }
  }
  ReleaseTiles();
}

}  // namespace i8
}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#endif  // SSMKIT_QUANT_DOT_VNNI

#endif  // include guard

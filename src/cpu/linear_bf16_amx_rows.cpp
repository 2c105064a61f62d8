// The bf16 products (linear_bf16.hpp) of 2 or more rows of x on AMX's bf16 tiles, 64 rows
// (kAmxColumns) at a time (linear.cpp cuts longer x): windows (the policy network's 60 frames),
// decode batches and prefill, in either layout.
// Dimension legend: T rows of x, K input features, M output features, J = ceil(K / 2) pairs of
// K, Jp = J rounded up to 16 (a B tile's rows), S = Jp / 16 steps of 32 elements of K.
//
// out^T = W x^T. W is the A operand as it lies, never packed: a tile is 16 of its rows by 32
// bf16 of K, loaded with W's row stride, so a weight read once per call costs no more than its
// bytes. x is packed once per call (PackAmxRows) into (Jp, 64) dwords, the pair x[t, 2j],
// x[t, 2j + 1] rounded to bf16 at [j, t], zeros past K and T: B tile c of a step is its 16
// pairs by x's rows [16c, 16c + 16). Tiles: C0-C3 the sums of 16 weight rows by x's 64 rows
// (only the ceil(T / 16) that hold rows of x), A tiles 4 and 5 (steps in turn), B tiles 6 and 7
// (columns in turn). K's tail (K not a multiple of 32) is one more step over a copy of the 16
// rows' last elements behind zeros. A feature-major out takes whole C tiles straight into its
// rows; the rest goes through a buffer of 16 x 64 floats (a row-major out gathers its rows from
// the buffer's columns), and the bias is added after the sums.
//
// tdpbf16ps sums each output over K's pairs in order, from zero, whatever the rows and columns
// around it: a row's bits depend neither on T, the other rows of x, nor the range of W's rows
// (a block short of 16 rows loads the rows before it and keeps only its own sums).
#include <algorithm>
#include <cstring>

#include "core/dtype.hpp"
#include "core/round_up.hpp"
#include "cpu/amx.hpp"
#include "cpu/amx_tiles.hpp"
#include "cpu/linear_bf16.hpp"
#include "cpu/thread_scratch.hpp"
#include "ssmkit/linear.hpp"

namespace ssmkit::cpu {

bool TakesAmxTiles(const LinearParams& p) {
  return SSMKIT_BF16_PRODUCTS_X86 && Bf16Products() && AmxBf16() &&
         p.weight_dtype == DType::kBF16 && p.rows >= 2;
}

int64_t AmxPairs(int64_t K) { return RoundUp((K + 1) / 2, int64_t{16}); }

#if SSMKIT_BF16_PRODUCTS_X86
namespace {

constexpr int64_t kCols = kAmxColumns;
constexpr int64_t kTileRows = kAmxTileRows;
constexpr int64_t kStepElements = 32;  // bf16 of K per A tile row

constexpr amx::TileConfig kTiles = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// C tile kC += A tile kA times B tile kC of the step's pairs b (16, 64), loaded into tile kB.
template <int kC, int kA, int kB>
inline void Column(const uint32_t* b) {
  amx::TileLoad<kB>(b + 16 * kC, kCols * sizeof(uint32_t));
  amx::TileBf16Pairs<kC, kA, kB>();
}

// The step's products with A tile kA into the n C tiles that hold rows of x.
template <int kA>
inline void Step(const uint32_t* b, int n) {
  Column<0, kA, 6>(b);
  if (n > 1) Column<1, kA, 7>(b);
  if (n > 2) Column<2, kA, 6>(b);
  if (n > 3) Column<3, kA, 7>(b);
}

inline void ZeroSums(int n) {
  amx::TileZero<0>();
  if (n > 1) amx::TileZero<1>();
  if (n > 2) amx::TileZero<2>();
  if (n > 3) amx::TileZero<3>();
}

// C tile c's 16 rows to dst, ld floats apart.
inline void StoreTile(int c, float* dst, int64_t ld) {
  const int64_t stride = ld * static_cast<int64_t>(sizeof(float));
  switch (c) {
    case 0:
      return amx::TileStore<0>(dst, stride);
    case 1:
      return amx::TileStore<1>(dst, stride);
    case 2:
      return amx::TileStore<2>(dst, stride);
    default:
      return amx::TileStore<3>(dst, stride);
  }
}

// The sums of the n C tiles for weight rows [m0, m0 + rows), rows [skip, skip + rows) of the
// tiles, into out, bias added. A feature-major out takes the whole tiles of a whole block
// straight from the tiles; the rest goes through c16 (16, 64).
SSMKIT_BF16_TARGET void StoreOutputs(const LinearParams& p, int n, int64_t skip, int64_t m0,
                                     int64_t rows, float* c16) {
  const int64_t T = p.rows;
  if (!p.out_row_major()) {  // out[t, m] at out + m * ldo + t
    const int64_t ldo = p.out_stride_feature;
    float* out = p.out + m0 * ldo;
    const int direct = skip == 0 && rows == kTileRows ? static_cast<int>(T / 16) : 0;
    for (int c = 0; c < n; ++c)
      StoreTile(c, c < direct ? out + 16 * c : c16 + 16 * c, c < direct ? ldo : kCols);
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + r * ldo;
      const float* sums = c16 + (skip + r) * kCols;
      for (int64_t t = 16 * direct; t < T; t += 16)
        _mm512_mask_storeu_ps(o + t, FirstLanes(T - t), _mm512_loadu_ps(sums + t));
      if (p.bias == nullptr) continue;
      const __m512 b = _mm512_set1_ps(p.bias[m0 + r]);
      for (int64_t t = 0; t < T; t += 16) {
        const __mmask16 mask = FirstLanes(T - t);
        _mm512_mask_storeu_ps(o + t, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o + t), b));
      }
    }
    return;
  }
  // Row-major out: row t's outputs m0 ... are column t of the tiles, gathered 64 floats apart.
  for (int c = 0; c < n; ++c) StoreTile(c, c16 + 16 * c, kCols);
  const __mmask16 mask = FirstLanes(rows);
  const __m512i down = LaneMultiples(kCols);
  const __m512 bias =
      p.bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, p.bias + m0);
  for (int64_t t = 0; t < T; ++t) {
    __m512 sums =
        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, down, c16 + skip * kCols + t, 4);
    if (p.bias != nullptr) sums = _mm512_add_ps(sums, bias);
    _mm512_mask_storeu_ps(p.out + t * p.out_stride_row + m0, mask, sums);
  }
}

// v[i] lane j -> v[j] lane i: a 16 x 16 matrix of dwords transposed in registers (4 x 4 within
// each 128-bit lane by two rounds of unpacks, then the 4 x 4 of lanes by two of lane shuffles).
// Each is the zero-masked form with every lane kept: GCC 12 warns that the plain
// forms' undefined pass-through vector may be used uninitialized.
SSMKIT_BF16_TARGET inline void TransposeDwords16(__m512i v[16]) {
  constexpr __mmask16 all16 = 0xFFFF;
  constexpr __mmask8 all8 = 0xFF;
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(all16, v[i], v[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all16, v[i], v[i + 1]);
  }
  // r[4a + c]: lane L holds rows 4a .. 4a + 3 of column 4L + c.
  __m512i r[16];
  for (int a = 0; a < 16; a += 4) {
    r[a] = _mm512_maskz_unpacklo_epi64(all8, t[a], t[a + 2]);
    r[a + 1] = _mm512_maskz_unpackhi_epi64(all8, t[a], t[a + 2]);
    r[a + 2] = _mm512_maskz_unpacklo_epi64(all8, t[a + 1], t[a + 3]);
    r[a + 3] = _mm512_maskz_unpackhi_epi64(all8, t[a + 1], t[a + 3]);
  }
  // Column 4L + c: lane L of r[c], r[4 + c], r[8 + c], r[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = _mm512_maskz_shuffle_i32x4(all16, r[c], r[4 + c], 0x44);
    const __m512i s1 = _mm512_maskz_shuffle_i32x4(all16, r[c], r[4 + c], 0xEE);
    const __m512i s2 = _mm512_maskz_shuffle_i32x4(all16, r[8 + c], r[12 + c], 0x44);
    const __m512i s3 = _mm512_maskz_shuffle_i32x4(all16, r[8 + c], r[12 + c], 0xEE);
    v[c] = _mm512_maskz_shuffle_i32x4(all16, s0, s2, 0x88);
    v[4 + c] = _mm512_maskz_shuffle_i32x4(all16, s0, s2, 0xDD);
    v[8 + c] = _mm512_maskz_shuffle_i32x4(all16, s1, s3, 0x88);
    v[12 + c] = _mm512_maskz_shuffle_i32x4(all16, s1, s3, 0xDD);
  }
}

}  // namespace

SSMKIT_BF16_TARGET void PackAmxRows(const LinearParams& p, uint32_t* xq) {
  const int64_t T = p.rows, K = p.in_features, J = (K + 1) / 2, Jp = AmxPairs(K);
  if (!p.x_row_major()) {
    PackPairColumns(p.x, p.x_stride_feature, K, T, 0, J, xq);
    std::memset(xq + J * kCols, 0, static_cast<size_t>((Jp - J) * kCols) * sizeof(uint32_t));
    return;
  }
  // 16 rows of x by 16 pairs at a time: each row's 32 elements rounded to bf16 in order (16
  // pairs, one dword each; zeros past K, so an odd K's last pair holds a zero and the pairs
  // past J are zero), then the 16 x 16 dwords transposed in registers into 16 rows of xq.
  // Rows of x past T are zeros.
  for (int64_t t0 = 0; t0 < T; t0 += 16) {
    for (int64_t j0 = 0; j0 < Jp; j0 += 16) {
      const int64_t k = 2 * j0;
      __m512i pairs[16];
      for (int64_t i = 0; i < 16; ++i) {
        const float* row = p.x + (t0 + i) * p.x_stride_row + k;
        pairs[i] = t0 + i < T ? (__m512i)_mm512_cvtne2ps_pbh(
                                    _mm512_maskz_loadu_ps(FirstLanes(K - k - 16), row + 16),
                                    _mm512_maskz_loadu_ps(FirstLanes(K - k), row))
                              : _mm512_setzero_si512();
      }
      TransposeDwords16(pairs);
      for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(xq + (j0 + j) * kCols + t0, pairs[j]);
    }
  }
}

SSMKIT_BF16_TARGET void AmxFewRows(const LinearParams& p, const uint32_t* xq, int64_t m_begin,
                                   int64_t m_end) {
  const int64_t K = p.in_features, M = p.out_features;
  const int64_t whole = K / kStepElements, steps = AmxPairs(K) / 16;
  const int n = static_cast<int>((p.rows + 15) / 16);
  // c16 (16, 64) f32, then the tail's A (16, 32) bf16, then (M < 16) W above zero rows (16, K).
  const int64_t tail_floats = kTileRows * kStepElements / 2;
  float* c16 = ThreadScratch(ScratchSlot::kLinearBf16AmxRows,
                             kTileRows * kCols + tail_floats + (M < kTileRows ? 8 * K : 0));
  uint16_t* tail = reinterpret_cast<uint16_t*>(c16 + kTileRows * kCols);
  const uint16_t* weight = static_cast<const uint16_t*>(p.weight);  // (M, K), ldw apart
  const int64_t ldw = p.weight_row_stride != 0 ? p.weight_row_stride : K;
  const uint16_t* padded = weight;
  int64_t lda = ldw;  // padded's row stride
  if (M < kTileRows) {
    uint16_t* a16 = tail + kTileRows * kStepElements;
    for (int64_t m = 0; m < M; ++m) {
      std::memcpy(a16 + m * K, weight + m * ldw, static_cast<size_t>(K) * sizeof(uint16_t));
    }
    std::memset(a16 + M * K, 0, static_cast<size_t>((kTileRows - M) * K) * sizeof(uint16_t));
    padded = a16;
    lda = K;
  }
  amx::LoadTileConfig(kTiles);
  for (int64_t m0 = m_begin; m0 < m_end; m0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, m_end - m0);
    const int64_t r0 = std::max<int64_t>(0, std::min(m0, M - kTileRows));
    const uint16_t* a = padded + r0 * lda;  // (16, K), lda apart
    // The next tile's rows, fetched into L1 a step ahead of their loads (the tile load stalls
    // on each of its 16 lines). Spread into L2 over the tile's steps instead (SpreadPrefetch,
    // as the other few-rows kernels), 4096 x 4096 at T = 8 took 1.37 ms instead of 1.17.
    const uint16_t* next =
        m0 + kTileRows < m_end ? padded + std::min(m0 + kTileRows, M - kTileRows) * lda : nullptr;
    ZeroSums(n);
    for (int64_t s = 0; s < steps; ++s) {
      const uint16_t* step = a + s * kStepElements;
      int64_t ld = lda;
      if (s == whole) {  // K's tail
        const int64_t k0 = whole * kStepElements;
        const __mmask32 left = static_cast<__mmask32>((1u << (K - k0)) - 1u);
        for (int64_t r = 0; r < kTileRows; ++r) {
          _mm512_storeu_si512(tail + r * kStepElements,
                              _mm512_maskz_loadu_epi16(left, a + r * lda + k0));
        }
        step = tail;
        ld = kStepElements;
      } else if (next != nullptr) {
        for (int64_t r = 0; r < kTileRows; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(next + r * lda + s * kStepElements),
                       _MM_HINT_T0);
        }
      }
      // A tiles 4 and 5 in turn: a step's load need not wait for the last step's products.
      if (s % 2 == 0) {
        amx::TileLoad<4>(step, ld * sizeof(uint16_t));
        Step<4>(xq + s * 16 * kCols, n);
      } else {
        amx::TileLoad<5>(step, ld * sizeof(uint16_t));
        Step<5>(xq + s * 16 * kCols, n);
      }
    }
    StoreOutputs(p, n, m0 - r0, m0, rows, c16);
  }
  amx::ReleaseTiles();
}

#else  // no AVX-512 BF16: never taken (TakesAmxTiles)

void PackAmxRows(const LinearParams&, uint32_t*) {}
void AmxFewRows(const LinearParams&, const uint32_t*, int64_t, int64_t) {}

#endif

}  // namespace ssmkit::cpu

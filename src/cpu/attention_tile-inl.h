// The tile machinery of the CPU attention kernels, shared by the forward and the backward:
// the register-blocked matrix product every tile product runs on, the query tile (its rows,
// their visible key intervals, q packed transposed), key/value rows packed as f32 tiles,
// and the masked exponentials.
// A Highway "-inl.h": included once per target from files that use foreach_target.h.
//
// Dimension legend: G = H / Hk query heads per kv head, R rows of a query tile (its Lq
// positions times the G heads: row r is position r / G, head hk * G + r % G), Rp = R rounded
// up to the vector length N, K keys of a key tile, E / Ev head dims, Ep / Evp rounded up to N.
//
// Scores are kept transposed, St (K, Rp): key j's scores against every row of the tile are
// contiguous, so the softmax's per-row maxima and sums run down the columns with one vector
// per N rows, and the key tile is the left operand of St = K Qt as it is stored (no
// transposition of K at all). q is scaled by scale * log2(e) as it is packed, so the softmax
// runs on exp2.
#if defined(SSMKIT_CPU_ATTENTION_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SSMKIT_CPU_ATTENTION_TILE_INL_H_
#undef SSMKIT_CPU_ATTENTION_TILE_INL_H_
#else
#define SSMKIT_CPU_ATTENTION_TILE_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/cache_line_vector.hpp"
#include "core/dtype.hpp"
#include "core/round_up.hpp"
#include "cpu/simd_math-inl.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "params/attention_params.hpp"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace attn {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;

// Tuned for speed, do not affect correctness: rows of the register block (6 x 2 vectors of
// accumulators leave room for the two B vectors and the broadcast in AVX2's 16 registers;
// with AVX-512's 32, 6 x 4 and the four B vectors: fewer loads per multiply-add), query rows
// per tile, keys per tile.
constexpr int kBlockRows = 6;
constexpr int kWideVecs = HWY_TARGET <= HWY_AVX3 ? 4 : 2;
constexpr int64_t kRowTarget = 64;
constexpr int64_t kKeyTile = 72;
constexpr int64_t kPrefetchRows = 24;

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

inline int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

// A left operand: element (r, p) at data[r * row + p * depth].
struct MatA {
  const float* data;
  int64_t row, depth;
  MatA Rows(int64_t r0) const { return {data + r0 * row, row, depth}; }
};

// C[kRows, kVecs * N] (+)= A[kRows, depth] B[depth, kVecs * N], B's rows ldb apart.
template <int kRows, int kVecs>
HWY_INLINE void MicroTile(MatA a, const float* HWY_RESTRICT b, int64_t ldb, int64_t depth,
                          float* HWY_RESTRICT c, int64_t ldc, bool accumulate,
                          float* HWY_RESTRICT colmax) {
  const DF df;
  const int64_t N = Lanes();
  VF acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) {
      acc[r][v] = accumulate ? hn::LoadU(df, c + r * ldc + v * N) : hn::Zero(df);
    }
  }
  const float* HWY_RESTRICT ap = a.data;
  for (int64_t p = 0; p < depth; ++p, ap += a.depth, b += ldb) {
    VF bv[kVecs];
    for (int v = 0; v < kVecs; ++v) bv[v] = hn::LoadU(df, b + v * N);
    for (int r = 0; r < kRows; ++r) {
      const VF ar = hn::Set(df, ap[r * a.row]);
      for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[r][v], df, c + r * ldc + v * N);
  }
  if (!colmax) return;
  for (int v = 0; v < kVecs; ++v) {
    VF m = hn::LoadU(df, colmax + v * N);
    for (int r = 0; r < kRows; ++r) m = hn::Max(m, acc[r][v]);
    hn::StoreU(m, df, colmax + v * N);
  }
}

// MicroTile for rows in [1, kBlockRows].
template <int kVecs>
HWY_INLINE void Block(int64_t rows, MatA a, const float* b, int64_t ldb, int64_t depth, float* c,
                      int64_t ldc, bool accumulate, float* colmax) {
  switch (rows) {
    case 6:
      return MicroTile<6, kVecs>(a, b, ldb, depth, c, ldc, accumulate, colmax);
    case 5:
      return MicroTile<5, kVecs>(a, b, ldb, depth, c, ldc, accumulate, colmax);
    case 4:
      return MicroTile<4, kVecs>(a, b, ldb, depth, c, ldc, accumulate, colmax);
    case 3:
      return MicroTile<3, kVecs>(a, b, ldb, depth, c, ldc, accumulate, colmax);
    case 2:
      return MicroTile<2, kVecs>(a, b, ldb, depth, c, ldc, accumulate, colmax);
    default:
      return MicroTile<1, kVecs>(a, b, ldb, depth, c, ldc, accumulate, colmax);
  }
}

// C (rows, cols) (+)= A (rows, depth) B (depth, cols); cols a multiple of N. Row blocks
// outside: a block's rows of A (a few lines) stay in L1 while the column panels pass, and B
// (a tile: <= 18 KiB) stays in L1 across the blocks. Panels outside measured the same.
// With `colmax` (cols), also colmax[c] = max(colmax[c], max_r C[r, c]): the softmax's
// per-row maxima of St, taken while the scores are still in registers.
inline void TileGemm(int64_t rows, int64_t cols, int64_t depth, MatA a, const float* b, int64_t ldb,
                     float* c, int64_t ldc, bool accumulate, float* colmax = nullptr) {
  const int64_t N = Lanes();
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min<int64_t>(kBlockRows, rows - r0);
    const MatA ar = a.Rows(r0);
    float* cr = c + r0 * ldc;
    int64_t c0 = 0;
    if constexpr (kWideVecs > 2) {
      for (; c0 + kWideVecs * N <= cols; c0 += kWideVecs * N) {
        Block<kWideVecs>(n, ar, b + c0, ldb, depth, cr + c0, ldc, accumulate,
                         colmax ? colmax + c0 : nullptr);
      }
    }
    for (; c0 + 2 * N <= cols; c0 += 2 * N) {
      Block<2>(n, ar, b + c0, ldb, depth, cr + c0, ldc, accumulate, colmax ? colmax + c0 : nullptr);
    }
    if (c0 < cols) {
      Block<1>(n, ar, b + c0, ldb, depth, cr + c0, ldc, accumulate, colmax ? colmax + c0 : nullptr);
    }
  }
}

// The tile sizes of one call.
struct Geometry {
  int64_t G, Lq, E, Ev, Ep, Evp;  // G = H / Hk, Lq positions per query tile
  int64_t rows_p;                 // Rp of a full query tile
};

inline Geometry MakeGeometry(const AttentionParams& p) {
  Geometry g;
  g.G = p.group();
  g.Lq = std::min(p.q_len, std::max<int64_t>(1, kRowTarget / g.G));
  g.E = p.head_dim;
  g.Ev = p.v_head_dim;
  g.Ep = RoundUp(g.E, Lanes());
  g.Evp = RoundUp(g.Ev, Lanes());
  g.rows_p = RoundUp(g.Lq * g.G, Lanes());
  return g;
}

// ------------------------------------------------------------------ scratch

// Carves buffers out of one allocation, each rounded to 16 floats (64 bytes) so that the
// blocks of different threads never share a cache line. With a null base it only measures.
template <class T>
class Carver {
 public:
  explicit Carver(T* base) : base_(base) {}
  T* Take(int64_t n) {
    T* taken = base_ ? base_ + used_ : nullptr;
    used_ += RoundUp(n, 16);
    return taken;
  }
  int64_t used() const { return used_; }

 private:
  T* base_;
  int64_t used_ = 0;
};

// Per-thread-block scratch of `Layout` (a struct with a static Carve(Carver<float>&,
// Carver<int32_t>&, const Shape&) filling its pointers) plus `shared` floats, carved from
// buffers of the calling thread grown before the parallel region: nothing is allocated inside
// it, and nothing once warm (decode: tests/decode_alloc_test.cpp). The buffers start on a
// cache line, and the Carver keeps every piece on one: from std::vector (16-byte aligned)
// every vector load and store of the tile products straddled two lines, and f32 prefill at
// L = 4096 ran at 0.51-0.59 of the FMA rate against 0.62-0.66 aligned (Intel Xeon, AVX-512;
// docs/benchmarks.md).
template <class Layout, class Shape>
class BlockScratch {
 public:
  BlockScratch(const Shape& shape, int blocks, int64_t shared) : shape_(shape) {
    Carver<float> f(nullptr);
    Carver<int32_t> i(nullptr);
    Layout::Carve(f, i, shape);
    floats_per_block_ = f.used();
    ints_per_block_ = i.used();
    static thread_local CacheLineVector<float> floats;
    static thread_local CacheLineVector<int32_t> ints;
    const auto need = static_cast<size_t>(blocks * floats_per_block_ + shared);
    if (floats.size() < need) floats.resize(need);
    if (ints.size() < static_cast<size_t>(blocks * ints_per_block_)) {
      ints.resize(static_cast<size_t>(blocks * ints_per_block_));
    }
    floats_ = floats.data();
    ints_ = ints.data();
    shared_ = floats_ + blocks * floats_per_block_;
  }
  Layout Block(int block) const {
    Carver<float> f(floats_ + block * floats_per_block_);
    Carver<int32_t> i(ints_ + block * ints_per_block_);
    return Layout::Carve(f, i, shape_);
  }
  float* Shared() const { return shared_; }

 private:
  Shape shape_;
  int64_t floats_per_block_ = 0, ints_per_block_ = 0;
  float *floats_ = nullptr, *shared_ = nullptr;
  int32_t* ints_ = nullptr;
};

// ------------------------------------------------------------------ keys and values

// Element offset of token t's row for kv head hk of sequence b in `view` (dense (B, S, Hk, .)
// or the paged pool).
inline int64_t KvRowOffset(const AttentionParams& p, const HeadsSeqView& view, int64_t b,
                           int64_t hk, int64_t t) {
  if (!p.paged) return view.Offset(b, t, hk);
  const PagedKvView& c = p.cache;
  const int64_t block = c.block_table[b * c.table_stride + t / c.block_size];
  return view.Offset(block, t % c.block_size, hk);
}

// A key or value tile as f32 rows, packed: K rows of `padded` floats (zeros past `width`),
// whatever the source's dtype, layout or paging. Reading k and v in place (f32, dense) was
// measured slower: their rows are Hk * E floats apart (1 KiB at E = 64, Hk = 4), so a tile's
// rows fall in a quarter of L1's sets and evict each other between the column panels of a
// product; packed rows 256 bytes apart spread over all sets. The copy is ~1.5% of a tile's
// multiply-adds.
struct RowsTile {
  const float* data;
  int64_t stride;
};

inline RowsTile LoadRows(const AttentionParams& p, const HeadsSeqView& view, int64_t b, int64_t hk,
                         int64_t k0, int64_t count, int64_t width, int64_t padded,
                         float* scratch /* (count, padded) */) {
  const DF df;
  const int64_t N = Lanes();
  const int64_t size = DTypeSize(view.dtype), line_elements = 64 / size;
  const int64_t keys = p.KeyCount(b);  // rows that exist, for the prefetch
  for (int64_t j = 0; j < count; ++j) {
    float* dst = scratch + j * padded;
    const int64_t offset = KvRowOffset(p, view, b, hk, k0 + j);
    // The rows of one kv head are Hk * E apart: a few per 4 KiB page, too few for the hardware
    // prefetcher to follow, so decode (every row from memory) waited on each one. Fetch the
    // row kPrefetchRows ahead (across tiles).
    if (k0 + j + kPrefetchRows < keys) {
      const char* ahead = static_cast<const char*>(view.data) +
                          KvRowOffset(p, view, b, hk, k0 + j + kPrefetchRows) * size;
      for (int64_t e = 0; e < width; e += line_elements) hwy::Prefetch(ahead + e * size);
    }
    int64_t e = 0;
    if (view.dtype == DType::kF32) {  // inline: a memcpy call per 256-byte row cost more
      const float* src = static_cast<const float*>(view.data) + offset;
      for (; e + N <= width; e += N) hn::StoreU(hn::LoadU(df, src + e), df, dst + e);
      for (; e < width; ++e) dst[e] = src[e];
    } else {
      RowToF32Simd(df, view.data, view.dtype, offset, width, dst);
    }
    std::fill(dst + width, dst + padded, 0.0f);
  }
  return {scratch, padded};
}

// ------------------------------------------------------------------ query tiles

// Rows [i0, i0 + positions) x the G heads of kv head hk, sequence b.
struct QueryTile {
  int64_t b = 0, hk = 0, i0 = 0, positions = 0;
  int64_t rows = 0, rows_p = 0;
  int64_t key_lo = 0, key_hi = -1;  // the union of the rows' visible keys (empty: lo > hi)
  int32_t* lo = nullptr;            // (Rp): row r sees keys [lo[r], hi[r]]; pad rows none
  int32_t* hi = nullptr;            // (Rp)
  bool Empty() const { return key_lo > key_hi; }
};

// Fills t's rows and their visible intervals. A query at position pos sees
// [max(0, first_key, pos - window + 1), pos]; lo and hi are non-decreasing in the row, so the
// union is [lo of the first non-empty row, hi of the last].
inline void SetUpQueryTile(const AttentionParams& p, int64_t b, int64_t hk, int64_t i0,
                           int64_t positions, int32_t* lo, int32_t* hi, QueryTile* t) {
  const int64_t G = p.group();
  t->b = b;
  t->hk = hk;
  t->i0 = i0;
  t->positions = positions;
  t->rows = positions * G;
  t->rows_p = RoundUp(t->rows, Lanes());
  t->lo = lo;
  t->hi = hi;
  t->key_lo = std::numeric_limits<int64_t>::max();
  t->key_hi = -1;
  const int64_t offset = p.KeyCount(b) - p.q_len, first = p.FirstKey(b);
  for (int64_t i = 0; i < positions; ++i) {
    const int64_t pos = offset + i0 + i;
    int64_t l = std::max<int64_t>(0, first);
    if (p.window > 0) l = std::max(l, pos - p.window + 1);
    const bool empty = l > pos;
    for (int64_t g = 0; g < G; ++g) {
      lo[i * G + g] = empty ? std::numeric_limits<int32_t>::max() : static_cast<int32_t>(l);
      hi[i * G + g] = empty ? -1 : static_cast<int32_t>(pos);
    }
    if (!empty) {
      t->key_lo = std::min(t->key_lo, l);
      t->key_hi = pos;
    }
  }
  for (int64_t r = t->rows; r < t->rows_p; ++r) {
    lo[r] = std::numeric_limits<int32_t>::max();
    hi[r] = -1;
  }
}

// The tensor row of tile row r: (b, i0 + r / G, hk * G + r % G).
inline int64_t RowOffset(const QueryTile& t, const HeadsSeqView& view, int64_t G, int64_t r) {
  return view.Offset(t.b, t.i0 + r / G, t.hk * G + r % G);
}

// Qt (E, Rp) = the tile's q rows times `factor`, transposed; zeros in the pad columns.
inline void PackTransposed(const QueryTile& t, const HeadsSeqView& view, int64_t G, int64_t width,
                           float factor, float* row_scratch /* (width) */,
                           float* out /* (width, Rp) */) {
  const DF df;
  for (int64_t r = 0; r < t.rows_p; ++r) {
    if (r < t.rows)
      RowToF32Simd(df, view.data, view.dtype, RowOffset(t, view, G, r), width, row_scratch);
    for (int64_t e = 0; e < width; ++e) {
      out[e * t.rows_p + r] = r < t.rows ? row_scratch[e] * factor : 0.0f;
    }
  }
}

// ------------------------------------------------------------------ masked exponentials

// Whether the keys [k0, k0 + count) lie inside every interval of rows [r0, r0 + N): then no
// mask is needed for that column block. Pad rows (r >= R) are ignored: their columns are
// computed (finite: q is zero there) but never read.
inline bool Unmasked(const QueryTile& t, int64_t r0, int64_t k0, int64_t count) {
  for (int64_t r = r0; r < std::min(r0 + Lanes(), t.rows); ++r) {
    if (t.lo[r] > k0 || t.hi[r] < k0 + count - 1) return false;
  }
  return true;
}

// Whether no key of [k0, k0 + count) is visible to any of rows [r0, r0 + N).
inline bool Invisible(const QueryTile& t, int64_t r0, int64_t k0, int64_t count) {
  for (int64_t r = r0; r < std::min(r0 + Lanes(), t.rows); ++r) {
    if (t.lo[r] <= k0 + count - 1 && t.hi[r] >= k0) return false;
  }
  return true;
}

// The mask of rows [r0, r0 + N) that see key `key`.
HWY_INLINE hn::Mask<DF> VisibleMask(const QueryTile& t, int64_t r0, int64_t key) {
  const DI di;
  const auto k = hn::Set(di, static_cast<int32_t>(key));
  const auto visible = hn::And(hn::Not(hn::Lt(k, hn::LoadU(di, t.lo + r0))),
                               hn::Not(hn::Gt(k, hn::LoadU(di, t.hi + r0))));
  return hn::RebindMask(DF(), visible);
}

// P = 2^(St - ref) over column block r0 (ref per row), zero where masked, in place; returns
// the column sums. Masked entries may hold anything finite or -inf on entry.
HWY_INLINE VF ExpColumns(const QueryTile& t, int64_t r0, int64_t k0, int64_t count, VF ref,
                         float* st /* (K, Rp) */) {
  const DF df;
  VF sum = hn::Zero(df);
  if (Unmasked(t, r0, k0, count)) {
    for (int64_t j = 0; j < count; ++j) {
      float* s = st + j * t.rows_p + r0;
      const VF e = Exp2Fast(df, hn::Sub(hn::LoadU(df, s), ref));
      hn::StoreU(e, df, s);
      sum = hn::Add(sum, e);
    }
    return sum;
  }
  for (int64_t j = 0; j < count; ++j) {
    float* s = st + j * t.rows_p + r0;
    const VF e = hn::IfThenElseZero(VisibleMask(t, r0, k0 + j),
                                    Exp2Fast(df, hn::Sub(hn::LoadU(df, s), ref)));
    hn::StoreU(e, df, s);
    sum = hn::Add(sum, e);
  }
  return sum;
}

// Zeros column block r0 of St (no row there sees the tile).
HWY_INLINE void ZeroColumns(const QueryTile& t, int64_t r0, int64_t count, float* st) {
  const DF df;
  for (int64_t j = 0; j < count; ++j) hn::StoreU(hn::Zero(df), df, st + j * t.rows_p + r0);
}

}  // namespace attn
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SSMKIT_CPU_ATTENTION_TILE_INL_H_

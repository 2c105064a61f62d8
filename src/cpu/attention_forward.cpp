// CPU attention forward, dense and paged: flash attention over query tiles and key tiles.
// Dimension legend: B batch, L query length, H heads, Hk kv heads, G = H / Hk, E / Ev head
// dims, R rows of a query tile (positions x the G heads of one kv head), K keys of a key tile;
// attention_tile-inl.h has the tile layouts.
//
// A work item is one query tile of one (sequence, kv head): every query head of the group is
// in the tile, so each key/value tile is read once for all of them. For each key tile in the
// tile's visible range (tiles no row can see are never visited; the mask is applied only on
// the tiles that straddle an interval's edge):
//   St = K Qt                 (scores in log2 units: Qt holds q * scale * log2 e)
//   m' = max(m, max_j St),  alpha = 2^(m - m'),  P = 2^(St - m'),  l' = alpha l + sum_j P
//   O' = alpha O + P V
// and at the end out = O / l, lse = (m + log2 l) ln 2 (a row with no visible key: 0, -inf).
//
// Flash-decoding: a query tile that is the only one of its sequence (decode, short chunks)
// splits its key range into pieces of about kSplitKeys keys, each an item of its own leaving
// (O, m, l); the pieces are merged in order afterwards,
//   M = max_s m_s,  l = sum_s 2^(m_s - M) l_s,  O = sum_s 2^(m_s - M) O_s,
// so one long sequence uses every thread. The split depends only on the shapes and lengths,
// and every item's arithmetic is fixed, so the result does not depend on the thread count or
// on which thread takes which item (items are claimed dynamically, largest first).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/float_mode.hpp"
#include "core/parallel.hpp"
#include "cpu/attention.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention_forward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// Included once per target by foreach_target.h above (after highway.h).
#include "cpu/attention_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace {
using namespace attn;  // NOLINT: this file is the attention kernel

// Tuned for speed, do not affect correctness beyond rounding: keys per flash-decoding piece,
// and the multiply-adds below which a call stays on the calling thread.
constexpr int64_t kSplitKeys = 512;
// At most this many pieces per (sequence, kv head): the decode workspace (the pieces' partial
// results) and the item list are sized for it once, so that a growing context never makes a
// decode step allocate (tests/decode_alloc_test.cpp).
constexpr int64_t kMaxPieces = 16;
constexpr double kMinParallelFmas = 1 << 17;

// One block's scratch.
struct Scratch {
  float* qt;             // (E, Rp)
  float* row;            // (max(E, Ev) + N)
  float* kpack;          // (K, E)
  float* vpack;          // (K, Evp)
  float* st;             // (K, Rp)
  float* o;              // (Rp, Evp)
  float *m, *l, *alpha;  // (Rp)
  float* tile_max;       // (Rp)
  int32_t *lo, *hi;      // (Rp)
  static Scratch Carve(Carver<float>& f, Carver<int32_t>& i, const Geometry& g) {
    const int64_t rp = g.rows_p;
    return {f.Take(g.E * rp),
            f.Take(std::max(g.E, g.Ev) + Lanes()),
            f.Take(kKeyTile * g.E),
            f.Take(kKeyTile * g.Evp),
            f.Take(kKeyTile * rp),
            f.Take(rp * g.Evp),
            f.Take(rp),
            f.Take(rp),
            f.Take(rp),
            f.Take(rp),
            i.Take(rp),
            i.Take(rp)};
  }
};
using Workspace = BlockScratch<Scratch, Geometry>;

// The flash-decoding pieces' results, each O (Rp, Evp), then m (Rp) and l (Rp).
int64_t PartialSize(const Geometry& g) { return g.rows_p * g.Evp + 2 * g.rows_p; }
float* Partial(const Geometry& g, const Workspace& ws, int64_t piece) {
  return ws.Shared() + piece * PartialSize(g);
}

// A query tile's key range [key_lo, key_lo + tiles * K) cut into `pieces` runs of tiles;
// this item does run `piece` (pieces = 1: the whole range, written out directly).
struct Item {
  int64_t b, hk, i0, positions;
  int64_t piece, pieces;
  int64_t partial;  // the first piece's slot in the partials (pieces > 1)
  double fmas;      // its work, for the thread count
};

const HeadsSeqView& KeyView(const AttentionParams& p) { return p.paged ? p.cache.k_blocks : p.k; }
const HeadsSeqView& ValueView(const AttentionParams& p) { return p.paged ? p.cache.v_blocks : p.v; }

int64_t TileCount(const QueryTile& t) {
  return t.Empty() ? 0 : (t.key_hi - t.key_lo + kKeyTile) / kKeyTile;
}

// Work and flash-decoding pieces of one query tile; the tile's rows' intervals land in `t`.
struct TilePlan {
  int64_t pieces;
  double fmas;  // per piece
};
TilePlan PlanTile(const AttentionParams& p, const Geometry& g, const QueryTile& t,
                  int64_t query_tiles) {
  const int64_t key_tiles = TileCount(t);
  int64_t pieces = 1;
  if (query_tiles == 1 && key_tiles > 1) {
    const int64_t keys = t.key_hi - t.key_lo + 1;
    pieces = std::min({key_tiles, (keys + kSplitKeys - 1) / kSplitKeys, kMaxPieces});
  }
  double visible = 0.0;  // keys summed over the rows
  for (int64_t r = 0; r < t.rows; r += g.G) {
    const int64_t keys = int64_t{t.hi[r]} - int64_t{t.lo[r]} + 1;
    visible += static_cast<double>(std::max<int64_t>(0, keys) * g.G);
  }
  return {pieces, visible * static_cast<double>(g.E + g.Ev) / static_cast<double>(pieces)};
}

// The items. Several query tiles per sequence (prefill): grouped by (sequence, kv head), each
// group packed once (PackGroup), its largest query tiles (latest positions) first. One query
// tile per sequence (decode): by sequence, then piece, then kv head, so that consecutive items
// read the same stretch of the cache (a token's kv heads are adjacent in memory): by kv head
// first, every head re-streamed the whole cache from memory for a quarter of its bytes.
// `lo` and `hi` are scratch (Rp).
void ListItems(const AttentionParams& p, const Geometry& g, int32_t* lo, int32_t* hi,
               std::vector<Item>* items, int64_t* partials) {
  items->clear();
  *partials = 0;
  const int64_t tiles = (p.q_len + g.Lq - 1) / g.Lq;
  items->reserve(static_cast<size_t>(p.batch * p.kv_heads * (tiles > 1 ? tiles : kMaxPieces)));
  QueryTile t;
  for (int64_t b = 0; b < p.batch; ++b) {
    if (tiles > 1) {
      for (int64_t hk = 0; hk < p.kv_heads; ++hk) {
        for (int64_t qt = tiles - 1; qt >= 0; --qt) {
          const int64_t i0 = qt * g.Lq, positions = std::min(g.Lq, p.q_len - i0);
          SetUpQueryTile(p, b, hk, i0, positions, lo, hi, &t);
          const TilePlan plan = PlanTile(p, g, t, tiles);
          items->push_back({b, hk, i0, positions, 0, 1, -1, plan.fmas});
        }
      }
      continue;
    }
    SetUpQueryTile(p, b, 0, 0, p.q_len, lo, hi, &t);
    const TilePlan plan = PlanTile(p, g, t, tiles);
    for (int64_t s = 0; s < plan.pieces; ++s) {
      for (int64_t hk = 0; hk < p.kv_heads; ++hk) {
        const int64_t first = plan.pieces > 1 ? *partials + hk * plan.pieces : -1;
        items->push_back({b, hk, 0, p.q_len, s, plan.pieces, first, plan.fmas});
      }
    }
    if (plan.pieces > 1) *partials += p.kv_heads * plan.pieces;
  }
}

// The online softmax over one key tile: St becomes P, and m, l, alpha are updated per row.
// tile_max (Rp): St's column maxima, masked entries included (TileGemm's colmax); recomputed
// here for the column blocks the mask touches.
void SoftmaxTile(const QueryTile& t, int64_t k0, int64_t count, const float* tile_maxima, float* st,
                 float* m, float* l, float* alpha) {
  const DF df;
  const int64_t N = Lanes();
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  for (int64_t r0 = 0; r0 < t.rows_p; r0 += N) {
    if (Invisible(t, r0, k0, count)) {
      ZeroColumns(t, r0, count, st);
      hn::StoreU(hn::Set(df, 1.0f), df, alpha + r0);
      continue;
    }
    VF tile_max = hn::LoadU(df, tile_maxima + r0);
    if (!Unmasked(t, r0, k0, count)) {
      tile_max = neg_inf;
      for (int64_t j = 0; j < count; ++j) {
        const VF s = hn::LoadU(df, st + j * t.rows_p + r0);
        tile_max = hn::Max(tile_max, hn::IfThenElse(VisibleMask(t, r0, k0 + j), s, neg_inf));
      }
    }
    const VF m_old = hn::LoadU(df, m + r0);
    const VF m_new = hn::Max(m_old, tile_max);
    // A row that has seen no key yet keeps m = -inf; 0 stands in as its reference so that
    // no -inf - -inf appears (its P is all masked to 0 anyway).
    const VF ref = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    const VF a = Exp2Fast(df, hn::Sub(m_old, ref));
    const VF sum = ExpColumns(t, r0, k0, count, ref, st);
    hn::StoreU(hn::MulAdd(hn::LoadU(df, l + r0), a, sum), df, l + r0);
    hn::StoreU(m_new, df, m + r0);
    hn::StoreU(a, df, alpha + r0);
  }
}

// Rows r of O (Rp, Evp) times alpha[r], where alpha[r] != 1.
void RescaleRows(int64_t rows, int64_t Evp, const float* alpha, float* o) {
  const DF df;
  const int64_t N = Lanes();
  for (int64_t r = 0; r < rows; ++r) {
    if (alpha[r] == 1.0f) continue;
    const VF a = hn::Set(df, alpha[r]);
    for (int64_t e = 0; e < Evp; e += N) {
      hn::StoreU(hn::Mul(a, hn::LoadU(df, o + r * Evp + e)), df, o + r * Evp + e);
    }
  }
}

// out row r = O[r] / l[r] (0 when l = 0) and lse = (m + log2 l) ln 2 (-inf when l = 0).
void WriteRow(const AttentionParams& p, const Geometry& g, const QueryTile& t, int64_t r,
              const float* o /* (Evp) */, float m, float l, float* row /* (Evp) */) {
  const DF df;
  const int64_t N = Lanes();
  const VF inv = hn::Set(df, l > 0.0f ? 1.0f / l : 0.0f);
  for (int64_t e = 0; e < g.Evp; e += N)
    hn::StoreU(hn::Mul(inv, hn::LoadU(df, o + e)), df, row + e);
  RowFromF32Simd(df, row, g.Ev, p.out.data, p.out.dtype, RowOffset(t, p.out, g.G, r));
  if (p.lse) {
    const int64_t i = t.i0 + r / g.G, h = t.hk * g.G + r % g.G;
    p.lse[t.b * p.lse_stride_batch + h * p.lse_stride_head + i] =
        l > 0.0f ? (m + std::log2(l)) * kLn2 : -std::numeric_limits<float>::infinity();
  }
}

// The keys and values of one (sequence, kv head) packed once for all its query tiles: K rows
// of E floats, V rows of Evp (zero padded), contiguous. Null: each tile packs its own (one
// query tile per sequence, decode: every key is read once anyway).
struct PackedKv {
  const float* k = nullptr;  // (S, E)
  const float* v = nullptr;  // (S, Evp)
};

// Packs the first `keys` keys and values of (b, hk) into `k` (keys, E) and `v` (keys, Evp),
// rows split over the threads. Prefill re-reads every key once per query tile; from the
// caller's tensors (rows Hk * E floats apart, bf16 or paged) that was cache-miss bound
// (measured: a third of the time in the row copies), from this contiguous copy the tiles
// stream in order.
void PackGroup(const AttentionParams& p, const Geometry& g, int64_t b, int64_t hk, int64_t keys,
               int blocks, float* k, float* v) {
  auto pack = [&](int64_t first, int64_t last) {
    LoadRows(p, KeyView(p), b, hk, first, last - first, g.E, g.E, k + first * g.E);
    LoadRows(p, ValueView(p), b, hk, first, last - first, g.Ev, g.Evp, v + first * g.Evp);
  };
  if (blocks == 1) return pack(0, keys);  // a small call stays on the calling thread
  ParallelFor(blocks, [&](int64_t begin, int64_t end, int) {
    pack(keys * begin / blocks, keys * end / blocks);
  });
}

void RunItem(const AttentionParams& p, const Geometry& g, const Item& item, const Scratch& s,
             const Workspace& ws, PackedKv packed) {
  QueryTile t;
  SetUpQueryTile(p, item.b, item.hk, item.i0, item.positions, s.lo, s.hi, &t);
  const int64_t tiles = TileCount(t);
  std::fill(s.o, s.o + t.rows_p * g.Evp, 0.0f);
  std::fill(s.m, s.m + t.rows_p, -std::numeric_limits<float>::infinity());
  std::fill(s.l, s.l + t.rows_p, 0.0f);
  if (tiles > 0) PackTransposed(t, p.q, g.G, g.E, p.scale * kLog2e, s.row, s.qt);
  const int64_t first = tiles * item.piece / item.pieces;
  const int64_t last = tiles * (item.piece + 1) / item.pieces;
  for (int64_t tile = first; tile < last; ++tile) {
    const int64_t k0 = t.key_lo + tile * kKeyTile;
    const int64_t count = std::min(kKeyTile, t.key_hi + 1 - k0);
    const RowsTile k = packed.k ? RowsTile{packed.k + k0 * g.E, g.E}
                                : LoadRows(p, KeyView(p), t.b, t.hk, k0, count, g.E, g.E, s.kpack);
    std::fill(s.tile_max, s.tile_max + t.rows_p, -std::numeric_limits<float>::infinity());
    TileGemm(count, t.rows_p, g.E, MatA{k.data, k.stride, 1}, s.qt, t.rows_p, s.st, t.rows_p, false,
             s.tile_max);
    SoftmaxTile(t, k0, count, s.tile_max, s.st, s.m, s.l, s.alpha);
    RescaleRows(t.rows, g.Evp, s.alpha, s.o);
    const RowsTile v = packed.v
                           ? RowsTile{packed.v + k0 * g.Evp, g.Evp}
                           : LoadRows(p, ValueView(p), t.b, t.hk, k0, count, g.Ev, g.Evp, s.vpack);
    TileGemm(t.rows, g.Evp, count, MatA{s.st, 1, t.rows_p}, v.data, v.stride, s.o, g.Evp, true);
  }
  if (item.pieces == 1) {
    for (int64_t r = 0; r < t.rows; ++r)
      WriteRow(p, g, t, r, s.o + r * g.Evp, s.m[r], s.l[r], s.row);
    return;
  }
  float* part = Partial(g, ws, item.partial + item.piece);
  std::copy(s.o, s.o + t.rows_p * g.Evp, part);
  std::copy(s.m, s.m + t.rows_p, part + t.rows_p * g.Evp);
  std::copy(s.l, s.l + t.rows_p, part + t.rows_p * g.Evp + t.rows_p);
}

// Merges the pieces of one split query tile (the item of its piece 0) into out and lse.
void MergePieces(const AttentionParams& p, const Geometry& g, const Item& item, const Scratch& s,
                 const Workspace& ws) {
  const DF df;
  const int64_t N = Lanes();
  QueryTile t;
  SetUpQueryTile(p, item.b, item.hk, item.i0, item.positions, s.lo, s.hi, &t);
  const int64_t rp = t.rows_p;
  for (int64_t r = 0; r < t.rows; ++r) {
    float M = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < item.pieces; ++k) {
      M = std::max(M, Partial(g, ws, item.partial + k)[rp * g.Evp + r]);
    }
    std::fill(s.o, s.o + g.Evp, 0.0f);
    float l = 0.0f;
    for (int64_t k = 0; k < item.pieces && M > -std::numeric_limits<float>::infinity(); ++k) {
      const float* part = Partial(g, ws, item.partial + k);
      const float w = std::exp2(part[rp * g.Evp + r] - M);  // 0 for a piece that saw no key
      l += w * part[rp * g.Evp + rp + r];
      const VF wv = hn::Set(df, w);
      for (int64_t e = 0; e < g.Evp; e += N) {
        hn::StoreU(hn::MulAdd(wv, hn::LoadU(df, part + r * g.Evp + e), hn::LoadU(df, s.o + e)), df,
                   s.o + e);
      }
    }
    WriteRow(p, g, t, r, s.o, M, l, s.row);
  }
}

Status ForwardImpl(const AttentionParams& p) {
  const Geometry g = MakeGeometry(p);
  const int64_t query_tiles = (p.q_len + g.Lq - 1) / g.Lq;
  thread_local std::vector<Item> items;
  int64_t partials = 0;
  {
    const Workspace listing(g, 1, 0);  // for the rows' intervals
    const Scratch s = listing.Block(0);
    ListItems(p, g, s.lo, s.hi, &items, &partials);
  }
  double fmas = 0.0;
  for (const Item& item : items) fmas += item.fmas;
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t wanted = std::max<int64_t>(1, static_cast<int64_t>(fmas / kMinParallelFmas));
  const int blocks = ParallelBlocks(std::min(n, wanted));
  // Several query tiles per sequence: each (sequence, kv head) is packed once (PackGroup);
  // else the flash-decoding pieces' partial results.
  const bool prepack = query_tiles > 1;
  int64_t max_keys = 0;
  for (int64_t b = 0; prepack && b < p.batch; ++b) max_keys = std::max(max_keys, p.KeyCount(b));
  // The decode path's partials: room for kMaxPieces per (sequence, kv head), whatever this
  // call's lengths need, so that the workspace does not grow with the context.
  const int64_t partial_room = p.batch * p.kv_heads * kMaxPieces;
  const Workspace ws(g, blocks, prepack ? max_keys * (g.E + g.Evp) : partial_room * PartialSize(g));
  // Workers get the list by pointer: the name `items` inside the region is their own copy.
  const Item* list = items.data();
  auto run = [&](int64_t begin, int64_t end, PackedKv packed) {
    std::atomic<int64_t> next{begin};
    ParallelFor(blocks, [&](int64_t, int64_t, int block) {
      const Scratch s = ws.Block(block);
      for (int64_t i = next.fetch_add(1); i < end; i = next.fetch_add(1)) {
        RunItem(p, g, list[i], s, ws, packed);
      }
    });
  };
  if (!prepack) {
    run(0, n, {});
  } else {  // one group of query_tiles items per (sequence, kv head), in ListItems' order
    float* k = ws.Shared();
    float* v = k + max_keys * g.E;
    for (int64_t group = 0; group < p.batch * p.kv_heads; ++group) {
      const int64_t b = group / p.kv_heads, hk = group % p.kv_heads;
      PackGroup(p, g, b, hk, p.KeyCount(b), blocks, k, v);
      run(group * query_tiles, (group + 1) * query_tiles, {k, v});
    }
  }
  if (partials > 0) {
    const Scratch s = ws.Block(0);
    for (const Item& item : items) {
      if (item.pieces > 1 && item.piece == 0) MergePieces(p, g, item, s, ws);
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(ForwardImpl);

Status AttentionForward(const AttentionParams& p) {
  FlushDenormals flush;
  return HWY_DYNAMIC_DISPATCH(ForwardImpl)(p);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

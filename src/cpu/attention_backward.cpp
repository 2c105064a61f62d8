// CPU attention backward (dense): the flash-attention backward in two passes, so that every
// gradient element is summed by one thread in a fixed order (no atomics, no per-thread copies
// of dq to add up) and the bits do not depend on the thread count.
// Dimension legend: B batch, L query length, S key length, H heads, Hk kv heads, G = H / Hk,
// E / Ev head dims, R rows of a query tile, K keys of a key tile; attention_tile-inl.h has the
// tile layouts.
//
// Both passes recompute, per (query tile, key tile) pair, with Qt = q * scale * log2 e:
//   St  = K Qt,  Pt = 2^(St - lse log2 e)   (masked to 0 outside the rows' intervals)
//   dPt = V dOt, dSt = Pt (dPt - D),  D_r = dout_r . out_r
// Per (sequence, kv head), its keys, values and query tiles are packed once (Group), then
// pass 1, one item per key tile, over the query tiles in order:
//   dv += Pt dO,   dk += dSt (q * scale * log2 e), times ln 2 at the end
// pass 2, one item per query tile, over the key tiles in order:
//   dq += dS K, times scale at the end.
// The recomputation costs 4E + 3Ev multiply-adds per visible (query, key) pair against the
// 3E + 2Ev of a one-pass backward with atomics.
#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "core/float_mode.hpp"
#include "core/parallel.hpp"
#include "cpu/attention.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// Included once per target by foreach_target.h above (after highway.h).
#include "cpu/attention_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace {
using namespace attn;  // NOLINT: this file is the attention kernel

// What both passes need of one query tile, packed once per call (PackQueries) and read by
// every pair the tile is in: q * c transposed and row-major, dout transposed and row-major,
// D and lse * log2 e (pad rows: zeros, and an lse of 0 so that their P stays finite).
struct QueryPack {
  float* qt;        // (E, Rp)
  float* qrow;      // (Rp, Ep)
  float* dot;       // (Ev, Rp)
  float* dorow;     // (Rp, Evp)
  float *D, *lse2;  // (Rp)
  static QueryPack Carve(Carver<float>& f, const Geometry& g) {
    const int64_t rp = g.rows_p;
    return {f.Take(g.E * rp),   f.Take(rp * g.Ep), f.Take(g.Ev * rp),
            f.Take(rp * g.Evp), f.Take(rp),        f.Take(rp)};
  }
  static int64_t Size(const Geometry& g) {
    Carver<float> f(nullptr);
    Carve(f, g);
    return f.used();
  }
};

struct Scratch {
  float* row;        // (max(Ep, Evp) + N)
  float *st, *dst;   // (K, Rp): P, then dS (both transposed)
  float *dk, *dv;    // (K, Ep), (K, Evp): pass 1's sums
  float* dq;         // (Rp, Ep): pass 2's sum
  int32_t *lo, *hi;  // (Rp)
  static Scratch Carve(Carver<float>& f, Carver<int32_t>& i, const Geometry& g) {
    const int64_t rp = g.rows_p, K = kKeyTile;
    Scratch s;
    s.row = f.Take(std::max(g.Ep, g.Evp) + Lanes());
    s.st = f.Take(K * rp);
    s.dst = f.Take(K * rp);
    s.dk = f.Take(K * g.Ep);
    s.dv = f.Take(K * g.Evp);
    s.dq = f.Take(rp * g.Ep);
    s.lo = i.Take(rp);
    s.hi = i.Take(rp);
    return s;
  }
};
using Workspace = BlockScratch<Scratch, Geometry>;

void PackQueryTile(const AttentionBwdParams& p, const Geometry& g, const QueryTile& t,
                   float* row /* (max(Ep, Evp) + N) */, const QueryPack& q) {
  const DF df;
  const float c = p.scale * kLog2e;
  PackTransposed(t, p.q, g.G, g.E, c, row, q.qt);
  PackTransposed(t, p.dout, g.G, g.Ev, 1.0f, row, q.dot);
  for (int64_t r = 0; r < t.rows_p; ++r) {
    q.D[r] = 0.0f;
    q.lse2[r] = 0.0f;
    float* qrow = q.qrow + r * g.Ep;
    float* dorow = q.dorow + r * g.Evp;
    for (int64_t e = 0; e < g.Ep; ++e) qrow[e] = e < g.E ? q.qt[e * t.rows_p + r] : 0.0f;
    for (int64_t e = 0; e < g.Evp; ++e) dorow[e] = e < g.Ev ? q.dot[e * t.rows_p + r] : 0.0f;
    if (r >= t.rows) continue;
    const int64_t i = t.i0 + r / g.G, h = t.hk * g.G + r % g.G;
    q.lse2[r] = p.lse[t.b * p.lse_stride_batch + h * p.lse_stride_head + i] * kLog2e;
    RowToF32Simd(df, p.out.data, p.out.dtype, RowOffset(t, p.out, g.G, r), g.Ev, row);
    float D = 0.0f;
    for (int64_t e = 0; e < g.Ev; ++e) D += dorow[e] * row[e];
    q.D[r] = D;
  }
}

// St = P and dSt = dS of the pair (query tile t, keys [k0, k0 + count)); k and v are the key
// and value rows (left operands: only the first E / Ev floats of each row are read).
void GradTile(const Geometry& g, const QueryTile& t, const QueryPack& q, int64_t k0, int64_t count,
              RowsTile k, RowsTile v, const Scratch& s) {
  const DF df;
  const int64_t N = Lanes(), rp = t.rows_p;
  TileGemm(count, rp, g.E, MatA{k.data, k.stride, 1}, q.qt, rp, s.st, rp, false);
  TileGemm(count, rp, g.Ev, MatA{v.data, v.stride, 1}, q.dot, rp, s.dst, rp, false);
  for (int64_t r0 = 0; r0 < rp; r0 += N) {
    if (Invisible(t, r0, k0, count)) {
      ZeroColumns(t, r0, count, s.st);
      ZeroColumns(t, r0, count, s.dst);
      continue;
    }
    ExpColumns(t, r0, k0, count, hn::LoadU(df, q.lse2 + r0), s.st);
    const VF D = hn::LoadU(df, q.D + r0);
    for (int64_t j = 0; j < count; ++j) {
      const float* P = s.st + j * rp + r0;
      float* dS = s.dst + j * rp + r0;
      hn::StoreU(hn::Mul(hn::LoadU(df, P), hn::Sub(hn::LoadU(df, dS), D)), df, dS);
    }
  }
}

// Writes `rows` rows of `src` (rows, ld) times `factor` into a (B, S|L, Hk|H, .) gradient.
template <class RowOffsetFn>
void WriteRows(int64_t rows, const float* src, int64_t ld, int64_t width, float factor,
               const HeadsSeqView& dst, float* row, RowOffsetFn&& offset) {
  const DF df;
  const int64_t N = Lanes();
  const VF f = hn::Set(df, factor);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < RoundUp(width, N); e += N) {
      hn::StoreU(hn::Mul(f, hn::LoadU(df, src + r * ld + e)), df, row + e);
    }
    RowFromF32Simd(df, row, width, dst.data, dst.dtype, offset(r));
  }
}

int64_t QueryTiles(const AttentionParams& p, const Geometry& g) {
  return (p.q_len + g.Lq - 1) / g.Lq;
}

// One (sequence, kv head) packed for both passes: its keys and values as f32 rows (K rows of
// Ep floats, also the right operand of dq += dS K; V rows of Evp) and every query tile's pack.
// Read in place (rows Hk * E floats apart, and the query rows H * E apart, transposed per
// pair) the passes were cache-miss bound, as the forward was (docs/ops/attention.md).
struct Group {
  int64_t b, hk;
  float *k, *v;    // (S, Ep), (S, Evp)
  float* queries;  // query tile qt's pack at qt * QueryPack::Size(g)
  QueryPack Query(const Geometry& g, int64_t qt) const {
    Carver<float> f(queries + qt * QueryPack::Size(g));
    return QueryPack::Carve(f, g);
  }
};

QueryTile TileOf(const AttentionParams& p, const Geometry& g, const Group& group, int64_t qt,
                 const Scratch& s) {
  QueryTile t;
  const int64_t i0 = qt * g.Lq;
  SetUpQueryTile(p, group.b, group.hk, i0, std::min(g.Lq, p.q_len - i0), s.lo, s.hi, &t);
  return t;
}

// Pass 1: dk and dv of keys [k0, k0 + count) of the group.
void KeyItem(const AttentionBwdParams& p, const Geometry& g, const Group& group, int64_t k0,
             const Scratch& s) {
  const int64_t count = std::min(kKeyTile, p.kv_len - k0);
  const RowsTile k{group.k + k0 * g.Ep, g.Ep}, v{group.v + k0 * g.Evp, g.Evp};
  std::fill(s.dk, s.dk + count * g.Ep, 0.0f);
  std::fill(s.dv, s.dv + count * g.Evp, 0.0f);
  for (int64_t qt = 0; qt < QueryTiles(p, g); ++qt) {
    const QueryTile t = TileOf(p, g, group, qt, s);
    if (t.Empty() || t.key_lo >= k0 + count || t.key_hi < k0) continue;
    const QueryPack q = group.Query(g, qt);
    GradTile(g, t, q, k0, count, k, v, s);
    TileGemm(count, g.Evp, t.rows, MatA{s.st, t.rows_p, 1}, q.dorow, g.Evp, s.dv, g.Evp, true);
    TileGemm(count, g.Ep, t.rows, MatA{s.dst, t.rows_p, 1}, q.qrow, g.Ep, s.dk, g.Ep, true);
  }
  if (p.dk.data) {
    WriteRows(count, s.dk, g.Ep, g.E, kLn2, p.dk, s.row,
              [&](int64_t j) { return p.dk.Offset(group.b, k0 + j, group.hk); });
  }
  if (p.dv.data) {
    WriteRows(count, s.dv, g.Evp, g.Ev, 1.0f, p.dv, s.row,
              [&](int64_t j) { return p.dv.Offset(group.b, k0 + j, group.hk); });
  }
}

// Pass 2: dq of query tile qt of the group.
void QueryItem(const AttentionBwdParams& p, const Geometry& g, const Group& group, int64_t qt,
               const Scratch& s) {
  const QueryTile t = TileOf(p, g, group, qt, s);
  std::fill(s.dq, s.dq + t.rows_p * g.Ep, 0.0f);
  const QueryPack q = group.Query(g, qt);
  for (int64_t k0 = t.key_lo; k0 <= t.key_hi; k0 += kKeyTile) {
    const int64_t count = std::min(kKeyTile, t.key_hi + 1 - k0);
    const RowsTile k{group.k + k0 * g.Ep, g.Ep}, v{group.v + k0 * g.Evp, g.Evp};
    GradTile(g, t, q, k0, count, k, v, s);
    TileGemm(t.rows, g.Ep, count, MatA{s.dst, 1, t.rows_p}, k.data, k.stride, s.dq, g.Ep, true);
  }
  WriteRows(t.rows, s.dq, g.Ep, g.E, p.scale, p.dq, s.row,
            [&](int64_t r) { return RowOffset(t, p.dq, g.G, r); });
}

// Runs fn(item, scratch) for items [0, n) on `blocks` threads, claimed dynamically (each
// item's arithmetic is fixed, so the order of claiming does not change any bit).
template <class Fn>
void RunItems(int64_t n, const Workspace& ws, int blocks, Fn&& fn) {
  std::atomic<int64_t> next{0};
  ParallelFor(std::min<int64_t>(blocks, n), [&](int64_t, int64_t, int block) {
    const Scratch s = ws.Block(block);
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, s);
  });
}

Status BackwardImpl(const AttentionBwdParams& p) {
  const Geometry g = MakeGeometry(p);
  const int64_t key_tiles = (p.kv_len + kKeyTile - 1) / kKeyTile;
  const int64_t query_tiles = QueryTiles(p, g);
  const int blocks = ParallelBlocks(std::max(key_tiles, query_tiles));
  const int64_t pack = QueryPack::Size(g);
  const Workspace ws(g, blocks, p.kv_len * (g.Ep + g.Evp) + query_tiles * pack);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t hk = 0; hk < p.kv_heads; ++hk) {
      Group group{b, hk, ws.Shared(), ws.Shared() + p.kv_len * g.Ep,
                  ws.Shared() + p.kv_len * (g.Ep + g.Evp)};
      const int64_t chunks = std::max<int64_t>(1, key_tiles);
      RunItems(chunks, ws, blocks, [&](int64_t i, const Scratch&) {
        const int64_t first = p.kv_len * i / chunks, last = p.kv_len * (i + 1) / chunks;
        LoadRows(p, p.k, b, hk, first, last - first, g.E, g.Ep, group.k + first * g.Ep);
        LoadRows(p, p.v, b, hk, first, last - first, g.Ev, g.Evp, group.v + first * g.Evp);
      });
      RunItems(query_tiles, ws, blocks, [&](int64_t qt, const Scratch& s) {
        PackQueryTile(p, g, TileOf(p, g, group, qt, s), s.row, group.Query(g, qt));
      });
      if (p.dk.data || p.dv.data) {  // early keys are seen by the most queries: first
        RunItems(key_tiles, ws, blocks,
                 [&](int64_t kt, const Scratch& s) { KeyItem(p, g, group, kt * kKeyTile, s); });
      }
      if (p.dq.data) {  // late queries see the most keys: first
        RunItems(query_tiles, ws, blocks, [&](int64_t i, const Scratch& s) {
          QueryItem(p, g, group, query_tiles - 1 - i, s);
        });
      }
    }
  }
  return Status::Ok();
}

}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(BackwardImpl);

Status AttentionBackward(const AttentionBwdParams& p) {
  FlushDenormals flush;
  return HWY_DYNAMIC_DISPATCH(BackwardImpl)(p);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

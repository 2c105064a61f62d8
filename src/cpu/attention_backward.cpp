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
// Pass 1, one item per (sequence, kv head, key tile), over the query tiles in order:
//   dv += Pt dO,   dk += dSt (q * scale * log2 e), times ln 2 at the end
// Pass 2, one item per (sequence, kv head, query tile), over the key tiles in order:
//   dq += dS K, times scale at the end.
// The recomputation costs 4E + 3Ev multiply-adds per visible (query, key) pair against the
// 3E + 2Ev of a one-pass backward with atomics.
#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

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

struct Geometry {
  int64_t G, Lq, E, Ev, Ep, Evp, rows_p;
};

Geometry MakeGeometry(const AttentionParams& p) {
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

struct Scratch {
  float* qt;             // (E, Rp): q * c, transposed
  float* qrow;           // (Rp, Ep): q * c
  float* dot;            // (Ev, Rp): dout, transposed
  float* dorow;          // (Rp, Evp): dout
  float* row;            // (max(Ep, Evp) + N)
  float *kpack, *vpack;  // (K, Ep), (K, Evp)
  float *st, *dst;       // (K, Rp): P, then dS (both transposed)
  float *dk, *dv;        // (K, Ep), (K, Evp): pass 1's sums
  float* dq;             // (Rp, Ep): pass 2's sum
  float *D, *lse2;       // (Rp)
  int32_t *lo, *hi;      // (Rp)
  static Scratch Carve(Carver<float>& f, Carver<int32_t>& i, const Geometry& g) {
    const int64_t rp = g.rows_p, K = kKeyTile;
    Scratch s;
    s.qt = f.Take(g.E * rp);
    s.qrow = f.Take(rp * g.Ep);
    s.dot = f.Take(g.Ev * rp);
    s.dorow = f.Take(rp * g.Evp);
    s.row = f.Take(std::max(g.Ep, g.Evp) + Lanes());
    s.kpack = f.Take(K * g.Ep);
    s.vpack = f.Take(K * g.Evp);
    s.st = f.Take(K * rp);
    s.dst = f.Take(K * rp);
    s.dk = f.Take(K * g.Ep);
    s.dv = f.Take(K * g.Evp);
    s.dq = f.Take(rp * g.Ep);
    s.D = f.Take(rp);
    s.lse2 = f.Take(rp);
    s.lo = i.Take(rp);
    s.hi = i.Take(rp);
    return s;
  }
};
using Workspace = BlockScratch<Scratch, Geometry>;

// Packs what both passes need of a query tile: Qt, dOt, D and lse2 (pad rows: zeros, and an
// lse of 0 so that their P stays finite); with `rows_too` also q and dout row-major (pass 1).
void PackQueryTile(const AttentionBwdParams& p, const Geometry& g, const QueryTile& t,
                   bool rows_too, const Scratch& s) {
  const DF df;
  const float c = p.scale * kLog2e;
  PackTransposed(t, p.q, g.G, g.E, c, s.row, s.qt);
  PackTransposed(t, p.dout, g.G, g.Ev, 1.0f, s.row, s.dot);
  for (int64_t r = 0; r < t.rows_p; ++r) {
    s.D[r] = 0.0f;
    s.lse2[r] = 0.0f;
    if (r >= t.rows) continue;
    const int64_t i = t.i0 + r / g.G, h = t.hk * g.G + r % g.G;
    s.lse2[r] = p.lse[t.b * p.lse_stride_batch + h * p.lse_stride_head + i] * kLog2e;
    RowToF32Simd(df, p.out.data, p.out.dtype, RowOffset(t, p.out, g.G, r), g.Ev, s.row);
    float D = 0.0f;
    for (int64_t e = 0; e < g.Ev; ++e) D += s.dot[e * t.rows_p + r] * s.row[e];
    s.D[r] = D;
  }
  if (!rows_too) return;
  for (int64_t r = 0; r < t.rows_p; ++r) {
    float* q = s.qrow + r * g.Ep;
    float* dout = s.dorow + r * g.Evp;
    for (int64_t e = 0; e < g.Ep; ++e) q[e] = e < g.E ? s.qt[e * t.rows_p + r] : 0.0f;
    for (int64_t e = 0; e < g.Evp; ++e) dout[e] = e < g.Ev ? s.dot[e * t.rows_p + r] : 0.0f;
  }
}

// St = P and dSt = dS of the pair (query tile t, keys [k0, k0 + count)); k and v are the key
// and value rows (left operands: only the first E / Ev floats of each row are read).
void GradTile(const Geometry& g, const QueryTile& t, int64_t k0, int64_t count, RowsTile k,
              RowsTile v, const Scratch& s) {
  const DF df;
  const int64_t N = Lanes(), rp = t.rows_p;
  TileGemm(count, rp, g.E, MatA{k.data, k.stride, 1}, s.qt, rp, s.st, rp, false);
  TileGemm(count, rp, g.Ev, MatA{v.data, v.stride, 1}, s.dot, rp, s.dst, rp, false);
  for (int64_t r0 = 0; r0 < rp; r0 += N) {
    if (Invisible(t, r0, k0, count)) {
      ZeroColumns(t, r0, count, s.st);
      ZeroColumns(t, r0, count, s.dst);
      continue;
    }
    ExpColumns(t, r0, k0, count, hn::LoadU(df, s.lse2 + r0), s.st);
    const VF D = hn::LoadU(df, s.D + r0);
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

// Pass 1: dk and dv of keys [k0, k0 + count) of (b, hk).
void KeyItem(const AttentionBwdParams& p, const Geometry& g, int64_t b, int64_t hk, int64_t k0,
             const Scratch& s) {
  const int64_t count = std::min(kKeyTile, p.kv_len - k0);
  const RowsTile k = LoadRows(p, p.k, b, hk, k0, count, g.E, g.E, s.kpack);
  const RowsTile v = LoadRows(p, p.v, b, hk, k0, count, g.Ev, g.Ev, s.vpack);
  std::fill(s.dk, s.dk + count * g.Ep, 0.0f);
  std::fill(s.dv, s.dv + count * g.Evp, 0.0f);
  for (int64_t qt = 0; qt < QueryTiles(p, g); ++qt) {
    QueryTile t;
    const int64_t i0 = qt * g.Lq;
    SetUpQueryTile(p, b, hk, i0, std::min(g.Lq, p.q_len - i0), s.lo, s.hi, &t);
    if (t.Empty() || t.key_lo >= k0 + count || t.key_hi < k0) continue;
    PackQueryTile(p, g, t, true, s);
    GradTile(g, t, k0, count, k, v, s);
    TileGemm(count, g.Evp, t.rows, MatA{s.st, t.rows_p, 1}, s.dorow, g.Evp, s.dv, g.Evp, true);
    TileGemm(count, g.Ep, t.rows, MatA{s.dst, t.rows_p, 1}, s.qrow, g.Ep, s.dk, g.Ep, true);
  }
  if (p.dk.data) {
    WriteRows(count, s.dk, g.Ep, g.E, kLn2, p.dk, s.row,
              [&](int64_t j) { return p.dk.Offset(b, k0 + j, hk); });
  }
  if (p.dv.data) {
    WriteRows(count, s.dv, g.Evp, g.Ev, 1.0f, p.dv, s.row,
              [&](int64_t j) { return p.dv.Offset(b, k0 + j, hk); });
  }
}

// Pass 2: dq of query tile qt of (b, hk).
void QueryItem(const AttentionBwdParams& p, const Geometry& g, int64_t b, int64_t hk, int64_t qt,
               const Scratch& s) {
  QueryTile t;
  const int64_t i0 = qt * g.Lq;
  SetUpQueryTile(p, b, hk, i0, std::min(g.Lq, p.q_len - i0), s.lo, s.hi, &t);
  std::fill(s.dq, s.dq + t.rows_p * g.Ep, 0.0f);
  if (!t.Empty()) {
    PackQueryTile(p, g, t, false, s);
    for (int64_t k0 = t.key_lo; k0 <= t.key_hi; k0 += kKeyTile) {
      const int64_t count = std::min(kKeyTile, t.key_hi + 1 - k0);
      const RowsTile k = LoadRows(p, p.k, b, hk, k0, count, g.E, g.Ep, s.kpack);
      const RowsTile v = LoadRows(p, p.v, b, hk, k0, count, g.Ev, g.Ev, s.vpack);
      GradTile(g, t, k0, count, k, v, s);
      TileGemm(t.rows, g.Ep, count, MatA{s.dst, 1, t.rows_p}, k.data, k.stride, s.dq, g.Ep, true);
    }
  }
  WriteRows(t.rows, s.dq, g.Ep, g.E, p.scale, p.dq, s.row,
            [&](int64_t r) { return RowOffset(t, p.dq, g.G, r); });
}

// Runs fn(item, scratch) for items [0, n) on up to the thread count, claimed dynamically (each
// item's arithmetic is fixed, so the order of claiming does not change any bit).
template <class Fn>
void RunItems(int64_t n, const Workspace& ws, int blocks, Fn&& fn) {
  std::atomic<int64_t> next{0};
  ParallelFor(blocks, [&](int64_t, int64_t, int block) {
    const Scratch s = ws.Block(block);
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i, s);
  });
}

Status BackwardImpl(const AttentionBwdParams& p) {
  const Geometry g = MakeGeometry(p);
  const int64_t heads = p.batch * p.kv_heads;
  const int64_t key_tiles = (p.kv_len + kKeyTile - 1) / kKeyTile;
  const int64_t query_tiles = QueryTiles(p, g);
  const int blocks = ParallelBlocks(heads * std::max(key_tiles, query_tiles));
  const Workspace ws(g, blocks, 0);
  if (p.dk.data || p.dv.data) {
    // Early keys are seen by the most queries: first.
    RunItems(heads * key_tiles, ws, blocks, [&](int64_t i, const Scratch& s) {
      const int64_t kt = i / heads, bh = i % heads;
      KeyItem(p, g, bh / p.kv_heads, bh % p.kv_heads, kt * kKeyTile, s);
    });
  }
  if (p.dq.data) {
    // Late queries see the most keys: first.
    RunItems(heads * query_tiles, ws, blocks, [&](int64_t i, const Scratch& s) {
      const int64_t qt = query_tiles - 1 - i / heads, bh = i % heads;
      QueryItem(p, g, bh / p.kv_heads, bh % p.kv_heads, qt, s);
    });
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
  return HWY_DYNAMIC_DISPATCH(BackwardImpl)(p);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

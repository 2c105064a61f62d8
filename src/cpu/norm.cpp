// CPU RMS norms, forward and backward: gated RMSNorm and residual add + RMSNorm.
// Dimension legend: M rows, E features, G groups of S features (G * S = E), Sp = S rounded
// up to the vector width, P = G * Sp.
//
// Rows are independent, so threads split the rows (ParallelFor) and each row is done by one
// thread in a few vector passes over an L1-resident copy of it. The copy uses a packed f32
// layout: group g at [g*Sp, g*Sp + S), zeros in [g*Sp + S, (g+1)*Sp). Every vector loop then
// runs over whole vectors with no tail, no vector straddles two groups, and the zero pads add
// nothing to sums of squares, dot products or the dweight/dbias partials. Each output element
// is written after, or in the same pass as, the last read of that element of every input, so
// an output may alias an input exactly (e.g. residual_out = residual for an in-place residual
// stream).
//
// Forward, per row and group:  x' = (x + residual) [* silu(z)],  rstd = 1/sqrt(mean x'^2 + eps),
//   y = x' rstd w + b [* silu(z)].
// Backward, per group, with dy the gradient reaching y and g = dy * w:
//   dx' = rstd (g - xhat mean(g xhat)),  xhat = x' rstd;  dw += dy xhat,  db += dy,
// then through the pre-step (dx' silu(z), dx' x silu'(z), + dresidual_out).
// dweight and dbias: one partial per block of rows, added in block order (deterministic).
#include "cpu/norm.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "core/parallel.hpp"
#include "core/round_up.hpp"
#include "cpu/thread_scratch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/norm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// Included once per target by foreach_target.h above (after highway.h).
#include "cpu/simd_math-inl.h"
#include "hwy/cache_control.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

struct Layout {
  int64_t E, S, G, Sp;
  int64_t packed() const { return G * Sp; }
};

Layout MakeLayout(const NormParams& p) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t S = p.group_size;
  return {p.features, S, p.features / S, RoundUp(S, lanes)};
}

// Row m of `v` into the packed layout (f32), pads zeroed.
void PackRow(Layout l, const RowsView& v, int64_t m, float* dst /* (P) */) {
  const DF df;
  const int64_t row = m * v.stride_row;
  if (l.Sp == l.S) return RowToF32Simd(df, v.data, v.dtype, row, l.E, dst);
  for (int64_t g = 0; g < l.G; ++g) {
    RowToF32Simd(df, v.data, v.dtype, row + g * l.S, l.S, dst + g * l.Sp);
    std::fill(dst + g * l.Sp + l.S, dst + (g + 1) * l.Sp, 0.0f);
  }
}

// The packed row back into row m of `v`, in v's dtype.
void UnpackRow(Layout l, const float* src /* (P) */, const RowsView& v, int64_t m) {
  const DF df;
  const int64_t row = m * v.stride_row;
  if (l.Sp == l.S) return RowFromF32Simd(df, src, l.E, v.data, v.dtype, row);
  for (int64_t g = 0; g < l.G; ++g) {
    RowFromF32Simd(df, src + g * l.Sp, l.S, v.data, v.dtype, row + g * l.S);
  }
}

// An f32 operand whose groups need no pads is already in the packed layout: its rows are
// read and written in place, saving a copy through L1 per row.
bool InPlace(Layout l, const RowsView& v) { return v.dtype == DType::kF32 && l.Sp == l.S; }

// Row m of input `v`, packed: v's own row when InPlace, else converted into `scratch`.
const float* InputRow(Layout l, const RowsView& v, int64_t m, float* scratch /* (P) */) {
  if (InPlace(l, v)) return static_cast<const float*>(v.data) + m * v.stride_row;
  PackRow(l, v, m, scratch);
  return scratch;
}

// Where to compute row m of output `v`: v's own row when InPlace, else `scratch`, which
// FinishRow then converts into v.
float* OutputRow(Layout l, const RowsView& v, int64_t m, float* scratch /* (P) */) {
  return InPlace(l, v) ? static_cast<float*>(v.data) + m * v.stride_row : scratch;
}

void FinishRow(Layout l, const float* row /* (P) */, const RowsView& v, int64_t m) {
  if (!InPlace(l, v)) UnpackRow(l, row, v, m);
}

// Software prefetch of the next row's inputs, spread over the current row's last pass: the
// row's passes over L1 leave the memory bus idle, and the hardware prefetcher does not
// cross into the next row early enough to cover it (measured: ~1.5x at M = 2048, E = 1536).
class NextRowPrefetch {
 public:
  // Prefetches nothing when row m is the block's last.
  NextRowPrefetch(std::initializer_list<const RowsView*> inputs, int64_t m, int64_t end) {
    if (m + 1 >= end) return;
    for (const RowsView* v : inputs) {
      if (!v->data) continue;
      const int64_t size = DTypeSize(v->dtype);
      rows_[n_++] = {static_cast<const char*>(v->data) + (m + 1) * v->stride_row * size, size};
    }
  }
  // The lines holding features [e, e + lanes) of each input's next row.
  HWY_INLINE void At(int64_t e) const {
    for (int i = 0; i < n_; ++i) hwy::Prefetch(rows_[i].base + e * rows_[i].size);
  }

 private:
  struct Row {
    const char* base;
    int64_t size;
  };
  Row rows_[5] = {};
  int n_ = 0;
};

// Per-row scratch of one block of rows: seven buffers of (P) floats, and rstd (G).
struct RowScratch {
  float *a, *b, *c, *d, *e, *f, *g, *rstd;
};

// The workspace carved per block: row scratch, and for the backward the dweight and dbias
// partials (zeroed). Sizes rounded to 16 floats so blocks never share a cache line.
class Workspaces {
 public:
  Workspaces(Layout l, int blocks, bool partials)
      : P_(RoundUp(l.packed(), 16)), per_block_(7 * P_ + RoundUp(l.G, 16)) {
    base_ =
        ThreadScratch(ScratchSlot::kNorm, blocks * per_block_ + (partials ? 2 * blocks * P_ : 0));
    if (partials) {
      dweight_ = base_ + blocks * per_block_;
      dbias_ = dweight_ + blocks * P_;
      std::fill(dweight_, dweight_ + 2 * blocks * P_, 0.0f);
    }
  }
  RowScratch Rows(int block) const {
    float* s = base_ + block * per_block_;
    return {s, s + P_, s + 2 * P_, s + 3 * P_, s + 4 * P_, s + 5 * P_, s + 6 * P_, s + 7 * P_};
  }
  float* DWeight(int block) const { return dweight_ + block * P_; }  // (P)
  float* DBias(int block) const { return dbias_ + block * P_; }      // (P)

 private:
  int64_t P_, per_block_;
  float* base_ = nullptr;
  float* dweight_ = nullptr;
  float* dbias_ = nullptr;
};

// silu(z) = z s and silu'(z) = s (1 + z (1 - s)) from s = sigmoid(z).
HWY_INLINE VF SiluFromSigmoid(DF df, VF z, VF s, VF* grad) {
  const VF one = hn::Set(df, 1.0f);
  if (grad) *grad = hn::Mul(s, hn::MulAdd(z, hn::Sub(one, s), one));
  return hn::Mul(z, s);
}

HWY_INLINE VF Silu(DF df, VF z, VF* grad) {
  return SiluFromSigmoid(df, z, SigmoidNoDiv(df, z), grad);
}

// rstd[g] = 1 / sqrt(mean over group g of xs^2 + eps); two accumulators for latency.
void GroupRstd(Layout l, const float* xs /* (P) */, float eps, float* rstd /* (G) */) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t g = 0; g < l.G; ++g) {
    const float* x = xs + g * l.Sp;
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    int64_t i = 0;
    for (; i + 2 * N <= l.Sp; i += 2 * N) {
      const VF v0 = hn::LoadU(df, x + i), v1 = hn::LoadU(df, x + i + N);
      acc0 = hn::MulAdd(v0, v0, acc0);
      acc1 = hn::MulAdd(v1, v1, acc1);
    }
    if (i < l.Sp) {
      const VF v = hn::LoadU(df, x + i);
      acc0 = hn::MulAdd(v, v, acc0);
    }
    const float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
    rstd[g] = 1.0f / std::sqrt(sum / static_cast<float>(l.S) + eps);
  }
}

// out = a + b over the packed row (out may be a or b).
void AddRows(Layout l, const float* a, const float* b, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i = 0; i < l.packed(); i += N) {
    hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
  }
}

// out = x * silu(z) over the packed row.
void GateRow(Layout l, const float* x, const float* z, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i = 0; i < l.packed(); i += N) {
    hn::StoreU(hn::Mul(hn::LoadU(df, x + i), Silu(df, hn::LoadU(df, z + i), nullptr)), df, out + i);
  }
}

void ForwardRow(const NormParams& p, Layout l, const float* w, const float* b, int64_t m,
                int64_t end, RowScratch s) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* xs = InputRow(l, p.x, m, s.a);
  if (p.residual.data) {  // residual_out = x + residual, normalised from where it is stored
    float* sum = p.residual_out.data ? OutputRow(l, p.residual_out, m, s.d) : s.d;
    AddRows(l, xs, InputRow(l, p.residual, m, s.b), sum);
    if (p.residual_out.data) FinishRow(l, sum, p.residual_out, m);
    xs = sum;
  } else if (p.residual_out.data) {  // layer 0: residual_out = x (nothing to do in place)
    if (OutputRow(l, p.residual_out, m, s.d) != xs) UnpackRow(l, xs, p.residual_out, m);
  }
  const float* z = p.z.data ? InputRow(l, p.z, m, s.c) : nullptr;
  if (z && !p.norm_before_gate) {
    GateRow(l, xs, z, s.e);
    xs = s.e;
  }
  GroupRstd(l, xs, p.eps, s.rstd);
  const bool gate_after = z && p.norm_before_gate;
  const NextRowPrefetch prefetch({&p.x, &p.residual, &p.z}, m, end);
  float* y = OutputRow(l, p.out, m, s.f);
  for (int64_t g = 0; g < l.G; ++g) {
    const VF r = hn::Set(df, s.rstd[g]);
    for (int64_t i = g * l.Sp, e = g * l.S; i < (g + 1) * l.Sp; i += N, e += N) {
      prefetch.At(e);
      VF v =
          hn::MulAdd(hn::Mul(hn::LoadU(df, xs + i), r), hn::LoadU(df, w + i), hn::LoadU(df, b + i));
      if (gate_after) v = hn::Mul(v, Silu(df, hn::LoadU(df, z + i), nullptr));
      hn::StoreU(v, df, y + i);
    }
  }
  FinishRow(l, y, p.out, m);
}

// Every output of the row is computed in scratch and written at the end, after the last
// read of every input: exact aliasing of an output with an input is safe.
void BackwardRow(const NormBwdParams& p, Layout l, const float* w, const float* b, int64_t m,
                 int64_t end, RowScratch s, float* dw /* (P) */, float* db /* (P) */) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* xr = InputRow(l, p.x, m, s.a);  // x + residual (the public ops never pass z too)
  if (p.residual.data) {
    AddRows(l, xr, InputRow(l, p.residual, m, s.b), s.d);
    xr = s.d;
  }
  const float* z = p.z.data ? InputRow(l, p.z, m, s.c) : nullptr;
  const bool gate_before = z && !p.norm_before_gate;
  const bool gate_after = z && p.norm_before_gate;
  const float* xs = xr;  // x'
  if (gate_before) {     // x' = x silu(z), keeping sigmoid(z) for the gradient at the end
    for (int64_t i = 0; i < l.packed(); i += N) {
      const VF zv = hn::LoadU(df, z + i);
      const VF sig = SigmoidNoDiv(df, zv);
      hn::StoreU(sig, df, s.g + i);
      hn::StoreU(hn::Mul(hn::LoadU(df, xr + i), hn::Mul(zv, sig)), df, s.d + i);
    }
    xs = s.d;
  }
  GroupRstd(l, xs, p.eps, s.rstd);
  float* grad = s.e;  // dy, then g = dy w, then dx'
  float* dz = s.b;
  const float* dy = InputRow(l, p.dout, m, grad);

  // out = y silu(z):  dz = dout y silu'(z),  dy = dout silu(z).
  if (gate_after) {
    for (int64_t g = 0; g < l.G; ++g) {
      const VF r = hn::Set(df, s.rstd[g]);
      for (int64_t i = g * l.Sp; i < (g + 1) * l.Sp; i += N) {
        VF silu_grad;
        const VF silu = Silu(df, hn::LoadU(df, z + i), &silu_grad);
        const VF y = hn::MulAdd(hn::Mul(hn::LoadU(df, xs + i), r), hn::LoadU(df, w + i),
                                hn::LoadU(df, b + i));
        const VF dout = hn::LoadU(df, dy + i);
        hn::StoreU(hn::Mul(hn::Mul(dout, y), silu_grad), df, dz + i);
        hn::StoreU(hn::Mul(dout, silu), df, grad + i);
      }
    }
    dy = grad;
  }

  const NextRowPrefetch prefetch({&p.x, &p.residual, &p.z, &p.dout, &p.dresidual_out}, m, end);
  // The normalisation: dw += dy xhat, db += dy, g = dy w, dx' = rstd (g - xhat mean(g xhat)).
  for (int64_t g = 0; g < l.G; ++g) {
    const VF r = hn::Set(df, s.rstd[g]);
    const int64_t begin = g * l.Sp, group_end = (g + 1) * l.Sp;
    VF dot = hn::Zero(df);
    for (int64_t i = begin; i < group_end; i += N) {
      const VF xhat = hn::Mul(hn::LoadU(df, xs + i), r);
      const VF dyv = hn::LoadU(df, dy + i);
      hn::StoreU(hn::MulAdd(dyv, xhat, hn::LoadU(df, dw + i)), df, dw + i);
      hn::StoreU(hn::Add(dyv, hn::LoadU(df, db + i)), df, db + i);
      const VF gv = hn::Mul(dyv, hn::LoadU(df, w + i));
      dot = hn::MulAdd(gv, xhat, dot);
      hn::StoreU(gv, df, grad + i);
    }
    const float mean_dot = hn::GetLane(hn::SumOfLanes(df, dot)) / static_cast<float>(l.S);
    const VF c = hn::Set(df, mean_dot);
    for (int64_t i = begin, e = g * l.S; i < group_end; i += N, e += N) {
      prefetch.At(e);
      const VF xhat = hn::Mul(hn::LoadU(df, xs + i), r);
      hn::StoreU(hn::Mul(r, hn::NegMulAdd(xhat, c, hn::LoadU(df, grad + i))), df, grad + i);
    }
  }
  if (p.dresidual_out.data) AddRows(l, grad, InputRow(l, p.dresidual_out, m, s.f), grad);

  // x' = x silu(z):  dx = dx' silu(z),  dz = dx' x silu'(z).
  const float* dx = grad;
  if (gate_before) {
    for (int64_t i = 0; i < l.packed(); i += N) {
      VF silu_grad;
      const VF silu = SiluFromSigmoid(df, hn::LoadU(df, z + i), hn::LoadU(df, s.g + i), &silu_grad);
      const VF dxs = hn::LoadU(df, grad + i);
      hn::StoreU(hn::Mul(hn::Mul(dxs, hn::LoadU(df, xr + i)), silu_grad), df, dz + i);
      hn::StoreU(hn::Mul(dxs, silu), df, s.f + i);
    }
    dx = s.f;
  }
  if (p.dx.data) UnpackRow(l, dx, p.dx, m);
  if (p.dz.data) UnpackRow(l, dz, p.dz, m);
  if (p.dresidual.data) UnpackRow(l, grad, p.dresidual, m);
}

// weight and bias (zeros when absent) in the packed layout, shared read-only by all rows.
struct PackedAffine {
  const float* w;  // (P)
  const float* b;  // (P)
};

// Packs them into the calling thread's scratch. Workers must get the pointers: the slot asked
// for inside the parallel region would be the worker's own buffer.
PackedAffine PackAffineForCall(const NormParams& p, Layout l) {
  const int64_t P = l.packed();
  float* w = ThreadScratch(ScratchSlot::kNormAffine, 2 * P);
  float* b = w + P;
  std::fill(w, w + 2 * P, 0.0f);
  PackRow(l, {const_cast<float*>(p.weight), DType::kF32, 0}, 0, w);
  if (p.bias) PackRow(l, {const_cast<float*>(p.bias), DType::kF32, 0}, 0, b);
  return {w, b};
}

// Rows go to threads in chunks of at least kMinChunkElements elements, so that a small call
// (decode, the policy network) stays on the calling thread instead of paying for waking the
// others. Tuned for speed; the split depends only on the shape and thread count, so results
// stay deterministic (only the dweight/dbias rounding depends on the split).
constexpr int64_t kMinChunkElements = 32 * 1024;

struct RowChunks {
  int64_t rows, chunks;
  int64_t Row(int64_t chunk) const { return rows * chunk / chunks; }  // first row of `chunk`
};

RowChunks ChunkRows(const NormParams& p) {
  const int64_t by_size = p.rows * p.features / kMinChunkElements;
  return {p.rows, std::max<int64_t>(1, std::min(p.rows, by_size))};
}

Status NormForwardImpl(const NormParams& p) {
  const Layout l = MakeLayout(p);
  const PackedAffine wb = PackAffineForCall(p, l);
  const RowChunks rc = ChunkRows(p);
  const Workspaces ws(l, ParallelBlocks(rc.chunks), false);
  ParallelFor(rc.chunks, [&](int64_t begin, int64_t end, int block) {
    const RowScratch s = ws.Rows(block);
    const int64_t row_end = rc.Row(end);
    for (int64_t m = rc.Row(begin); m < row_end; ++m) ForwardRow(p, l, wb.w, wb.b, m, row_end, s);
  });
  return Status::Ok();
}

Status NormBackwardImpl(const NormBwdParams& p) {
  const Layout l = MakeLayout(p);
  const PackedAffine wb = PackAffineForCall(p, l);
  const RowChunks rc = ChunkRows(p);
  const int blocks = ParallelBlocks(rc.chunks);
  const Workspaces ws(l, blocks, true);
  ParallelFor(rc.chunks, [&](int64_t begin, int64_t end, int block) {
    const RowScratch s = ws.Rows(block);
    const int64_t row_end = rc.Row(end);
    for (int64_t m = rc.Row(begin); m < row_end; ++m) {
      BackwardRow(p, l, wb.w, wb.b, m, row_end, s, ws.DWeight(block), ws.DBias(block));
    }
  });
  // Block partials summed in block order into block 0's, then unpacked.
  for (int t = 1; t < blocks; ++t) {
    AddRows(l, ws.DWeight(0), ws.DWeight(t), ws.DWeight(0));
    AddRows(l, ws.DBias(0), ws.DBias(t), ws.DBias(0));
  }
  if (p.dweight) UnpackRow(l, ws.DWeight(0), {p.dweight, DType::kF32, 0}, 0);
  if (p.dbias) UnpackRow(l, ws.DBias(0), {p.dbias, DType::kF32, 0}, 0);
  return Status::Ok();
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(NormForwardImpl);
HWY_EXPORT(NormBackwardImpl);

Status RmsNormForward(const NormParams& p) { return HWY_DYNAMIC_DISPATCH(NormForwardImpl)(p); }

Status RmsNormBackward(const NormBwdParams& p) { return HWY_DYNAMIC_DISPATCH(NormBackwardImpl)(p); }

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

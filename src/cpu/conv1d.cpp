// CPU causal conv1d: forward, backward and the decode update.
// Dimension legend: B batch, D channels, L length, K conv width (2..8), T update steps,
// S conv_state length, W vector lanes, Lp = L rounded up to W.
//
// Each row (b, d) is copied (and bf16 widened) into an L1-resident f32 buffer behind its K - 1
// initial values, xpad = [h0, x, zeros to a whole vector]; then, vectorised over time,
//   pre[l] = bias + sum_k w[k] xpad[l + k],   out[l] = act(pre[l])
// with K unaligned loads per vector of outputs (K a template constant, the taps in registers).
// The f32 forward skips the copy where out does not overlap x: it reads x where it lies, the
// first vector's inputs before the row coming from registers (or xpad, for initial values).
// Backward, with g[l] = dout[l] act'(pre[l]) stored behind K - 1 zeros and followed by zeros:
//   dxpad[j] = sum_k w[k] g[j - k] (+ dfinal[j - L] for j >= L)   (a correlation, same loop)
//   dw[k] += sum_l g[l] xpad[l + k],   db += sum_l g[l]            (vector partials per channel)
// Packed sequences (seq_idx): each sequence of a row is such a row of its own, behind K - 1
// zeros (the first behind the initial values), so no output sees another sequence's inputs.
// The forward splits rows over threads; the backward splits channels, each channel's batch
// rows in order on one thread, so dweight and dbias are reduced in a fixed order (the same
// bits whatever the thread count) with no partial buffers.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "core/round_up.hpp"
#include "cpu/conv1d.hpp"
#include "cpu/packed_sequences.hpp"
#include "cpu/thread_scratch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/conv1d.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Internal linkage: every kernel file defines its helpers in this same per-target namespace.
namespace {

// Below this many elements (B * D * L, or B * D * T for the update) a call runs on the calling
// thread: waking the pool costs more than the work. Tuned for speed, does not affect results
// (the backward's reduction order does not depend on the split).
constexpr int64_t kMinParallelElements = 1 << 14;

// Rows of the update done per vector pass of the activation. Tuned for speed only.
constexpr int64_t kUpdateRowsPerPass = 256;

int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

template <class Fn>
void MaybeParallelFor(int64_t n, int64_t elements, Fn&& fn) {
  if (elements < kMinParallelElements) {
    if (n > 0) fn(int64_t{0}, n, 0);
    return;
  }
  ParallelFor(n, fn);
}

int Blocks(int64_t n, int64_t elements) {
  return elements < kMinParallelElements ? 1 : ParallelBlocks(n);
}

// Per-row buffer sizes, each a whole number of vectors plus the K - 1 lead-in where needed.
struct Layout {
  int64_t K, L, Lp, Jp;  // Jp: L + K - 1 rounded up to W (the padded row's length)
  int64_t xpad() const { return K - 1 + Lp; }  // [h0 (K-1), x (L), zeros]
  int64_t gpad() const { return Jp + K - 1; }  // [zeros (K-1), g (L), zeros]
};

// Buffer sizes rounded to 16 floats, so that blocks never share a cache line.
int64_t Round16(int64_t n) { return RoundUp(n, 16); }

Layout MakeLayout(int64_t K, int64_t L) {
  return {K, L, RoundUp(L, Lanes()), RoundUp(L + K - 1, Lanes())};
}

// lead = the K - 1 inputs before step l0 of row (b, d): its initial states (zeros when absent,
// or for a sequence starting at l0 > 0).
void LoadLeadIn(const CausalConv1dParams& p, int64_t K, int64_t b, int64_t d, int64_t l0,
                float* lead /* (K-1) */) {
  const SeqView& h0 = p.initial_states;
  for (int64_t i = 0; i < K - 1; ++i) {
    lead[i] = h0.data && l0 == 0
                  ? LoadAsF32(h0.data, h0.dtype, b * h0.stride_batch + d * h0.stride_dim + i)
                  : 0.0f;
  }
}

// final_states of row (b, d) = its last K - 1 inputs, where the steps [l0, l0 + L) end the row.
void StoreFinalStates(const CausalConv1dParams& p, int64_t K, int64_t b, int64_t d, int64_t l0,
                      int64_t L, const float* last /* (K-1) */) {
  const SeqView& hf = p.final_states;
  if (!hf.data || l0 + L != p.seqlen) return;
  const int64_t offset = b * hf.stride_batch + d * hf.stride_dim;
  for (int64_t i = 0; i < K - 1; ++i) StoreFromF32(hf.data, hf.dtype, offset + i, last[i]);
}

// xpad = [the lead-in (LoadLeadIn), x row from l0 over lay.L steps, zeros up to xpad()].
void LoadPaddedRow(const CausalConv1dParams& p, const Layout& lay, int64_t b, int64_t d, int64_t l0,
                   float* xpad /* (K-1 + Lp) */) {
  const int64_t h = lay.K - 1;
  LoadLeadIn(p, lay.K, b, d, l0, xpad);
  RowToF32Simd(DF(), p.x.data, p.x.dtype, b * p.x.stride_batch + d * p.x.stride_dim + l0, lay.L,
               xpad + h);
  std::fill(xpad + h + lay.L, xpad + lay.xpad(), 0.0f);
}

// The K taps of channel d as broadcast vectors, and the bias.
template <int K>
struct Taps {
  VF w[K];
  VF bias;
  Taps(const CausalConv1dParams& p, int64_t d) {
    const DF df;
    const float* wd = p.weight.data + d * p.weight.stride_dim;
    for (int k = 0; k < K; ++k) w[k] = hn::Set(df, wd[k]);
    bias = hn::Set(df, p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f);
  }
  // pre[l..l+W) from xpad.
  HWY_INLINE VF Pre(const float* xpad, int64_t l) const {
    const DF df;
    VF acc = bias;
    for (int k = 0; k < K; ++k) acc = hn::MulAdd(w[k], hn::LoadU(df, xpad + l + k), acc);
    return acc;
  }
};

// act(pre) for a vector of outputs.
HWY_INLINE VF Output(const CausalConv1dParams& p, VF pre) {
  return p.silu ? hn::Mul(pre, SigmoidNoDiv(DF(), pre)) : pre;
}

// The first vector of outputs of a row that starts from zeros, with its inputs in registers:
// tap k reads x[i - s] in lane i (s = K - 1 - k), zero for i < s, which is x's first vector
// moved up s lanes. Needs K - 1 < W. The same sums as Taps::Pre over a zero-led xpad.
template <int K>
class ZeroLedHead {
 public:
  ZeroLedHead() {
    const DF df;
    const hn::RebindToSigned<DF> di;
    const auto lane = hn::Iota(di, 0);
    for (int s = 1; s < K; ++s) {
      const auto shift = hn::Set(di, s);
      from_[s - 1] = hn::IndicesFromVec(df, hn::Max(hn::Sub(lane, shift), hn::Zero(di)));
      zero_[s - 1] = hn::RebindMask(df, hn::Lt(lane, shift));
    }
  }
  static bool Fits() { return K - 1 < Lanes(); }

  HWY_INLINE VF Pre(const Taps<K>& taps, const float* x /* (W) */) const {
    const VF first = hn::LoadU(DF(), x);
    VF acc = taps.bias;
    for (int k = 0; k < K; ++k) {
      const int s = K - 1 - k;
      const VF in =
          s == 0 ? first
                 : hn::IfThenZeroElse(zero_[s - 1], hn::TableLookupLanes(first, from_[s - 1]));
      acc = hn::MulAdd(taps.w[k], in, acc);
    }
    return acc;
  }

 private:
  decltype(hn::IndicesFromVec(DF(), hn::Zero(hn::RebindToSigned<DF>()))) from_[K - 1];
  hn::Mask<DF> zero_[K - 1];
};

// ForwardRow with f32 x and out, reading x where it lies. The first H = K - 1 rounded up to W
// outputs, which read the K - 1 inputs before the row, come from registers (ZeroLedHead) or
// through xpad (initial values given); a partial last vector is recomputed in full at L - W.
// At short rows (the policy window's L = 60) copying each row to xpad first cost most of the
// call: the copy itself, and every tap load that spans two of the copy's stores waits for them
// to reach the cache (store forwarding fails). Same sums, same bits as ForwardRow. Returns
// false, having done nothing, where the row is shorter than H + W or its outputs overlap its
// inputs (out = x: each vector would read outputs already stored).
template <int K>
bool ForwardRowDirect(const CausalConv1dParams& p, const Layout& lay, const Taps<K>& taps,
                      const ZeroLedHead<K>& head, int64_t b, int64_t d, int64_t l0,
                      float* xpad /* (K-1 + Lp) */) {
  const DF df;
  const int64_t W = Lanes(), L = lay.L, h = K - 1, H = RoundUp(h, W);
  if (p.x.dtype != DType::kF32 || p.out.dtype != DType::kF32 || L < H + W) return false;
  const float* x =
      static_cast<const float*>(p.x.data) + b * p.x.stride_batch + d * p.x.stride_dim + l0;  // (L)
  float* out =
      static_cast<float*>(p.out.data) + b * p.out.stride_batch + d * p.out.stride_dim + l0;  // (L)
  const auto address = [](const float* q) { return reinterpret_cast<uintptr_t>(q); };
  if (address(out) < address(x + L) && address(x) < address(out + L)) return false;
  const SeqView& h0 = p.initial_states;
  int64_t l = 0;
  if ((h0.data == nullptr || l0 > 0) && ZeroLedHead<K>::Fits()) {
    hn::StoreU(Output(p, head.Pre(taps, x)), df, out);
    l = W;
  } else {
    LoadLeadIn(p, K, b, d, l0, xpad);
    std::memcpy(xpad + h, x, static_cast<size_t>(H) * sizeof(float));
    for (; l < H; l += W) hn::StoreU(Output(p, taps.Pre(xpad, l)), df, out + l);
  }
  const float* in = x - h;  // pre[l] reads in[l + k] = x[l + k - h], l >= H >= h
  for (; l + W <= L; l += W) hn::StoreU(Output(p, taps.Pre(in, l)), df, out + l);
  if (l < L) hn::StoreU(Output(p, taps.Pre(in, L - W)), df, out + L - W);
  StoreFinalStates(p, K, b, d, l0, L, x + L - h);
  return true;
}

// Steps [l0, l0 + lay.L) of row (b, d): the whole row, or one packed sequence of it.
template <int K>
void ForwardRow(const CausalConv1dParams& p, const Layout& lay, const ZeroLedHead<K>& head,
                int64_t b, int64_t d, int64_t l0, float* xpad /* (K-1 + Lp) */,
                float* y /* (Lp) */) {
  const DF df;
  const int64_t W = Lanes(), L = lay.L;
  const Taps<K> taps(p, d);
  if (ForwardRowDirect<K>(p, lay, taps, head, b, d, l0, xpad)) return;
  LoadPaddedRow(p, lay, b, d, l0, xpad);
  const int64_t out_offset = b * p.out.stride_batch + d * p.out.stride_dim + l0;
  // f32 outputs go straight to the row (the last partial vector through y); bf16 through y.
  const bool direct = p.out.dtype == DType::kF32;
  float* dst = direct ? static_cast<float*>(p.out.data) + out_offset : y;
  const int64_t full = direct ? L / W * W : lay.Lp;
  int64_t l = 0;
  for (; l < full; l += W) hn::StoreU(Output(p, taps.Pre(xpad, l)), df, dst + l);
  if (direct && l < L) {
    hn::StoreU(Output(p, taps.Pre(xpad, l)), df, y);
    std::memcpy(dst + l, y, static_cast<size_t>(L - l) * sizeof(float));
  }
  if (!direct) RowFromF32Simd(df, y, L, p.out.data, p.out.dtype, out_offset);
  StoreFinalStates(p, K, b, d, l0, L, xpad + L);  // xpad's first K - 1 + L end with them
}

// Walks rows r = b D + d from `first` without a division per row (a 64-bit divide costs more
// than a decode row's whole update).
class RowCursor {
 public:
  RowCursor(int64_t first, int64_t dim) : dim_(dim), b_(first / dim), d_(first % dim) {}
  int64_t b() const { return b_; }
  int64_t d() const { return d_; }
  void Next() {
    if (++d_ == dim_) d_ = 0, ++b_;
  }

 private:
  int64_t dim_, b_, d_;
};

// fn(l0, layout) for each packed sequence of row b (the whole row when not packed).
template <class Fn>
void ForEachSequence(const PackedSequences& seqs, int64_t K, int64_t b, const Layout& whole,
                     Fn&& fn) {
  if (!seqs.packed()) return fn(int64_t{0}, whole);
  for (int64_t k = 0; k < seqs.Count(b); ++k) {
    const int64_t l0 = seqs.Start(b, k);
    fn(l0, MakeLayout(K, seqs.End(b, k) - l0));
  }
}

template <int K>
void ForwardImpl(const CausalConv1dParams& p) {
  const Layout lay = MakeLayout(K, p.seqlen);  // a packed sequence's buffers fit in these
  const PackedSequences seqs(p.seq_idx, {}, p.batch, p.seqlen);
  const int64_t rows = p.batch * p.dim, elements = rows * p.seqlen;
  const int64_t per_block = Round16(lay.xpad()) + Round16(lay.Lp);
  float* ws = ThreadScratch(ScratchSlot::kConv1d, Blocks(rows, elements) * per_block);
  MaybeParallelFor(rows, elements, [&](int64_t begin, int64_t end, int block) {
    float* xpad = ws + block * per_block;
    float* y = xpad + Round16(lay.xpad());
    const ZeroLedHead<K> head;
    RowCursor row(begin, p.dim);
    for (int64_t r = begin; r < end; ++r, row.Next()) {
      const int64_t b = row.b(), d = row.d();
      ForEachSequence(seqs, K, b, lay, [&](int64_t l0, const Layout& part) {
        ForwardRow<K>(p, part, head, b, d, l0, xpad, y);
      });
    }
  });
}

// Gradient sums of one channel over its batch rows: sum_l g xpad[l+k] per tap, and sum_l g.
template <int K>
struct ChannelSums {
  VF dw[K];
  VF db;
  ChannelSums() {
    for (int k = 0; k < K; ++k) dw[k] = hn::Zero(DF());
    db = hn::Zero(DF());
  }
};

// Steps [l0, l0 + lay.L) of row (b, d): the whole row, or one packed sequence of it.
template <int K>
void BackwardRow(const CausalConv1dBwdParams& p, const Layout& lay, const Taps<K>& taps, int64_t b,
                 int64_t d, int64_t l0, float* xpad /* (K-1 + Lp) */, float* gpad /* (Jp + K-1) */,
                 float* dxpad /* (Jp) */, ChannelSums<K>* sums) {
  const DF df;
  const int64_t W = Lanes(), L = lay.L, h = K - 1;
  LoadPaddedRow(p, lay, b, d, l0, xpad);
  // gpad = [zeros (K-1), dout act'(pre) (L), zeros]; the zero tail makes whole-vector passes
  // over [0, Lp) and [0, Jp) exact.
  float* g = gpad + h;
  std::fill(gpad, g, 0.0f);
  RowToF32Simd(df, p.dout.data, p.dout.dtype, b * p.dout.stride_batch + d * p.dout.stride_dim + l0,
               L, g);
  std::fill(g + L, gpad + lay.gpad(), 0.0f);
  for (int64_t l = 0; l < lay.Lp; l += W) {
    VF gv = hn::LoadU(df, g + l);
    if (p.silu) {
      gv = hn::Mul(gv, SiluGrad(df, taps.Pre(xpad, l)));
      hn::StoreU(gv, df, g + l);
    }
    for (int k = 0; k < K; ++k)
      sums->dw[k] = hn::MulAdd(gv, hn::LoadU(df, xpad + l + k), sums->dw[k]);
    sums->db = hn::Add(sums->db, gv);
  }
  const bool want_dx = p.dx.data != nullptr,
             want_dh0 = p.dinitial_states.data != nullptr && l0 == 0;
  if (!want_dx && !want_dh0) return;
  // dxpad[j] = sum_k w[k] g[j - k] = sum_k w[k] gpad[j + K-1 - k]
  for (int64_t j = 0; j < lay.Jp; j += W) {
    VF acc = hn::Zero(df);
    for (int k = 0; k < K; ++k) acc = hn::MulAdd(taps.w[k], hn::LoadU(df, gpad + j + h - k), acc);
    hn::StoreU(acc, df, dxpad + j);
  }
  const SeqView& dhf = p.dfinal_states;
  if (dhf.data && l0 + L == p.seqlen) {  // final_states = xpad[L, L + K-1)
    const int64_t offset = b * dhf.stride_batch + d * dhf.stride_dim;
    for (int64_t i = 0; i < h; ++i) dxpad[L + i] += LoadAsF32(dhf.data, dhf.dtype, offset + i);
  }
  if (want_dx) {
    RowFromF32Simd(df, dxpad + h, L, p.dx.data, p.dx.dtype,
                   b * p.dx.stride_batch + d * p.dx.stride_dim + l0);
  }
  if (want_dh0) {
    const SeqView& dh0 = p.dinitial_states;
    const int64_t offset = b * dh0.stride_batch + d * dh0.stride_dim;
    for (int64_t i = 0; i < h; ++i) StoreFromF32(dh0.data, dh0.dtype, offset + i, dxpad[i]);
  }
}

// Rows of the backward's operands requested this many batch rows ahead. A channel's rows are a
// batch stride apart (D L elements: 120 KB at policy-train's D 512, L 60), which the hardware
// prefetcher does not follow, so each short row waited on memory for x, dout and dx (policy-train
// fwd+bwd 23 ms against 2.8 for the forward, which walks rows in memory order). Tuned for speed
// only.
constexpr int64_t kPrefetchRowsAhead = 2;
// Bytes of a row asked for: longer rows are sequential enough for the hardware prefetcher.
constexpr int64_t kPrefetchRowBytes = 512;

// The first bytes of row (b, d) of v, for reading (rw 0) or writing (rw 1).
template <int kRw>
HWY_INLINE void PrefetchRow(const SeqView& v, int64_t b, int64_t d, int64_t L) {
  if (!v.data) return;
  const int64_t size = DTypeSize(v.dtype);
  const char* row =
      static_cast<const char*>(v.data) + (b * v.stride_batch + d * v.stride_dim) * size;
  const int64_t bytes = std::min(L * size, kPrefetchRowBytes);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(row + i, kRw, 3);
}

template <int K>
void BackwardImpl(const CausalConv1dBwdParams& p) {
  const DF df;
  const Layout lay = MakeLayout(K, p.seqlen);  // a packed sequence's buffers fit in these
  const PackedSequences seqs(p.seq_idx, {}, p.batch, p.seqlen);
  const int64_t elements = p.batch * p.dim * p.seqlen;
  const int64_t xs = Round16(lay.xpad()), gs = Round16(lay.gpad()), js = Round16(lay.Jp);
  const int64_t per_block = xs + gs + js;
  float* ws = ThreadScratch(ScratchSlot::kConv1d, Blocks(p.dim, elements) * per_block);
  MaybeParallelFor(p.dim, elements, [&](int64_t begin, int64_t end, int block) {
    float* xpad = ws + block * per_block;
    float* gpad = xpad + xs;
    float* dxpad = gpad + gs;
    for (int64_t d = begin; d < end; ++d) {
      const Taps<K> taps(p, d);
      ChannelSums<K> sums;
      for (int64_t b = 0; b < p.batch; ++b) {
        if (b + kPrefetchRowsAhead < p.batch) {
          const int64_t ahead = b + kPrefetchRowsAhead;
          PrefetchRow<0>(p.x, ahead, d, p.seqlen);
          PrefetchRow<0>(p.dout, ahead, d, p.seqlen);
          PrefetchRow<1>(p.dx, ahead, d, p.seqlen);
        }
        ForEachSequence(seqs, K, b, lay, [&](int64_t l0, const Layout& part) {
          BackwardRow<K>(p, part, taps, b, d, l0, xpad, gpad, dxpad, &sums);
        });
      }
      if (p.dweight.data) {
        float* dw = p.dweight.data + d * p.dweight.stride_dim;
        for (int k = 0; k < K; ++k) dw[k] = hn::GetLane(hn::SumOfLanes(df, sums.dw[k]));
      }
      if (p.dbias.data)
        p.dbias.data[d * p.dbias.stride_dim] = hn::GetLane(hn::SumOfLanes(df, sums.db));
    }
  });
}

// The end of an update pass over rows [first, last): the activation on the pass's T
// pre-activations per row (one vector pass), then the rows stored in out's dtype.
void FinishUpdatePass(const CausalConv1dUpdateParams& p, int64_t first, int64_t last, float* pre) {
  const DF df;
  const int64_t W = Lanes(), T = p.steps;
  const int64_t count = (last - first) * T;
  if (p.silu) {
    const int64_t padded = RoundUp(count, W);
    std::fill(pre + count, pre + padded, 0.0f);
    for (int64_t i = 0; i < padded; i += W) {
      const VF v = hn::LoadU(df, pre + i);
      hn::StoreU(hn::Mul(v, SigmoidNoDiv(df, v)), df, pre + i);
    }
  }
  RowCursor row(first, p.dim);
  for (int64_t r = first; r < last; ++r, row.Next()) {
    RowFromF32(pre + (r - first) * T, T, p.out.data, p.out.dtype,
               row.b() * p.out.stride_batch + row.d() * p.out.stride_dim);
  }
}

// Rows [begin, end) of an update in passes of kUpdateRowsPerPass rows: row_fn(b, d, state,
// pre_row) computes a row's T pre-activations into pre_row and moves its state on, then
// FinishUpdatePass ends the pass. Every x of a row is read before its out is written.
template <class RowFn>
void UpdatePasses(const CausalConv1dUpdateParams& p, int64_t begin, int64_t end,
                  float* pre /* (rows per pass * T, padded) */, RowFn&& row_fn) {
  for (int64_t first = begin; first < end; first += kUpdateRowsPerPass) {
    const int64_t last = std::min(end, first + kUpdateRowsPerPass);
    RowCursor row(first, p.dim);
    for (int64_t r = first; r < last; ++r, row.Next()) {
      float* state = static_cast<float*>(p.conv_state.data) + row.b() * p.conv_state.stride_batch +
                     row.d() * p.conv_state.stride_dim;  // (S), oldest first
      row_fn(row.b(), row.d(), state, pre + (r - first) * p.steps);
    }
    FinishUpdatePass(p, first, last, pre);
  }
}

// Any update: each row's window [state (S), x (T)] is built in f32, its T pre-activations
// computed, and its state replaced by the window's last S values.
void UpdateRows(const CausalConv1dUpdateParams& p, int64_t begin, int64_t end,
                float* window /* (S + T) */, float* pre) {
  const int64_t K = p.width, S = p.state_len, T = p.steps;
  UpdatePasses(p, begin, end, pre, [&](int64_t b, int64_t d, float* state, float* pre_row) {
    std::memcpy(window, state, static_cast<size_t>(S) * sizeof(float));
    RowToF32(p.x.data, p.x.dtype, b * p.x.stride_batch + d * p.x.stride_dim, T, window + S);
    const float* w = p.weight.data + d * p.weight.stride_dim;
    const float bias = p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f;
    for (int64_t t = 0; t < T; ++t) {
      const float* taps_in = window + S - (K - 1) + t;  // the K inputs of step t, oldest first
      float acc = bias;
      for (int64_t k = 0; k < K; ++k) acc += w[k] * taps_in[k];
      pre_row[t] = acc;
    }
    std::memcpy(state, window + T, static_cast<size_t>(S) * sizeof(float));
  });
}

// One decode step (T = 1) with the state holding exactly the K - 1 previous inputs (every
// Mamba checkpoint's layout): the sums of UpdateRows in the same order, with K a constant and
// no window copy; at D = 1536 the general row's copies and calls cost ~20 ns a row against
// ~2 ns of arithmetic.
template <int K>
void UpdateOneStepRows(const CausalConv1dUpdateParams& p, int64_t begin, int64_t end, float* pre) {
  UpdatePasses(p, begin, end, pre, [&](int64_t b, int64_t d, float* state, float* pre_row) {
    const float x = LoadAsF32(p.x.data, p.x.dtype, b * p.x.stride_batch + d * p.x.stride_dim);
    const float* w = p.weight.data + d * p.weight.stride_dim;
    float acc = p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f;
    for (int k = 0; k < K - 1; ++k) acc += w[k] * state[k];
    acc += w[K - 1] * x;
    for (int k = 0; k + 1 < K - 1; ++k) state[k] = state[k + 1];
    state[K - 2] = x;
    pre_row[0] = acc;
  });
}

// n consecutive interleaved rows of W channels: v[j] lane i = p[i * n + j] (n = 1..4).
template <int n>
HWY_INLINE void LoadChannels(const float* HWY_RESTRICT p, VF* v) {
  const DF df;
  if constexpr (n == 1) v[0] = hn::LoadU(df, p);
  if constexpr (n == 2) hn::LoadInterleaved2(df, p, v[0], v[1]);
  if constexpr (n == 3) hn::LoadInterleaved3(df, p, v[0], v[1], v[2]);
  if constexpr (n == 4) hn::LoadInterleaved4(df, p, v[0], v[1], v[2], v[3]);
}
template <int n>
HWY_INLINE void StoreChannels(const VF* v, float* HWY_RESTRICT p) {
  const DF df;
  if constexpr (n == 1) hn::StoreU(v[0], df, p);
  if constexpr (n == 2) hn::StoreInterleaved2(v[0], v[1], df, p);
  if constexpr (n == 3) hn::StoreInterleaved3(v[0], v[1], v[2], df, p);
  if constexpr (n == 4) hn::StoreInterleaved4(v[0], v[1], v[2], v[3], df, p);
}

// The decode step of UpdateOneStepRows vectorised across channels, for the layout every model
// has: f32 x and out with unit channel stride, the state rows (D, K - 1) and the weight rows
// (D, K) packed. The state and taps of W channels are de-interleaved in registers; the sums
// are those of UpdateOneStepRows in the same order (bias, then the K taps oldest first, fused
// multiply-adds), and the activation that of FinishUpdatePass: the same bits. `bench conv1d
// --shape decode`, m1-130m f32 (D = 1536): 2.2 us against 15.7 us row at a time.
template <int K>
bool VectorUpdateApplies(const CausalConv1dUpdateParams& p) {
  return K <= 4 && p.x.dtype == DType::kF32 && p.out.dtype == DType::kF32 && p.x.stride_dim == 1 &&
         p.out.stride_dim == 1 && p.conv_state.stride_dim == K - 1 && p.weight.stride_dim == K &&
         (p.bias.data == nullptr || p.bias.stride_dim == 1);
}

// Channels [d0, d0 + W) of batch row b.
template <int K>
HWY_INLINE void UpdateOneStepVector(const CausalConv1dUpdateParams& p, int64_t b, int64_t d0) {
  const DF df;
  const float* x = static_cast<const float*>(p.x.data) + b * p.x.stride_batch + d0;  // (W)
  float* out = static_cast<float*>(p.out.data) + b * p.out.stride_batch + d0;        // (W)
  float* state = static_cast<float*>(p.conv_state.data) + b * p.conv_state.stride_batch +
                 d0 * (K - 1);              // (W, K - 1), oldest first
  const float* w = p.weight.data + d0 * K;  // (W, K)
  VF taps[K], window[K];                    // window: the K inputs, oldest first
  LoadChannels<K>(w, taps);
  LoadChannels<K - 1>(state, window);
  window[K - 1] = hn::LoadU(df, x);
  VF acc = p.bias.data ? hn::LoadU(df, p.bias.data + d0) : hn::Zero(df);
  for (int k = 0; k < K; ++k) acc = hn::MulAdd(taps[k], window[k], acc);
  StoreChannels<K - 1>(window + 1, state);
  if (p.silu) acc = hn::Mul(acc, SigmoidNoDiv(df, acc));
  hn::StoreU(acc, df, out);
}

// Rows [begin, end): whole vectors of channels within each batch row, the rest row by row.
template <int K>
void UpdateOneStepVectorRows(const CausalConv1dUpdateParams& p, int64_t begin, int64_t end,
                             float* pre) {
  const int64_t W = Lanes(), D = p.dim;
  for (int64_t r = begin; r < end;) {
    const int64_t b = r / D, d_end = std::min(D, r - b * D + (end - r));
    int64_t d = r - b * D;
    for (; d + W <= d_end; d += W) UpdateOneStepVector<K>(p, b, d);
    if (d < d_end) UpdateOneStepRows<K>(p, b * D + d, b * D + d_end, pre);
    r = b * D + d_end;
  }
}

template <int K>
struct RunUpdateOneStep {
  static void Run(const CausalConv1dUpdateParams& p, int64_t elements, float* ws,
                  int64_t per_block) {
    const int64_t rows = p.batch * p.dim;
    const bool vector = VectorUpdateApplies<K>(p);
    MaybeParallelFor(rows, elements, [&](int64_t begin, int64_t end, int block) {
      if constexpr (K <= 4) {
        if (vector) return UpdateOneStepVectorRows<K>(p, begin, end, ws + block * per_block);
      }
      UpdateOneStepRows<K>(p, begin, end, ws + block * per_block);
    });
  }
};

// K as a template constant: the taps live in registers and the tap loops unroll.
template <template <int> class Fn, class Params, class... Args>
void DispatchWidth(const Params& p, Args... args) {
  switch (p.width) {
    case 2:
      return Fn<2>::Run(p, args...);
    case 3:
      return Fn<3>::Run(p, args...);
    case 4:
      return Fn<4>::Run(p, args...);
    case 5:
      return Fn<5>::Run(p, args...);
    case 6:
      return Fn<6>::Run(p, args...);
    case 7:
      return Fn<7>::Run(p, args...);
    default:
      return Fn<8>::Run(p, args...);  // the ops layer admits 2..8 only
  }
}

template <int K>
struct RunForward {
  static void Run(const CausalConv1dParams& p) { ForwardImpl<K>(p); }
};
template <int K>
struct RunBackward {
  static void Run(const CausalConv1dBwdParams& p) { BackwardImpl<K>(p); }
};

Status Conv1dForwardImpl(const CausalConv1dParams& p) {
  DispatchWidth<RunForward>(p);
  return Status::Ok();
}

Status Conv1dBackwardImpl(const CausalConv1dBwdParams& p) {
  DispatchWidth<RunBackward>(p);
  return Status::Ok();
}

Status Conv1dUpdateImpl(const CausalConv1dUpdateParams& p) {
  // Work: a multiply-add per tap, output and step (a decode batch of 8 at m1-130m's 1536
  // channels and 4 taps is worth both threads; one sequence is not).
  const int64_t rows = p.batch * p.dim, elements = rows * p.steps * p.width;
  const int64_t window = Round16(p.state_len + p.steps);
  const int64_t per_block = window + Round16(RoundUp(kUpdateRowsPerPass * p.steps, Lanes()));
  float* ws = ThreadScratch(ScratchSlot::kConv1d, Blocks(rows, elements) * per_block);
  if (p.steps == 1 && p.state_len == p.width - 1) {
    DispatchWidth<RunUpdateOneStep>(p, elements, ws, per_block);
    return Status::Ok();
  }
  MaybeParallelFor(rows, elements, [&](int64_t begin, int64_t end, int block) {
    float* w = ws + block * per_block;
    UpdateRows(p, begin, end, w, w + window);
  });
  return Status::Ok();
}

}  // namespace
}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(Conv1dForwardImpl);
HWY_EXPORT(Conv1dBackwardImpl);
HWY_EXPORT(Conv1dUpdateImpl);

Status CausalConv1dForward(const CausalConv1dParams& p) {
  return HWY_DYNAMIC_DISPATCH(Conv1dForwardImpl)(p);
}

Status CausalConv1dBackward(const CausalConv1dBwdParams& p) {
  return HWY_DYNAMIC_DISPATCH(Conv1dBackwardImpl)(p);
}

Status CausalConv1dUpdate(const CausalConv1dUpdateParams& p) {
  return HWY_DYNAMIC_DISPATCH(Conv1dUpdateImpl)(p);
}

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE

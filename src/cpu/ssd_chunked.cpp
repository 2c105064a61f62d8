// CPU SSD, chunked algorithm, forward: the SSD decomposition of ssd_chunk.hpp with its
// matrix products on OpenBLAS sgemm.
//
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Q chunk length, Hb heads of a task, HbP = Hb * P.
//
// Work is split over tasks (b, g, block of heads of group g) (ssd_common.hpp); a task walks
// its chunks in order, carrying the states S (HbP, N) of its heads. Per chunk:
//   CB   = C B^T                     (Q, Q)    shared by the task's heads; lower triangle
//   Y    = C S^T                     (Q, HbP)  all heads at once, then row t of head h
//                                              times exp(cs_t) (0 from the first reset on)
//   Y_h += (CB o decay_h o dt_h) X_h (Q, P)    per head, lower-triangular row blocks
//   out  = (Y + D x) silu(z)
//   S_h  = exp(cs_end) S_h + Xw^T B  (HbP, N)  Xw = exp(cs_end - cs_s) dt_s x_s (last
//                                              sequence of the chunk only)
#include <algorithm>
#include <vector>

#include "core/parallel.hpp"
#include "cpu/blas.hpp"
#include "cpu/ssd_chunk.hpp"
#include "cpu/ssd_common.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/ssd_chunked.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/ssd_chunk-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ChunkedForwardTask(const SsdParams& p, const ssd::PackedBC& Bp, const ssd::PackedBC& Cp,
                        int64_t b, int64_t g, int64_t h0, int64_t h1, ChunkScratch& s) {
  const int64_t L = p.seqlen, P = p.headdim, N = p.dstate, Q = std::min(p.chunk_size, L);
  const int64_t Hb = h1 - h0, HbP = Hb * P;
  StartChunkTask(p, b, h0, h1, s);
  for (int64_t c0 = 0; c0 < L; c0 += Q) {
    const int64_t len = std::min(Q, L - c0);
    PrepareChunk(p, Bp, Cp, b, g, h0, h1, c0, len, /*with_cb=*/true, s);
    ChunkOutput(p, Cp, b, g, h0, h1, c0, len, s);
    for (int64_t hl = 0; hl < Hb; ++hl)
      ssd::StoreOutput(p, b, h0 + hl, c0, len, s.Y.data() + hl * P, HbP);
    AdvanceStates(p, Bp, b, g, Hb, c0, len, s);
  }
  if (p.final_states.data) {
    const SsdStateView& v = p.final_states;
    for (int64_t h = h0; h < h1; ++h) {
      float* dst = v.data + b * v.stride_batch + h * v.stride_head;
      for (int64_t i = 0; i < P; ++i)
        for (int64_t n = 0; n < N; ++n) dst[i * v.stride_p + n] = s.S[((h - h0) * P + i) * N + n];
    }
  }
}

void ChunkedForwardImpl(const SsdParams& p) {
  ssd::PackedBC Bp, Cp;
  ssd::PackBC(p, p.B, &Bp);
  ssd::PackBC(p, p.C, &Cp);
  const ssd::TaskSplit split = ssd::MakeTaskSplit(p);
  blas::SingleThread blas_guard;
  ParallelFor(split.count(), [&](int64_t begin, int64_t end, int) {
    thread_local ChunkScratch s;  // kept between calls: no page faults per call
    for (int64_t task = begin; task < end; ++task) {
      int64_t b, g, h_begin, h_end;
      split.Decode(task, &b, &g, &h_begin, &h_end);
      ChunkedForwardTask(p, Bp, Cp, b, g, h_begin, h_end, s);
    }
  });
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu::ssd {

HWY_EXPORT(ChunkedForwardImpl);

void ChunkedForward(const SsdParams& p) { HWY_DYNAMIC_DISPATCH(ChunkedForwardImpl)(p); }

}  // namespace ssmkit::cpu::ssd
#endif  // HWY_ONCE

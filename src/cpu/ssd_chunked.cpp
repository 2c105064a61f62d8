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
#include <climits>
#include <mutex>
#include <vector>

#include "core/parallel.hpp"
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
  ssd::BlasSingleThread blas_guard;
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

namespace {
std::mutex g_blas_mutex;
int g_blas_guards = 0;  // BlasSingleThread objects alive in the process
int g_blas_saved = 1;   // OpenBLAS's thread count before the first of them
}  // namespace

BlasSingleThread::BlasSingleThread() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (g_blas_guards++ == 0) {
    g_blas_saved = openblas_get_num_threads();
    if (g_blas_saved != 1) openblas_set_num_threads(1);
  }
}

BlasSingleThread::~BlasSingleThread() {
  std::lock_guard<std::mutex> lock(g_blas_mutex);
  if (--g_blas_guards == 0 && g_blas_saved != 1) openblas_set_num_threads(g_blas_saved);
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const bool fits = std::max({m, n, k, lda, ldb, ldc}) <= INT_MAX;
  if (fits && k > 0) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
    return;
  }
  // A dimension or stride beyond OpenBLAS's 32-bit int (or k = 0): plain loops.
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t q = 0; q < k; ++q) {
        const float av = trans_a ? a[q * lda + i] : a[i * lda + q];
        const float bv = trans_b ? b[j * ldb + q] : b[q * ldb + j];
        acc += av * bv;
      }
      c[i * ldc + j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
    }
  }
}

}  // namespace ssmkit::cpu::ssd
#endif  // HWY_ONCE

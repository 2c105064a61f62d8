// Row-major f32 GEMM for the trainer, C = alpha op(A) op(B) + beta C, split over the library's
// threads: the larger of C's two dimensions is cut into NumThreads() blocks, each computed by
// one single-threaded OpenBLAS call. One thread pool (the library's) serves the ops and the GEMMs
// alike; letting OpenBLAS's own pool run between the ops' parallel loops left both spinning
// against each other (half the step time in sched_yield and the other pool's wait loop,
// measured with perf).
// Every element of C is computed by one call in a fixed order: deterministic for a given
// thread count.
#pragma once

#include <cstdint>

namespace ssmkit::train {

void ParallelGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc);

}  // namespace ssmkit::train

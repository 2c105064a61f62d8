#include "cpu/blas.hpp"
#include "train/gemm.hpp"

#include <algorithm>

#include "core/parallel.hpp"

namespace ssmkit::train {

void ParallelGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  cpu::blas::SingleThread single;
  // Blocks narrower than this many rows or columns cost more in packing than they save.
  constexpr int64_t kMinBlock = 32;
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>(ParallelBlocks(extent), extent / kMinBlock));
  if (blocks == 1) {
    cpu::blas::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // ParallelFor over the block indices: block t always gets the same rows or columns, so the
  // split (and the bits) depend only on the shape and the thread count.
  ParallelFor(blocks, [&](int64_t t, int64_t, int) {
    const int64_t begin = extent * t / blocks, end = extent * (t + 1) / blocks;
    if (split_rows) {
      const float* a_rows = trans_a ? a + begin : a + begin * lda;
      cpu::blas::Gemm(trans_a, trans_b, end - begin, n, k, alpha, a_rows, lda, b, ldb, beta,
                      c + begin * ldc, ldc);
    } else {
      const float* b_cols = trans_b ? b + begin * ldb : b + begin;
      cpu::blas::Gemm(trans_a, trans_b, m, end - begin, k, alpha, a, lda, b_cols, ldb, beta,
                      c + begin, ldc);
    }
  });
}

}  // namespace ssmkit::train

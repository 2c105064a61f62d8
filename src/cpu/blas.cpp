#include "cpu/blas.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <mutex>

namespace ssmkit::cpu::blas {
namespace {
std::mutex g_mutex;
int g_guards = 0;  // SingleThread objects alive in the process
int g_saved = 1;   // OpenBLAS's thread count before the first of them
}  // namespace

SingleThread::SingleThread() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_guards++ == 0) {
    g_saved = openblas_get_num_threads();
    if (g_saved != 1) openblas_set_num_threads(1);
  }
}

SingleThread::~SingleThread() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_guards == 0 && g_saved != 1) openblas_set_num_threads(g_saved);
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

}  // namespace ssmkit::cpu::blas

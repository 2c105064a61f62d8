// The library's one door to OpenBLAS: a row-major sgemm with int64 arguments, and the guard
// that keeps OpenBLAS on one thread while our own threads split the work. Every CPU kernel and
// the trainer call sgemm through here (linear, MLP, MoE, the chunked SSD, train::ParallelGemm).
#pragma once

#include <cstdint>

namespace ssmkit::cpu::blas {

// Keeps OpenBLAS to one thread per call while our own threads split the work: the pthread
// OpenBLAS would otherwise start its own pool inside each of our ParallelFor blocks and the
// two would fight over the cores. The setting is process-wide, so it is restored when the last
// guard alive in the process ends: with callers on several threads at once (a server, a BEAM
// VM, XLA's pool), one caller leaving must not hand OpenBLAS its threads back while another is
// inside a product (that changed the bits of concurrent results).
class SingleThread {
 public:
  SingleThread();
  ~SingleThread();
  SingleThread(const SingleThread&) = delete;
  SingleThread& operator=(const SingleThread&) = delete;
};

// Row-major single-precision GEMM, C = alpha op(A) op(B) + beta C, with int64 arguments
// checked to fit OpenBLAS's int.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ssmkit::cpu::blas

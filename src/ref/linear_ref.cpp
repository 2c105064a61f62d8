#include "ref/linear_ref.hpp"

namespace ssmkit::ref {

void Linear(int64_t T, int64_t K, int64_t M, const double* x, const double* w, const double* bias,
            double* out) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t m = 0; m < M; ++m) {
      double sum = bias != nullptr ? bias[m] : 0.0;
      for (int64_t k = 0; k < K; ++k) sum += x[t * K + k] * w[m * K + k];
      out[t * M + m] = sum;
    }
  }
}

void LinearBackward(int64_t T, int64_t K, int64_t M, const double* x, const double* w,
                    const double* dout, double* dx, double* dw, double* dbias) {
  for (int64_t t = 0; dx != nullptr && t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      double sum = 0.0;
      for (int64_t m = 0; m < M; ++m) sum += dout[t * M + m] * w[m * K + k];
      dx[t * K + k] = sum;
    }
  }
  for (int64_t m = 0; dw != nullptr && m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      double sum = 0.0;
      for (int64_t t = 0; t < T; ++t) sum += dout[t * M + m] * x[t * K + k];
      dw[m * K + k] = sum;
    }
  }
  for (int64_t m = 0; dbias != nullptr && m < M; ++m) {
    double sum = 0.0;
    for (int64_t t = 0; t < T; ++t) sum += dout[t * M + m];
    dbias[m] = sum;
  }
}

}  // namespace ssmkit::ref

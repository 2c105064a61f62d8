// The fp64 oracle of LinearForward and LinearBackward (include/ssmkit/linear.hpp). Contiguous
// row-major arrays. Dimension legend: T rows, K input features, M output features.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

// out[t, m] = sum_k x[t, k] * w[m, k] + bias[m]. x (T, K), w (M, K), bias (M) or nullptr,
// out (T, M).
void Linear(int64_t T, int64_t K, int64_t M, const double* x, const double* w, const double* bias,
            double* out);

// dx[t, k] = sum_m dout[t, m] w[m, k]; dw[m, k] = sum_t dout[t, m] x[t, k];
// dbias[m] = sum_t dout[t, m]. dout (T, M); each output may be nullptr (not computed).
void LinearBackward(int64_t T, int64_t K, int64_t M, const double* x, const double* w,
                    const double* dout, double* dx, double* dw, double* dbias);

}  // namespace ssmkit::ref

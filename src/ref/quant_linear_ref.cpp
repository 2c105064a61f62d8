#include "ref/quant_linear_ref.hpp"

#include <vector>

#include "core/quant.hpp"
#include "ref/linear_ref.hpp"

namespace ssmkit::ref {

void QuantLinear(int64_t T, int64_t K, int64_t M, const double* x, DType w_dtype, const void* w,
                 const double* bias, double* out) {
  std::vector<double> wd(static_cast<size_t>(M * K));  // (M, K)
  std::vector<float> row(static_cast<size_t>(K));
  const int64_t row_bytes = DTypeRowBytes(w_dtype, K);
  for (int64_t m = 0; m < M; ++m) {
    quant::DequantizeRow(w_dtype, static_cast<const uint8_t*>(w) + m * row_bytes, K, row.data());
    for (int64_t k = 0; k < K; ++k) wd[m * K + k] = row[k];
  }
  Linear(T, K, M, x, wd.data(), bias, out);
}

}  // namespace ssmkit::ref

// CPU backward of the linear layer: three products, each split over threads by the rows of
// what it writes, each block one single-threaded OpenBLAS sgemm (or a fixed-order sum), so every
// output element is computed by one thread in one order: deterministic for a thread count.
// Dimension legend: T rows, K input features, M output features.
//
//   dx (T, K) = dout (T, M) W (M, K)
//   dW (M, K) = dout^T (M, T) x (T, K)
//   dbias (M) = sum over t of dout[t, :]
//
// x, dout and dx may each be row-major or feature-major (LinearParams' strides); a Matrix view
// carries both strides, and Product turns each layout into sgemm's transpose flags.
#include <algorithm>

#include "core/parallel.hpp"
#include "cpu/blas.hpp"
#include "cpu/linear.hpp"

namespace ssmkit::cpu {
namespace {

// Below this many multiply-adds a product stays on the calling thread. Tuned for speed only.
constexpr int64_t kMinParallelWork = 1 << 18;

// A (rows, cols) f32 matrix with element (i, j) at data[i * s_row + j * s_col], one of the two
// strides being 1 (or the matrix a single row or column).
struct Matrix {
  float* data;
  int64_t rows, cols, s_row, s_col;

  bool row_major() const { return s_col == 1; }
  // sgemm's leading dimension. A single row (row-major) or column (column-major) is never
  // stepped over by it, but sgemm still wants it at least the other extent.
  int64_t ld() const {
    if (row_major()) return rows == 1 ? std::max(s_row, cols) : s_row;
    return cols == 1 ? std::max(s_col, rows) : s_col;
  }
  Matrix Transposed() const { return {data, cols, rows, s_col, s_row}; }
  Matrix Rows(int64_t begin, int64_t end) const {
    return {data + begin * s_row, end - begin, cols, s_row, s_col};
  }
};

Matrix View(const float* data, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  // sgemm reads a single row or column through its leading dimension: make that stride the one
  // the layout test below sees.
  if (cols == 1) s_col = 1;
  return {const_cast<float*>(data), rows, cols, std::max<int64_t>(s_row, 1), s_col};
}

// c = a b (overwritten) on the calling thread.
void Product(const Matrix& a, const Matrix& b, const Matrix& c) {
  if (!c.row_major()) {  // c^T = b^T a^T, with c^T row-major
    Product(b.Transposed(), a.Transposed(), c.Transposed());
    return;
  }
  blas::Gemm(!a.row_major(), !b.row_major(), c.rows, c.cols, a.cols, 1.0f, a.data, a.ld(), b.data,
             b.ld(), 0.0f, c.data, c.ld());
}

// c = a b with c's rows split over threads.
void ParallelProduct(const Matrix& a, const Matrix& b, const Matrix& c) {
  if (c.rows * c.cols * a.cols < kMinParallelWork) {
    Product(a, b, c);
    return;
  }
  ParallelFor(c.rows, [&](int64_t begin, int64_t end, int) {
    Product(a.Rows(begin, end), b, c.Rows(begin, end));
  });
}

}  // namespace

Status LinearBackward(const LinearBackwardParams& p) {
  const int64_t T = p.rows, K = p.in_features, M = p.out_features;
  const Matrix x = View(p.x, T, K, p.x_stride_row, p.x_stride_feature);
  const Matrix w = View(static_cast<const float*>(p.weight), M, K, K, 1);
  const Matrix dout = View(p.dout, T, M, p.dout_stride_row, p.dout_stride_feature);
  blas::SingleThread single;
  if (p.dx != nullptr) {
    ParallelProduct(dout, w, View(p.dx, T, K, p.dx_stride_row, p.dx_stride_feature));
  }
  if (p.dweight != nullptr) ParallelProduct(dout.Transposed(), x, View(p.dweight, M, K, K, 1));
  if (p.dbias != nullptr) {
    auto sum_columns = [&](int64_t begin, int64_t end, int) {
      for (int64_t m = begin; m < end; ++m) p.dbias[m] = 0.0f;
      for (int64_t t = 0; t < T; ++t) {
        const float* row = p.dout + t * p.dout_stride_row;
        for (int64_t m = begin; m < end; ++m) p.dbias[m] += row[m * p.dout_stride_feature];
      }
    };
    if (T * M < kMinParallelWork) {
      sum_columns(0, M, 0);
    } else {
      ParallelFor(M, sum_columns);
    }
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu

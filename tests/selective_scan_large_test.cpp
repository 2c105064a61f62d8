// int64 indexing: one sequential-path forward over B*D*L*N = 2 * 9 * 2^23 * 16 ~ 2.4e9 > 2^31
// state elements, with the second batch of every tensor placed more than 2^31 elements past
// the first (batch strides of 2^31 + 2^20), so any offset computed in 32 bits lands elsewhere.
// The buffers are sparse anonymous mappings: only the pages holding elements are ever touched,
// so the ~27 GB of address space costs ~1.8 GB of memory (u, delta and out; B and C are the
// constant (D, N) form, which keeps them small). Checked against the fp64 oracle on four
// whole rows, the first and last channel of each batch (the last row included), sliced out.
// Labelled `large` (the file name): excluded from the sanitizer preset.
#include <cmath>
#include <cstddef>

#include "selective_scan_fixture.hpp"
#include "sparse_floats.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kBatch = 2, kDim = 9, kLen = int64_t{1} << 23, kState = 16;
constexpr int64_t kFarBatchStride = (int64_t{1} << 31) + (int64_t{1} << 20);  // elements

// A (B, rows, cols) f32 view whose batch stride is kFarBatchStride.
Tensor FarBatchView(float* data, int64_t rows, int64_t cols) {
  Tensor t = Tensor::Contiguous(data, DType::kF32, {kBatch, rows, cols});
  t.strides[0] = kFarBatchStride;
  return t;
}

TEST(SelectiveScanLarge, StateElementsAndOffsetsPast2To31) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ASSERT_GT(kBatch * kDim * kLen * kState, int64_t{1} << 31);
  const int64_t seq_span = kFarBatchStride + kDim * kLen,
                state_span = kFarBatchStride + kDim * kState;
  SparseFloats u(seq_span), delta(seq_span), out(seq_span), h0(state_span), final_state(state_span);
  for (const SparseFloats* b : {&u, &delta, &out, &h0, &final_state}) {
    ASSERT_NE(b->data(), nullptr) << "could not reserve " << seq_span * 4
                                  << " bytes of address space";
  }
  auto row = [](const SparseFloats& buf, int64_t b, int64_t d, int64_t len) {
    return buf.data() + b * kFarBatchStride + d * len;
  };

  // Fresh random inputs: u ~ N(0, 1), delta uniform in [-7, -2.3] so that dt = softplus(delta
  // + bias) lies in ~[1e-3, 0.15], A = -(n + 1) scaled per channel (S4D-real).
  Rng rng(seed);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t d = 0; d < kDim; ++d) {
      float* ur = row(u, b, d, kLen);
      float* dr = row(delta, b, d, kLen);
      float* outr = row(out, b, d, kLen);
      for (int64_t l = 0; l < kLen; ++l) {
        ur[l] = static_cast<float>(rng.Normal());
        dr[l] = static_cast<float>(rng.Uniform(-7.0, -2.3));
        outr[l] = std::nanf("");
      }
      float* hr = row(h0, b, d, kState);
      float* fr = row(final_state, b, d, kState);
      for (int64_t n = 0; n < kState; ++n) {
        hr[n] = static_cast<float>(rng.Normal());
        fr[n] = std::nanf("");
      }
    }
  }
  std::vector<float> A(kDim * kState), B(kDim * kState), C(kDim * kState), D(kDim), bias(kDim);
  for (int64_t d = 0; d < kDim; ++d) {
    const double scale = std::exp(rng.Uniform(-0.5, 0.5));
    for (int64_t n = 0; n < kState; ++n) {
      A[d * kState + n] = static_cast<float>(-(n + 1) * scale);
      B[d * kState + n] = static_cast<float>(rng.Normal());
      C[d * kState + n] = static_cast<float>(rng.Normal());
    }
    D[d] = static_cast<float>(rng.Normal());
    bias[d] = static_cast<float>(rng.Uniform(-0.2, 0.2));
  }

  SelectiveScanInputs in;
  in.u = FarBatchView(u.data(), kDim, kLen);
  in.delta = FarBatchView(delta.data(), kDim, kLen);
  in.A = Tensor::Contiguous(A.data(), DType::kF32, {kDim, kState});
  in.B = Tensor::Contiguous(B.data(), DType::kF32, {kDim, kState});
  in.C = Tensor::Contiguous(C.data(), DType::kF32, {kDim, kState});
  in.D = Tensor::Contiguous(D.data(), DType::kF32, {kDim});
  in.delta_bias = Tensor::Contiguous(bias.data(), DType::kF32, {kDim});
  in.initial_state = FarBatchView(h0.data(), kDim, kState);
  in.delta_softplus = true;
  const ScopedThreads threads(2);
  const Status status = SelectiveScanForward(in, FarBatchView(out.data(), kDim, kLen),
                                             FarBatchView(final_state.data(), kDim, kState));
  ASSERT_TRUE(status.ok()) << status.message();

  // Rows are independent: the oracle runs on one (b, d) row's slice at a time.
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t d : {int64_t{0}, kDim - 1}) {
      SCOPED_TRACE("row b=" + std::to_string(b) + " d=" + std::to_string(d));
      auto slice = [](const float* p, int64_t n) { return std::vector<double>(p, p + n); };
      const std::vector<double> u_d = slice(row(u, b, d, kLen), kLen),
                                delta_d = slice(row(delta, b, d, kLen), kLen);
      const std::vector<double> A_d = slice(&A[d * kState], kState),
                                B_d = slice(&B[d * kState], kState);
      const std::vector<double> C_d = slice(&C[d * kState], kState),
                                h0_d = slice(row(h0, b, d, kState), kState);
      const double D_d = D[d], bias_d = bias[d];
      ref::ScanShape shape;
      shape.dim = 1;
      shape.seqlen = kLen;
      shape.dstate = kState;
      shape.b_variable = shape.c_variable = false;
      shape.delta_softplus = true;
      ref::ScanInputs ref_in;
      ref_in.u = u_d.data();
      ref_in.delta = delta_d.data();
      ref_in.A = A_d.data();
      ref_in.B = B_d.data();
      ref_in.C = C_d.data();
      ref_in.D = &D_d;
      ref_in.delta_bias = &bias_d;
      ref_in.h0 = h0_d.data();
      std::vector<double> ref_out(kLen), ref_state(kState);
      ref::SelectiveScanForward(shape, ref_in, ref_out.data(), ref_state.data());
      EXPECT_LE(RelativeError(slice(row(out, b, d, kLen), kLen), ref_out), 1e-5);
      EXPECT_LE(RelativeError(slice(row(final_state, b, d, kState), kState), ref_state), 1e-5);
    }
  }
  // Every other row was written too (NaN before the call): spot-check each row's ends.
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t d = 0; d < kDim; ++d) {
      EXPECT_TRUE(std::isfinite(row(out, b, d, kLen)[0]) &&
                  std::isfinite(row(out, b, d, kLen)[kLen - 1]))
          << "row b=" << b << " d=" << d;
      EXPECT_TRUE(std::isfinite(row(final_state, b, d, kState)[kState - 1]))
          << "row b=" << b << " d=" << d;
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

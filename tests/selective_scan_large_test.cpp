// int64 indexing: one sequential-path forward over more than 2^31 state elements
// (B*D*L*N = 17 * 2^23 * 16 ~ 2.28e9), checked channel by channel against the fp64 oracle.
// About 1.7 GB of f32 tensors; labelled `large` (excluded from the sanitizer preset).
#include <cmath>

#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

TEST(SelectiveScanLarge, MoreThan2To31StateElements) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int64_t D = 17, L = int64_t{1} << 23, N = 16;
  ASSERT_GT(D * L * N, int64_t{1} << 31);
  Rng rng(seed);
  // Constant (D, N) B and C keep the memory to u, delta and out.
  std::vector<float> u(D * L), delta(D * L), out(D * L, std::nanf("")), A(D * N), B(D * N), C(D * N);
  std::vector<float> final_state(D * N, std::nanf(""));
  for (auto& x : u) x = static_cast<float>(rng.Normal());
  for (auto& x : delta) x = static_cast<float>(std::log(std::expm1(std::exp(rng.Uniform(std::log(1e-3), std::log(0.1))))));
  for (int64_t i = 0; i < D * N; ++i) {
    A[i] = -static_cast<float>(i % N + 1);
    B[i] = static_cast<float>(rng.Normal());
    C[i] = static_cast<float>(rng.Normal());
  }
  SelectiveScanInputs in;
  in.u = Tensor::Contiguous(u.data(), DType::kF32, {1, D, L});
  in.delta = Tensor::Contiguous(delta.data(), DType::kF32, {1, D, L});
  in.A = Tensor::Contiguous(A.data(), DType::kF32, {D, N});
  in.B = Tensor::Contiguous(B.data(), DType::kF32, {D, N});
  in.C = Tensor::Contiguous(C.data(), DType::kF32, {D, N});
  in.delta_softplus = true;
  const Status status = SelectiveScanForward(in, Tensor::Contiguous(out.data(), DType::kF32, {1, D, L}),
                                             Tensor::Contiguous(final_state.data(), DType::kF32, {1, D, N}));
  ASSERT_TRUE(status.ok()) << status.message();

  // Channels are independent: the oracle runs on one channel's slice at a time.
  for (int64_t d : {int64_t{0}, int64_t{8}, D - 1}) {
    std::vector<double> u_d(u.begin() + d * L, u.begin() + (d + 1) * L);
    std::vector<double> delta_d(delta.begin() + d * L, delta.begin() + (d + 1) * L);
    std::vector<double> A_d(A.begin() + d * N, A.begin() + (d + 1) * N);
    std::vector<double> B_d(B.begin() + d * N, B.begin() + (d + 1) * N);
    std::vector<double> C_d(C.begin() + d * N, C.begin() + (d + 1) * N);
    ref::ScanShape shape;
    shape.dim = 1;
    shape.seqlen = L;
    shape.dstate = N;
    shape.b_variable = shape.c_variable = false;
    shape.delta_softplus = true;
    ref::ScanInputs ref_in;
    ref_in.u = u_d.data();
    ref_in.delta = delta_d.data();
    ref_in.A = A_d.data();
    ref_in.B = B_d.data();
    ref_in.C = C_d.data();
    std::vector<double> ref_out(L), ref_state(N);
    ref::SelectiveScanForward(shape, ref_in, ref_out.data(), ref_state.data());
    const std::vector<double> got(out.begin() + d * L, out.begin() + (d + 1) * L);
    const std::vector<double> got_state(final_state.begin() + d * N, final_state.begin() + (d + 1) * N);
    EXPECT_LE(RelativeError(got, ref_out), 1e-5) << "channel " << d;
    EXPECT_LE(RelativeError(got_state, ref_state), 1e-5) << "channel " << d;
  }
}

}  // namespace
}  // namespace ssmkit::testing

// LinearForward on a quantized weight, the valid call beside the bad inputs (which are
// tests/harness/cases/linear.cpp's): K = 32, one Q8_0 block per row, all-zero blocks give the
// bias.
#include <cstdint>
#include <vector>

#include "ssmkit/linear.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

TEST(LinearErrors, QuantizedWeightSucceeds) {
  constexpr int64_t kT = 3, kM = 4, kBlockK = 32;
  HostTensor bias({kM}, DType::kF32), out({kT, kM}, DType::kF32);
  bias.Fill(Rng(FreshSeed()).NormalVec(kM));
  out.Poison();
  std::vector<uint8_t> bytes(kM * DTypeBlockBytes(DType::kQ8_0), 0);
  std::vector<float> x(kT * kBlockK, 1.0f);
  const LinearInputs in{Tensor::Contiguous(x.data(), DType::kF32, {kT, kBlockK}),
                        Tensor::Contiguous(bytes.data(), DType::kQ8_0, {kM, kBlockK}), bias.view()};
  ASSERT_TRUE(LinearForward(in, out.view()).ok());
  const std::vector<double> got = out.ToDouble(), want = bias.ToDouble();
  for (int64_t i = 0; i < kT * kM; ++i) EXPECT_EQ(got[i], want[i % kM]) << i;
}

}  // namespace
}  // namespace ssmkit::testing

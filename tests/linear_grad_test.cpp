// LinearBackward, what the op harness's table cannot say (its cases against the oracle, each
// gradient alone, and its bad inputs are in tests/harness/cases/linear.cpp, which declares dout
// itself and so runs no finite differences): the oracle's gradients against central
// differences, a call with no gradient requested, the same bits across runs.
// Dimension legend: T rows, K input features, M output features.
#include <vector>

#include "ref/linear_ref.hpp"
#include "ssmkit/linear.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// The oracle's backward against central differences of sum(out * dout) through its forward.
TEST(LinearGrad, OracleMatchesFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t T = 5, K = 7, M = 4;
  std::vector<double> x = rng.NormalVec(T * K), w = rng.NormalVec(M * K), b = rng.NormalVec(M);
  const std::vector<double> dout = rng.NormalVec(T * M);
  auto loss = [&] {
    std::vector<double> out(T * M);
    ref::Linear(T, K, M, x.data(), w.data(), b.data(), out.data());
    double sum = 0.0;
    for (int64_t i = 0; i < T * M; ++i) sum += out[i] * dout[i];
    return sum;
  };
  std::vector<double> dx(T * K), dw(M * K), db(M), fx(T * K), fw(M * K), fb(M);
  ref::LinearBackward(T, K, M, x.data(), w.data(), dout.data(), dx.data(), dw.data(), db.data());
  for (size_t i = 0; i < x.size(); ++i) fx[i] = CentralDifference(x, i, 1e-5, loss);
  for (size_t i = 0; i < w.size(); ++i) fw[i] = CentralDifference(w, i, 1e-5, loss);
  for (size_t i = 0; i < b.size(); ++i) fb[i] = CentralDifference(b, i, 1e-5, loss);
  EXPECT_LE(RelativeError(dx, fx), 1e-8);
  EXPECT_LE(RelativeError(dw, fw), 1e-8);
  EXPECT_LE(RelativeError(db, fb), 1e-8);
}

// Every gradient optional: with none requested the call succeeds and computes nothing.
TEST(LinearGrad, NoGradientRequested) {
  Rng rng(FreshSeed());
  HostTensor x({12, 10}, DType::kF32), w({6, 10}, DType::kF32), bias({6}, DType::kF32),
      dout({12, 6}, DType::kF32);
  for (HostTensor* t : {&x, &w, &bias, &dout}) t->Fill(rng.NormalVec(t->numel()));
  const Status s = LinearBackward({x.view(), w.view(), bias.view()}, dout.view(), LinearGrads{});
  EXPECT_TRUE(s.ok()) << s.message();
}

// Two calls with the same inputs and thread count give the same bits.
TEST(LinearGrad, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t T = 200, K = 96, M = 130;
  HostTensor x({T, K}, DType::kF32), w({M, K}, DType::kF32), bias({M}, DType::kF32),
      dout({T, M}, DType::kF32);
  for (HostTensor* t : {&x, &w, &bias, &dout}) t->Fill(rng.NormalVec(t->numel()));
  std::vector<uint8_t> bits[2];
  for (std::vector<uint8_t>& b : bits) {
    HostTensor dx({T, K}, DType::kF32), dw({M, K}, DType::kF32), db({M}, DType::kF32);
    ASSERT_TRUE(LinearBackward({x.view(), w.view(), bias.view()}, dout.view(),
                               {dx.view(), dw.view(), db.view()})
                    .ok());
    b = dx.bytes();
    b.insert(b.end(), dw.bytes().begin(), dw.bytes().end());
    b.insert(b.end(), db.bytes().begin(), db.bytes().end());
  }
  EXPECT_EQ(bits[0], bits[1]);
}

}  // namespace
}  // namespace ssmkit::testing

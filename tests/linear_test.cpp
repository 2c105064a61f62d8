// LinearForward, what the op harness's table cannot say (its cases against the oracle and its
// bad inputs are in tests/harness/cases/linear.cpp): the same bits across runs, a row's bits
// whatever the batch around it, concurrent callers getting the bits of a lone call.
#include "ssmkit/linear.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// Two calls with the same inputs and thread count give the same bits, on both paths (the
// few-rows kernel and sgemm).
TEST(LinearForward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t K = 512, M = 333;
  HostTensor w({M, K}, DType::kBF16), bias({M}, DType::kF32);
  w.Fill(rng.NormalVec(M * K, 0.1));
  bias.Fill(rng.NormalVec(M));
  for (int64_t T : {1, 8, 24}) {
    HostTensor x({T, K}, DType::kF32), first({T, M}, DType::kF32), second({T, M}, DType::kF32);
    x.Fill(rng.NormalVec(T * K));
    ASSERT_TRUE(LinearForward({x.view(), w.view(), bias.view()}, first.view()).ok());
    ASSERT_TRUE(LinearForward({x.view(), w.view(), bias.view()}, second.view()).ok());
    EXPECT_EQ(first.bytes(), second.bytes()) << "T=" << T;
  }
}

// A decode batch of T >= 2 rows: each row's output bits do not depend on the other rows or on T
// (the few-rows kernel sums each output in one fixed order whatever tile it falls in), so a
// server's sequences do not change as others join or leave the batch.
TEST(LinearForward, RowsDoNotDependOnTheBatch) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  // K = 333: the tiles and K's tail (K % 16 != 0); K = 20: the outer-product kernel, M = 101
  // over one whole block of weight rows and a partial one.
  const int64_t M = 101;
  for (const auto& [K, wd] :
       {std::pair{int64_t{333}, DType::kF32}, std::pair{int64_t{333}, DType::kBF16},
        std::pair{int64_t{20}, DType::kF32}, std::pair{int64_t{20}, DType::kF16}}) {
    HostTensor w({M, K}, wd);
    w.Fill(rng.NormalVec(M * K, 0.1));
    HostTensor bias({M}, DType::kF32);
    bias.Fill(rng.NormalVec(M));
    HostTensor x({kLinearGemvMaxRows, K}, DType::kF32);
    x.Fill(rng.NormalVec(kLinearGemvMaxRows * K));
    std::vector<float> first;  // row 0's outputs at T = 2
    for (int64_t T = 2; T <= kLinearGemvMaxRows; ++T) {
      std::vector<float> out(static_cast<size_t>(T * M), std::nanf(""));
      Tensor xv = x.view();
      xv.shape[0] = T;
      const Status s = LinearForward({xv, w.view(), bias.view()},
                                     Tensor::Contiguous(out.data(), DType::kF32, {T, M}));
      ASSERT_TRUE(s.ok()) << s.message();
      if (first.empty()) first.assign(out.begin(), out.begin() + M);
      EXPECT_EQ(std::memcmp(out.data(), first.data(), M * sizeof(float)), 0)
          << DTypeName(wd) << " K=" << K << ": row 0 at T=" << T << " differs from T=2";
    }
  }
}

// Callers on several threads at once (a server, a BEAM VM, XLA's pool): each gets the bits a
// lone call gets. OpenBLAS's thread count is process-wide; a caller that restored it while
// another was inside sgemm once changed the other's results.
TEST(LinearForward, ConcurrentCallersGetTheBitsOfALoneCall) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ScopedThreads scoped(2);
  Rng rng(seed);
  // More rows than the few-rows kernel takes: the calls go through OpenBLAS's sgemm.
  const int64_t T = kLinearGemvMaxRows + 32;
  HostTensor x({T, 96}, DType::kF32), w({80, 96}, DType::kF32), want({T, 80}, DType::kF32);
  x.Fill(rng.NormalVec(x.numel()));
  w.Fill(rng.NormalVec(w.numel()));
  ASSERT_TRUE(LinearForward({x.view(), w.view(), Tensor{}}, want.view()).ok());
  std::atomic<int> differing{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back([&] {
      HostTensor out({T, 80}, DType::kF32);
      for (int i = 0; i < 1000; ++i) {
        if (!LinearForward({x.view(), w.view(), Tensor{}}, out.view()).ok() ||
            out.bytes() != want.bytes()) {
          ++differing;
        }
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(differing.load(), 0) << "of 8000 concurrent calls";
}

}  // namespace
}  // namespace ssmkit::testing

// LinearForward against the fp64 oracle: f32, bf16 and f16 weights, the matrix-vector kernel
// (T <= 8) and the sgemm path (T > 8, and transposed layouts), bias on and off, x and out
// row-major or feature-major, row strides wider than the row, K not a multiple of the vector
// width, shapes large enough to split over threads, every compiled SIMD target, determinism.
#include "ssmkit/linear.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "ref/linear_ref.hpp"
#include "selective_scan_fixture.hpp"  // ForEachSimdTarget
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct LinearCase {
  int64_t T, K, M;
  DType wdtype = DType::kF32;
  bool bias = false;
  bool x_feature_major = false;
  bool out_feature_major = false;
  int64_t pad = 0;  // extra elements per stored row of x and out
};

std::string Describe(const LinearCase& c) {
  return "T=" + std::to_string(c.T) + " K=" + std::to_string(c.K) + " M=" + std::to_string(c.M) +
         " w=" + DTypeName(c.wdtype) + (c.bias ? " bias" : "") + (c.x_feature_major ? " x^T" : "") +
         (c.out_feature_major ? " out^T" : "") + " pad=" + std::to_string(c.pad);
}

// A (rows, cols) f32 matrix stored row-major with row stride cols + pad, or feature-major
// (as the transpose of a (cols, rows) buffer with row stride rows + pad).
struct StoredMatrix {
  int64_t rows, cols, pad;
  bool feature_major;
  HostTensor storage;
  StoredMatrix(int64_t r, int64_t c, int64_t p, bool fm)
      : rows(r),
        cols(c),
        pad(p),
        feature_major(fm),
        storage(fm ? std::vector<int64_t>{c, r + p} : std::vector<int64_t>{r, c + p}, DType::kF32) {
  }
  int64_t Index(int64_t i, int64_t j) const {
    return feature_major ? j * (rows + pad) + i : i * (cols + pad) + j;
  }
  Tensor view() {
    Tensor t = storage.view();
    t.shape = {rows, cols};
    t.strides = feature_major ? std::array<int64_t, kMaxRank>{1, rows + pad}
                              : std::array<int64_t, kMaxRank>{cols + pad, 1};
    return t;
  }
  // Fills everything (pads too) with random values; returns the (rows, cols) values.
  std::vector<double> Fill(Rng& rng) {
    const std::vector<double> all = storage.Fill(rng.NormalVec(storage.numel()));
    std::vector<double> v(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) v[i * cols + j] = all[Index(i, j)];
    }
    return v;
  }
  std::vector<double> Values() const {
    const std::vector<double> all = storage.ToDouble();
    std::vector<double> v(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) v[i * cols + j] = all[Index(i, j)];
    }
    return v;
  }
};

// Runs one case against the oracle; returns the output bits for determinism checks.
std::vector<uint8_t> RunCase(const LinearCase& c, uint64_t seed) {
  SCOPED_TRACE(SeedTrace(seed));
  SCOPED_TRACE(Describe(c));
  Rng rng(seed);
  StoredMatrix x(c.T, c.K, c.pad, c.x_feature_major);
  const std::vector<double> xv = x.Fill(rng);
  HostTensor w({c.M, c.K}, c.wdtype);
  const std::vector<double> wv = w.Fill(rng.NormalVec(c.M * c.K, 0.1));
  HostTensor bias({c.M}, DType::kF32);
  std::vector<double> bv;
  if (c.bias) bv = bias.Fill(rng.NormalVec(c.M));
  StoredMatrix out(c.T, c.M, c.pad, c.out_feature_major);
  out.Fill(rng);
  // Poison the (T, M) elements; the pads keep random values that must survive untouched.
  const std::vector<uint8_t> before = out.storage.bytes();
  for (int64_t i = 0; i < c.T; ++i) {
    for (int64_t j = 0; j < c.M; ++j) {
      StoreFromF32(out.storage.data(), DType::kF32, out.Index(i, j), std::nanf(""));
    }
  }
  LinearInputs in{x.view(), w.view(), c.bias ? bias.view() : Tensor{}};
  const Status s = LinearForward(in, out.view());
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<double> want(static_cast<size_t>(c.T * c.M));
  ref::Linear(c.T, c.K, c.M, xv.data(), wv.data(), c.bias ? bv.data() : nullptr, want.data());
  // A short dot product can cancel to a tiny result, so the f32 rounding allowed is scaled by
  // the sum's condition number ||(|x| |w|^T + |b|)|| / ||ref||.
  std::vector<double> want_abs(want.size());
  {
    std::vector<double> xa(xv.size()), wa(wv.size()), ba(bv.size());
    for (size_t i = 0; i < xv.size(); ++i) xa[i] = std::fabs(xv[i]);
    for (size_t i = 0; i < wv.size(); ++i) wa[i] = std::fabs(wv[i]);
    for (size_t i = 0; i < bv.size(); ++i) ba[i] = std::fabs(bv[i]);
    ref::Linear(c.T, c.K, c.M, xa.data(), wa.data(), c.bias ? ba.data() : nullptr, want_abs.data());
  }
  const double condition = std::max(1.0, Norm(want_abs) / Norm(want));
  const double err = RelativeError(out.Values(), want);
  EXPECT_LE(err, 1e-5 * condition) << "relative error " << err << ", condition " << condition;
  // Pads untouched.
  const std::vector<uint8_t>& after = out.storage.bytes();
  for (int64_t e = 0; e < out.storage.numel(); ++e) {
    const int64_t i = out.feature_major ? e % (c.T + c.pad) : e / (c.M + c.pad);
    const int64_t j = out.feature_major ? e / (c.T + c.pad) : e % (c.M + c.pad);
    const bool pad = out.feature_major ? i >= c.T : j >= c.M;
    if (pad) {
      EXPECT_EQ(std::memcmp(&after[e * 4], &before[e * 4], 4), 0)
          << "pad element " << e << " written";
    }
  }
  return after;
}

TEST(LinearForward, MatchesOracleAcrossShapesAndDtypes) {
  const uint64_t seed = FreshSeed();
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t T : {1, 2, 3, 4, 5, 7, 8, 9, 20}) {
      for (int64_t K : {1, 7, 16, 48, 77}) {
        for (int64_t M : {1, 5, 17}) {
          RunCase({T, K, M, wd, (T + K + M) % 2 == 0}, seed + T * 1000 + K * 10 + M);
        }
      }
    }
  }
}

TEST(LinearForward, Layouts) {
  const uint64_t seed = FreshSeed();
  for (DType wd : {DType::kF32, DType::kBF16}) {
    for (int64_t T : {1, 3, 8, 33}) {
      for (bool xfm : {false, true}) {
        for (bool ofm : {false, true}) {
          for (int64_t pad : {0, 3}) {
            RunCase({T, 40, 24, wd, true, xfm, ofm, pad}, seed + T);
          }
        }
      }
    }
  }
}

// Large enough (M * K >= 2^15) to split over threads, and panels for bf16 weights.
TEST(LinearForward, ThreadedShapes) {
  const uint64_t seed = FreshSeed();
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t T : {1, 2, 8, 40}) {
      RunCase({T, 768, 301, wd, T % 2 == 1}, seed);
      RunCase({T, 48, 1536, wd, true}, seed + 1);
    }
  }
  RunCase({3, 1500, 400, DType::kBF16, false, true, true}, seed + 2);
  // One row, K = 11 unrolled blocks of 8 vectors + 5 vectors + a tail (AVX-512).
  RunCase({1, 1500, 400, DType::kBF16, true}, seed + 3);
  RunCase({1, 1500, 400, DType::kF32, true}, seed + 4);
}

TEST(LinearForward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  const int targets = ForEachSimdTarget([&] {
    for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t T : {1, 2, 4, 6, 8}) RunCase({T, 67, 21, wd, true, false, false, 2}, seed + T);
    }
  });
  EXPECT_GE(targets, 2);
}

TEST(LinearForward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  for (int64_t T : {1, 8, 24}) {
    const LinearCase c{T, 512, 333, DType::kBF16, true};
    EXPECT_EQ(RunCase(c, seed), RunCase(c, seed)) << "T=" << T;
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
  HostTensor x({64, 96}, DType::kF32), w({80, 96}, DType::kF32), want({64, 80}, DType::kF32);
  x.Fill(rng.NormalVec(x.numel()));
  w.Fill(rng.NormalVec(w.numel()));
  ASSERT_TRUE(LinearForward({x.view(), w.view(), Tensor{}}, want.view()).ok());
  std::atomic<int> differing{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back([&] {
      HostTensor out({64, 80}, DType::kF32);
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

// LinearBackward: the fp64 oracle's gradients against central finite differences of the
// oracle's forward, and the fast backward against the oracle on fresh random inputs (outputs
// poisoned with NaN first): every layout of x, dout and dx, bias on and off, gradients
// requested one at a time, shapes small and large enough to split over threads, determinism.
// Dimension legend: T rows, K input features, M output features.
#include <cmath>
#include <cstring>
#include <vector>

#include "ref/linear_ref.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct GradCase {
  int64_t T, K, M;
  bool bias = true;
  bool x_feature_major = false;
  bool dout_feature_major = false;
  bool dx_feature_major = false;
};

std::string Describe(const GradCase& c) {
  return "T=" + std::to_string(c.T) + " K=" + std::to_string(c.K) + " M=" + std::to_string(c.M) +
         (c.bias ? " bias" : "") + (c.x_feature_major ? " x^T" : "") +
         (c.dout_feature_major ? " dout^T" : "") + (c.dx_feature_major ? " dx^T" : "");
}

// A (rows, cols) f32 matrix stored densely, row-major or as the transpose of a (cols, rows)
// buffer (feature-major).
struct Stored {
  int64_t rows, cols;
  bool feature_major;
  HostTensor storage;
  Stored(int64_t r, int64_t c, bool fm)
      : rows(r),
        cols(c),
        feature_major(fm),
        storage(fm ? std::vector<int64_t>{c, r} : std::vector<int64_t>{r, c}, DType::kF32) {}
  int64_t Index(int64_t i, int64_t j) const { return feature_major ? j * rows + i : i * cols + j; }
  Tensor view() {
    Tensor t = storage.view();
    t.shape = {rows, cols};
    t.strides = feature_major ? std::array<int64_t, kMaxRank>{1, rows}
                              : std::array<int64_t, kMaxRank>{cols, 1};
    return t;
  }
  // Random values (row-major order returned).
  std::vector<double> Fill(Rng& rng) {
    const std::vector<double> values = rng.NormalVec(rows * cols);
    std::vector<double> stored(values.size());
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) stored[Index(i, j)] = values[i * cols + j];
    }
    const std::vector<double> rounded = storage.Fill(stored);
    std::vector<double> out(values.size());
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = rounded[Index(i, j)];
    }
    return out;
  }
  std::vector<double> Values() const {
    const std::vector<double> all = storage.ToDouble();
    std::vector<double> out(all.size());
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = all[Index(i, j)];
    }
    return out;
  }
};

// The fast gradients of one case, compared with the oracle's; returns their bytes.
std::vector<uint8_t> RunCase(const GradCase& c, uint64_t seed, bool want_dx = true,
                             bool want_dw = true, bool want_db = true) {
  SCOPED_TRACE(SeedTrace(seed));
  SCOPED_TRACE(Describe(c));
  Rng rng(seed);
  Stored x(c.T, c.K, c.x_feature_major);
  const std::vector<double> xv = x.Fill(rng);
  HostTensor w({c.M, c.K}, DType::kF32);
  const std::vector<double> wv = w.Fill(rng.NormalVec(c.M * c.K, 0.1));
  HostTensor bias({c.M}, DType::kF32);
  bias.Fill(rng.NormalVec(c.M));
  Stored dout(c.T, c.M, c.dout_feature_major);
  const std::vector<double> dv = dout.Fill(rng);
  Stored dx(c.T, c.K, c.dx_feature_major);
  HostTensor dw({c.M, c.K}, DType::kF32), db({c.M}, DType::kF32);
  dx.storage.Poison();
  dw.Poison();
  db.Poison();
  const bool db_ok = want_db && c.bias;
  LinearGrads grads{want_dx ? dx.view() : Tensor{}, want_dw ? dw.view() : Tensor{},
                    db_ok ? db.view() : Tensor{}};
  const Status s =
      LinearBackward({x.view(), w.view(), c.bias ? bias.view() : Tensor{}}, dout.view(), grads);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<double> rdx(c.T * c.K), rdw(c.M * c.K), rdb(c.M);
  ref::LinearBackward(c.T, c.K, c.M, xv.data(), wv.data(), dv.data(), rdx.data(), rdw.data(),
                      rdb.data());
  // f32 sums of M (dx) or T (dW, dbias) products of unit-scale values.
  if (want_dx) EXPECT_LE(RelativeError(dx.Values(), rdx), 1e-5) << "dx";
  if (want_dw) EXPECT_LE(RelativeError(dw.ToDouble(), rdw), 1e-5) << "dweight";
  if (db_ok) EXPECT_LE(RelativeError(db.ToDouble(), rdb), 1e-5) << "dbias";
  // What was not asked for stays poisoned.
  if (!want_dx) EXPECT_TRUE(std::isnan(dx.storage.ToDouble()[0]));
  if (!want_dw) EXPECT_TRUE(std::isnan(dw.ToDouble()[0]));
  if (!db_ok) EXPECT_TRUE(std::isnan(db.ToDouble()[0]));
  std::vector<uint8_t> bits = dx.storage.bytes();
  bits.insert(bits.end(), dw.bytes().begin(), dw.bytes().end());
  bits.insert(bits.end(), db.bytes().begin(), db.bytes().end());
  return bits;
}

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

TEST(LinearGrad, MatchesOracleAcrossShapes) {
  const uint64_t seed = FreshSeed();
  for (int64_t T : {1, 2, 9, 33}) {
    for (int64_t K : {1, 7, 48}) {
      for (int64_t M : {1, 5, 17}) RunCase({T, K, M, (T + K) % 2 == 0}, seed + T * 100 + K + M);
    }
  }
}

TEST(LinearGrad, Layouts) {
  const uint64_t seed = FreshSeed();
  for (int64_t T : {1, 3, 40}) {
    for (int layout = 0; layout < 8; ++layout) {
      RunCase({T, 24, 13, true, (layout & 1) != 0, (layout & 2) != 0, (layout & 4) != 0},
              seed + T * 10 + layout);
    }
  }
}

TEST(LinearGrad, EachGradientOnItsOwn) {
  const uint64_t seed = FreshSeed();
  const GradCase c{12, 10, 6};
  RunCase(c, seed, true, false, false);
  RunCase(c, seed, false, true, false);
  RunCase(c, seed, false, false, true);
  RunCase(c, seed, false, false, false);
}

// The `policy` network's projections (d_model 256, D 512), large enough to split over threads.
TEST(LinearGrad, ThreadedShapes) {
  const uint64_t seed = FreshSeed();
  for (int threads : {1, 3}) {
    ScopedThreads scoped(threads);
    RunCase({60, 256, 1024, false}, seed);                  // in_proj, one window of 60 frames
    RunCase({60, 512, 256, false, false, true}, seed + 1);  // out_proj, y stored (D, L)
    RunCase({300, 40, 33, true, true, false, true}, seed + 2);
  }
}

TEST(LinearGrad, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  const GradCase c{200, 96, 130, true};
  EXPECT_EQ(RunCase(c, seed), RunCase(c, seed));
}

}  // namespace
}  // namespace ssmkit::testing

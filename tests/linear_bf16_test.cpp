// LinearForward with the opt-in bf16 products (SetBf16Products): a bf16 weight's many-row
// product rounds x to bf16 and sums bf16 x bf16 products in f32 (src/cpu/linear_bf16.cpp). The
// oracle is the fp64 product of x rounded to bf16 (as the kernel rounds it, to nearest even) and
// the stored weight; the bound is that of any order of f32 sums of exact products, so an x left
// in f32, a product rounded, a pair of K dropped or a column written twice fails it. Skipped on
// a CPU without AVX-512 BF16, where the setting has no effect (checked too).
#include <cmath>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "cpu/amx.hpp"
#include "guarded_bytes.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// Turns the products on for a scope (and off after it); on() false: this CPU has no AVX-512 BF16.
class ScopedBf16Products {
 public:
  ScopedBf16Products() : on_(SetBf16Products(true)) {}
  ~ScopedBf16Products() { SetBf16Products(false); }
  bool on() const { return on_; }

 private:
  bool on_;
};

struct Problem {
  int64_t T, K, M;
  bool bias;
  bool out_by_feature = false;  // out stored (M, T), strides (1, ld)
  bool x_by_feature = false;    // x stored (K, T), strides (1, ld)
};

std::string Name(const Problem& p) {
  return "T=" + std::to_string(p.T) + " K=" + std::to_string(p.K) + " M=" + std::to_string(p.M) +
         (p.bias ? " with bias" : "") + (p.out_by_feature ? ", out feature-major" : "") +
         (p.x_by_feature ? ", x feature-major" : "");
}

// Random x (T, K), W (M, K) bf16 at the scale of a trained layer, and bias (M), with the
// values stored.
struct Operands {
  Operands(const Problem& p, Rng& rng)
      : x({p.T, p.K}, DType::kF32), w({p.M, p.K}, DType::kBF16), bias({p.M}, DType::kF32) {
    xs = x.Fill(rng.NormalVec(p.T * p.K));
    ws = w.Fill(rng.NormalVec(p.M * p.K, 1.0 / std::sqrt(static_cast<double>(p.K))));
    bs = bias.Fill(rng.NormalVec(p.M));
  }
  HostTensor x, w, bias;
  std::vector<double> xs, ws, bs;
};

// x's first T rows, a tensor of their own.
HostTensor FirstRows(HostTensor& x, int64_t T, int64_t K) {
  HostTensor rows({T, K}, DType::kF32);
  std::memcpy(rows.data(), x.data(), static_cast<size_t>(T * K) * sizeof(float));
  return rows;
}

// out (T, M) for x, w (bf16) and bias: written into rows (T of M + kGap, or M of T + kGap when
// out is feature-major) poisoned with NaN, whose last kGap columns hold a sentinel that must
// survive (nothing written outside the output).
constexpr int64_t kGap = 5;
constexpr float kSentinel = 12345.0f;
// x (T, K) row-major, given to the op as is or (p.x_by_feature) as a feature-major copy whose
// rows of T are kGap apart.
std::vector<double> Forward(const Problem& p, HostTensor& x, const Tensor& w, HostTensor& bias) {
  std::vector<float> by_feature;  // (K, T + kGap)
  Tensor xv = x.view();
  if (p.x_by_feature) {
    const int64_t ldx = p.T + kGap;
    by_feature.assign(static_cast<size_t>(p.K * ldx), std::nanf(""));
    const float* rows = static_cast<const float*>(x.data());
    for (int64_t t = 0; t < p.T; ++t) {
      for (int64_t k = 0; k < p.K; ++k) by_feature[k * ldx + t] = rows[t * p.K + k];
    }
    xv = Tensor::Contiguous(by_feature.data(), DType::kF32, {p.T, p.K});
    xv.strides[0] = 1;
    xv.strides[1] = ldx;
  }
  const int64_t rows = p.out_by_feature ? p.M : p.T, cols = p.out_by_feature ? p.T : p.M;
  const int64_t ld = cols + kGap;
  std::vector<float> buffer(static_cast<size_t>(rows * ld), std::nanf(""));
  for (int64_t r = 0; r < rows; ++r) std::fill_n(buffer.begin() + r * ld + cols, kGap, kSentinel);
  Tensor out = Tensor::Contiguous(buffer.data(), DType::kF32, {p.T, p.M});
  out.strides[0] = p.out_by_feature ? 1 : ld;
  out.strides[1] = p.out_by_feature ? ld : 1;
  const Status s = LinearForward({xv, w, p.bias ? bias.view() : Tensor{}}, out);
  EXPECT_TRUE(s.ok()) << s.message();
  int64_t overwritten = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = cols; c < ld; ++c) overwritten += buffer[r * ld + c] != kSentinel;
  }
  EXPECT_EQ(overwritten, 0) << "elements written outside the output";
  std::vector<double> values;  // (T, M)
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t m = 0; m < p.M; ++m)
      values.push_back(buffer[t * out.strides[0] + m * out.strides[1]]);
  }
  return values;
}

// Elements of out further from the oracle (x rounded to bf16) than the f32 sums allow:
// |error| <= K 2^-24 sum_k |x_k w_k| + 2^-24 |bias|, the bound for any order of the sums.
int64_t OutsideTheBound(const Problem& p, const std::vector<double>& xs,
                        const std::vector<double>& ws, const std::vector<double>& bs,
                        const std::vector<double>& out, std::string* first) {
  int64_t bad = 0;
  const double u = std::ldexp(1.0, -24);
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t m = 0; m < p.M; ++m) {
      double want = p.bias ? bs[m] : 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double xk = Bf16ToF32(F32ToBf16(static_cast<float>(xs[t * p.K + k])));
        want += xk * ws[m * p.K + k];
        magnitude += std::fabs(xk * ws[m * p.K + k]);
      }
      const double got = out[t * p.M + m];
      const double bound = p.K * u * magnitude + u * (p.bias ? std::fabs(bs[m]) : 0.0);
      if (!(std::fabs(got - want) <= bound)) {  // NaN fails
        if (bad++ == 0) {
          *first = "out[" + std::to_string(t) + ", " + std::to_string(m) +
                   "] = " + std::to_string(got) + ", oracle " + std::to_string(want) + ", bound " +
                   std::to_string(bound);
        }
      }
    }
  }
  return bad;
}

// Every row tile of both kernels (few rows: 8 rows by 3 weight rows, K's masked tail; more than
// kLinearGemvMaxRows: 6 rows by a panel of 64, K blocks of 2048; with x or out feature-major 6
// weight rows by a panel of 64 rows of x, packed from x's columns, stored along out's rows or
// scattered), every tail, thread split and bias.
TEST(LinearBf16Products, MatchTheOracleOfXRoundedToBf16) {
  ScopedBf16Products products;
  if (!products.on()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScopedThreads threads(2);
  for (const Problem& p :
       {Problem{2, 2, 1, false}, Problem{3, 30, 5, true}, Problem{8, 96, 24, false},
        Problem{9, 770, 50, true}, Problem{17, 64, 26, false},
        Problem{kLinearGemvMaxRows, 100, 7, true}, Problem{65, 2, 1, false},
        Problem{66, 30, 17, true}, Problem{67, 768, 64, false}, Problem{70, 96, 130, true},
        Problem{71, 2100, 70, true}, Problem{200, 256, 200, false}, Problem{65, 30, 17, true, true},
        Problem{131, 2100, 70, false, true}, Problem{131, 2112, 70, false},
        Problem{200, 96, 130, true, true}, Problem{65, 30, 17, true, false, true},
        Problem{131, 2100, 70, false, false, true}, Problem{200, 96, 130, true, true, true}}) {
    SCOPED_TRACE(Name(p));
    Operands o(p, rng);
    // On a CPU with AMX's bf16 tiles (which then take every case) also with them off.
    for (bool amx : {true, false}) {
      SCOPED_TRACE(amx ? "AMX as available" : "AMX off");
      cpu::SetAmx(amx);
      std::string first;
      EXPECT_EQ(OutsideTheBound(p, o.xs, o.ws, o.bs, Forward(p, o.x, o.w.view(), o.bias), &first),
                0)
          << first;
    }
    cpu::SetAmx(true);
  }
}

// With AMX's bf16 tiles, 2 or more rows take the tile kernel in any layout and for any K, 64
// rows of x at a time (linear_bf16_amx_rows.cpp; T = 65 ends with a chunk of one row): an odd K
// (the last pair's second element zero), K below one step of 32, K's tail step, M short of a tile
// of 16 (W copied above zero rows) and not a multiple of it (the last tile's rows shifted back), x
// and out feature-major (out's whole tiles stored straight from the tiles, the last partial one
// through a buffer) or row-major (gathered), with and without bias, on 1 and 2 threads; a row's
// bits the same in every layout; nothing read past W.
TEST(LinearBf16Products, AmxTilesInEitherLayout) {
  ScopedBf16Products products;
  if (!products.on() || !cpu::AmxBf16()) GTEST_SKIP() << "this CPU has no AMX bf16 tiles";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (const Problem& shape :
       {Problem{60, 287, 40, true}, Problem{2, 16, 5, false}, Problem{17, 31, 3, true},
        Problem{64, 512, 48, false}, Problem{33, 100, 70, true}, Problem{48, 64, 16, false},
        Problem{60, 1030, 37, true}, Problem{65, 64, 33, false}, Problem{130, 287, 40, true}}) {
    Operands o(shape, rng);
    // W's last row against an inaccessible page: a tile that read past it would fault.
    GuardedBytes guarded(o.w.data(), static_cast<size_t>(shape.M * shape.K) * sizeof(uint16_t));
    ASSERT_NE(guarded.data(), nullptr);
    const Tensor w = Tensor::Contiguous(guarded.data(), DType::kBF16, {shape.M, shape.K});
    std::vector<double> first;  // row-major x and out, 1 thread
    for (int layout = 0; layout < 4; ++layout) {
      Problem p = shape;
      p.x_by_feature = (layout & 1) != 0;
      p.out_by_feature = (layout & 2) != 0;
      SCOPED_TRACE(Name(p));
      for (int threads : {1, 2}) {
        ScopedThreads scoped(threads);
        const std::vector<double> out = Forward(p, o.x, w, o.bias);
        std::string where;
        EXPECT_EQ(OutsideTheBound(p, o.xs, o.ws, o.bs, out, &where), 0) << where;
        if (first.empty()) first = out;
        EXPECT_EQ(out, first) << threads << " threads";
      }
    }
  }
}

// The bound above separates the two paths: with the products off (the default) x stays f32, and
// the oracle of x rounded to bf16 is off by x's rounding, far outside it.
TEST(LinearBf16Products, OffByDefaultAndXStaysF32) {
  ASSERT_FALSE(Bf16Products()) << "on without SetBf16Products or SSMKIT_BF16_PRODUCTS=1";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const Problem p{80, 64, 96, false};
  Operands o(p, rng);
  std::string first;
  EXPECT_GT(OutsideTheBound(p, o.xs, o.ws, o.bs, Forward(p, o.x, o.w.view(), o.bias), &first),
            p.T * p.M * 9 / 10);
}

// Each output is summed in one fixed order: the same bits on 1 and 2 threads, and a row's bits
// whatever the rows around it (T and the row tiles), among few rows and among many.
TEST(LinearBf16Products, BitsDoNotDependOnThreadsOrRows) {
  ScopedBf16Products products;
  if (!products.on()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  // K = 2112: two blocks of K in the many-row AVX-512 kernel. With AMX's tiles (where the CPU
  // has them) every case takes them; then also with them off.
  for (const auto& [K, amx] : {std::pair{int64_t{770}, true}, std::pair{int64_t{2112}, true},
                               std::pair{int64_t{770}, false}, std::pair{int64_t{2112}, false}}) {
    SCOPED_TRACE("K=" + std::to_string(K) + (amx ? ", AMX as available" : ", AMX off"));
    cpu::SetAmx(amx);
    const Problem p{131, K, 150, true};
    Operands o(p, rng);
    std::vector<double> one, two;
    {
      ScopedThreads threads(1);
      one = Forward(p, o.x, o.w.view(), o.bias);
    }
    {
      ScopedThreads threads(2);
      two = Forward(p, o.x, o.w.view(), o.bias);
    }
    EXPECT_EQ(one, two);
    const Problem fewer{kLinearGemvMaxRows + 7, p.K, p.M, true};  // x's first rows
    HostTensor first_rows = FirstRows(o.x, fewer.T, p.K);
    const std::vector<double> part = Forward(fewer, first_rows, o.w.view(), o.bias);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), one.begin()));
    std::vector<double> first;  // row 0 at T = 2
    for (int64_t T = 2; T <= kLinearGemvMaxRows; ++T) {
      HostTensor rows = FirstRows(o.x, T, p.K);
      const std::vector<double> out = Forward({T, p.K, p.M, true}, rows, o.w.view(), o.bias);
      if (first.empty()) first.assign(out.begin(), out.begin() + p.M);
      EXPECT_TRUE(std::equal(first.begin(), first.end(), out.begin())) << "row 0 at T=" << T;
    }
    // AMX's tiles take few rows and many alike: row 0's bits the same at T = 2 and 131.
    if (cpu::AmxBf16()) EXPECT_TRUE(std::equal(first.begin(), first.end(), one.begin()));
  }
  cpu::SetAmx(true);
}

// A quantized weight's many-row product (prefill) with the products on: each panel of W decoded
// and rounded to bf16, then the same kernel; the oracle multiplies the decoded values rounded to
// bf16. Its few rows keep the 8-bit kernels: the bits of the products off.
TEST(LinearBf16Products, QuantizedWeightsDecodedToBf16) {
  ScopedBf16Products products;
  if (!products.on()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t K = 512, M = 70, row_bytes = DTypeRowBytes(dtype, K);
    std::vector<uint8_t> bytes(static_cast<size_t>(M * row_bytes));
    std::vector<double> ws;  // decoded, rounded to bf16
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t m = 0; m < M; ++m) {
      for (float& v : row) v = static_cast<float>(rng.Normal(0.0, 1.0 / std::sqrt(K)));
      quant::QuantizeRow(dtype, row.data(), K, bytes.data() + m * row_bytes);
      quant::DequantizeRow(dtype, bytes.data() + m * row_bytes, K, row.data());
      for (float v : row) ws.push_back(Bf16ToF32(F32ToBf16(v)));
    }
    Tensor wv = Tensor::Contiguous(bytes.data(), dtype, {M, K});
    for (const Problem& p :
         {Problem{kLinearGemvMaxRows + 6, K, M, true}, Problem{100, K, M, false, true},
          Problem{100, K, M, true, false, true}, Problem{8, K, M, true}}) {
      SCOPED_TRACE(Name(p));
      Operands o(p, rng);
      const std::vector<double> got = Forward(p, o.x, wv, o.bias);
      if (p.T > kLinearGemvMaxRows) {
        std::string first;
        EXPECT_EQ(OutsideTheBound(p, o.xs, ws, o.bs, got, &first), 0) << first;
        continue;
      }
      SetBf16Products(false);
      const std::vector<double> off = Forward(p, o.x, wv, o.bias);
      SetBf16Products(true);
      EXPECT_EQ(got, off);
    }
  }
}

// One row of x (bound by W's bytes) keeps x in f32, and so does an odd K without AMX's tiles
// (which take any K): the bits of the products off.
TEST(LinearBf16Products, AnOddKAndOneRowKeepXInF32) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const Problem odd{70, 333, 40, false}, one_row{1, 64, 40, true};
  Operands a(odd, rng), b(one_row, rng);
  const std::vector<double> off_a = Forward(odd, a.x, a.w.view(), a.bias);
  const std::vector<double> off_b = Forward(one_row, b.x, b.w.view(), b.bias);
  ScopedBf16Products products;
  EXPECT_EQ(Forward(one_row, b.x, b.w.view(), b.bias), off_b);
  cpu::SetAmx(false);
  EXPECT_EQ(Forward(odd, a.x, a.w.view(), a.bias), off_a);
  cpu::SetAmx(true);
}

}  // namespace
}  // namespace ssmkit::testing

// LinearForward with a quantized weight (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) against
// the fp64 oracle (ref::QuantLinear: the weight decoded exactly, times the exact x), on every
// compiled SIMD target (on a VNNI CPU the AVX-512 kernels with and without VNNI): the few-rows
// kernel (T <= 64, either layout, which quantizes x to 8 bits per element) and the sgemm path over
// decoded panels (T > 64); thread counts and determinism.
//
// Tolerance. The kernel replaces x by s q (s = max |x| / 127 per block of B, |x - s q| <= s / 2),
// so |out - ref| <= sum_k |w_k| s(k) / 2, plus f32 rounding (1e-5 of sum_k |x_k| |w_k|). It is
// also checked tightly (f32 rounding only) against the oracle run on that quantized x, computed
// here the way the kernel does, so that an error in a few weights cannot hide inside the looser
// bound.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/quant.hpp"
#include "cpu/amx.hpp"
#include "cpu/quant_linear.hpp"
#include "ref/linear_ref.hpp"
#include "ref/quant_linear_ref.hpp"
#include "ssmkit/linear.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr DType kQuantized[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                DType::kQ6_K, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1};

// A weight (M, K) in `dtype` and its decoded values: N(0, 0.1) values quantized, or given bytes.
struct Weight {
  DType dtype;
  int64_t M, K;
  std::vector<uint8_t> bytes;      // (M, DTypeRowBytes(dtype, K))
  std::vector<double> values;      // (M, K) decoded
  std::vector<double> magnitudes;  // |values|
  Weight(DType d, int64_t m, int64_t k, Rng& rng) : Weight(d, m, k, Encoded(d, m, k, rng)) {}
  Weight(DType d, int64_t m, int64_t k, std::vector<uint8_t> encoded)
      : dtype(d), M(m), K(k), bytes(std::move(encoded)) {
    const int64_t row_bytes = DTypeRowBytes(d, k);
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < M; ++r) {
      quant::DequantizeRow(d, bytes.data() + r * row_bytes, K, row.data());
      for (float v : row) {
        values.push_back(v);
        magnitudes.push_back(std::fabs(v));
      }
    }
  }
  static std::vector<uint8_t> Encoded(DType d, int64_t m, int64_t k, Rng& rng) {
    const int64_t row_bytes = DTypeRowBytes(d, k);
    std::vector<uint8_t> encoded(static_cast<size_t>(m * row_bytes));
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < m; ++r) {
      for (float& v : row) v = static_cast<float>(rng.Normal(0.0, 0.1));
      quant::QuantizeRow(d, row.data(), k, encoded.data() + r * row_bytes);
    }
    return encoded;
  }
  Tensor view() { return Tensor::Contiguous(bytes.data(), dtype, {M, K}); }
};

// What the kernel multiplies instead of x (T, K): per block of B, s = max |x| / 127 in f32 and
// x ~ s * nearbyint(x * (1 / s)). Returns s q; half_step gets s / 2 per element.
std::vector<double> QuantizedX(const std::vector<float>& x, int64_t T, int64_t K, int64_t B,
                               std::vector<double>* half_step) {
  std::vector<double> xq(x.size());
  half_step->resize(x.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < K; b += B) {
      float amax = 0.0f;
      for (int64_t i = b; i < b + B; ++i) amax = std::max(amax, std::fabs(x[t * K + i]));
      const float s = amax / 127.0f;
      const float inverse = s > 0.0f ? 1.0f / s : 0.0f;
      for (int64_t i = b; i < b + B; ++i) {
        xq[t * K + i] = static_cast<double>(s) * std::nearbyint(x[t * K + i] * inverse);
        (*half_step)[t * K + i] = 0.5 * s;
      }
    }
  }
  return xq;
}

struct Expected {
  std::vector<double> exact;       // the oracle on x
  std::vector<double> quantized;   // the oracle on the kernel's quantized x
  std::vector<double> activation;  // sum_k |w| s / 2: the bound of quantizing x
  std::vector<double> magnitude;   // sum_k |x| |w| + |bias|
};

// Rows of x: N(0, 1) scaled per row by 10^u, u in [-1, 1], so that the blocks' scales differ.
std::vector<float> RandomX(int64_t T, int64_t K, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) {
    const double scale = std::pow(10.0, rng.Uniform(-1.0, 1.0));
    for (int64_t k = 0; k < K; ++k) x[t * K + k] = static_cast<float>(scale * rng.Normal());
  }
  return x;
}

Expected Oracle(Weight& w, const std::vector<float>& x, int64_t T,
                const std::vector<double>& bias) {
  const int64_t K = w.K, M = w.M;
  const std::vector<double> xd(x.begin(), x.end());
  std::vector<double> half_step;
  const std::vector<double> xq = QuantizedX(x, T, K, DTypeBlockElements(w.dtype), &half_step);
  std::vector<double> xa(xd.size()), ba(bias.size());
  for (size_t i = 0; i < xd.size(); ++i) xa[i] = std::fabs(xd[i]);
  for (size_t i = 0; i < bias.size(); ++i) ba[i] = std::fabs(bias[i]);
  const double* b = bias.empty() ? nullptr : bias.data();
  Expected e;
  for (auto* v : {&e.exact, &e.quantized, &e.activation, &e.magnitude}) {
    v->resize(static_cast<size_t>(T * M));
  }
  ref::QuantLinear(T, K, M, xd.data(), w.dtype, w.bytes.data(), b, e.exact.data());
  ref::QuantLinear(T, K, M, xq.data(), w.dtype, w.bytes.data(), b, e.quantized.data());
  ref::Linear(T, K, M, half_step.data(), w.magnitudes.data(), nullptr, e.activation.data());
  ref::Linear(T, K, M, xa.data(), w.magnitudes.data(), b == nullptr ? nullptr : ba.data(),
              e.magnitude.data());
  return e;
}

// Runs LinearForward (x, out row-major unless feature_major) on poisoned outputs and checks it
// against e; returns the outputs (T, M).
std::vector<float> RunAndCheck(Weight& w, const std::vector<float>& x, int64_t T,
                               const std::vector<double>& bias, const Expected& e,
                               bool feature_major = false) {
  const int64_t K = w.K, M = w.M;
  std::vector<float> xs(x), bias_f(bias.begin(), bias.end());
  if (feature_major) {  // x stored (K, T), out (M, T)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t k = 0; k < K; ++k) xs[k * T + t] = x[t * K + k];
    }
  }
  std::vector<float> out(static_cast<size_t>(T * M), std::nanf(""));
  Tensor xv = Tensor::Contiguous(xs.data(), DType::kF32, {T, K});
  Tensor ov = Tensor::Contiguous(out.data(), DType::kF32, {T, M});
  if (feature_major) {
    xv.strides = {1, T};
    ov.strides = {1, T};
  }
  const Tensor bv = bias.empty() ? Tensor{} : Tensor::Contiguous(bias_f.data(), DType::kF32, {M});
  const Status s = LinearForward({xv, w.view(), bv}, ov);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<float> rows(static_cast<size_t>(T * M));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t m = 0; m < M; ++m) rows[t * M + m] = out[feature_major ? m * T + t : t * M + m];
  }
  const bool quantizes_x = T <= kLinearGemvMaxRows;
  int64_t failures = 0;
  for (int64_t i = 0; i < T * M; ++i) {
    const double got = rows[i];
    const double rounding = 1e-5 * e.magnitude[i];
    const double loose = e.activation[i] * (1.0 + 1e-3) + rounding;
    const double err = std::fabs(got - e.exact[i]);
    // The sgemm path does not quantize x: only rounding.
    const double bound = quantizes_x ? loose : rounding;
    const double tight_err = std::fabs(got - e.quantized[i]);
    const bool bad =
        !std::isfinite(got) || !(err <= bound) || (quantizes_x && !(tight_err <= rounding));
    if (bad && failures++ < 5) {
      ADD_FAILURE() << "out[" << i / M << ", " << i % M << "] = " << got << ", oracle "
                    << e.exact[i] << " (error " << err << ", bound " << bound
                    << "), oracle on quantized x " << e.quantized[i] << " (error " << tight_err
                    << ", bound " << rounding << ")";
    }
  }
  EXPECT_EQ(failures, 0);
  return rows;
}

std::vector<double> RandomBias(int64_t M, bool with, Rng& rng) {
  return with ? rng.NormalVec(M) : std::vector<double>{};
}

// ForEachSimdTarget, on a CPU with AMX once more with its tile multiplies off
// (cpu::SetAmx), and on a CPU with VNNI once more with the AVX-512 kernels' VNNI
// instructions off (cpu::SetQuantDotVnni), so that every byte kernel runs there. Returns how
// many targets ran the first time.
template <class Fn>
int ForEachKernel(Fn&& fn) {
  const int targets = ForEachSimdTarget(fn);
  if (cpu::AmxInt8()) {
    SCOPED_TRACE("AMX off");
    cpu::SetAmx(false);
    ForEachSimdTarget(fn);
    cpu::SetAmx(true);
  }
  if (cpu::QuantDotVnni()) {
    SCOPED_TRACE("VNNI off");
    cpu::SetQuantDotVnni(false);
    ForEachSimdTarget(fn);
    cpu::SetQuantDotVnni(true);
  }
  return targets;
}

// Every format, K from one block up, M odd and even, T through the few-rows kernel's tiles and
// past it into the sgemm path, each on every compiled SIMD target.
TEST(QuantLinear, MatchesOracleOnEverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (DType dtype : kQuantized) {
    std::vector<int64_t> Ks = {256, 512, 768};
    if (DTypeBlockElements(dtype) == 32) Ks.insert(Ks.begin(), {32, 96});
    for (int64_t K : Ks) {
      for (int64_t M : {1, 7, 64, 257}) {
        Weight w(dtype, M, K, rng);
        for (int64_t T : {1, 2, 3, 4, 7, 8, 9, 16, 33, 64, 65, 130}) {
          SCOPED_TRACE(std::string(DTypeName(dtype)) + " T=" + std::to_string(T) +
                       " K=" + std::to_string(K) + " M=" + std::to_string(M));
          const std::vector<float> x = RandomX(T, K, rng);
          const std::vector<double> bias = RandomBias(M, (T + M) % 2 == 1, rng);
          const Expected e = Oracle(w, x, T, bias);
          const int targets = ForEachKernel([&] { RunAndCheck(w, x, T, bias, e); });
          EXPECT_GE(targets, kMinSimdTargets);
        }
      }
    }
  }
}

// Random blocks with every byte but their f16 scales 0xff: each level at its format's largest
// unsigned value (Q4_K's 15, Q5_K's 31, Q6_K's 63 ...), the 6-bit scales and mins 63, so that
// every product of a block is as large as the format allows.
std::vector<uint8_t> HighestLevelBlocks(DType dtype, int64_t blocks, Rng& rng) {
  std::vector<uint8_t> v = RandomBlocks(dtype, blocks, rng);
  const std::vector<uint8_t> scales = v;
  std::fill(v.begin(), v.end(), uint8_t{0xff});
  const int64_t bytes = DTypeBlockBytes(dtype);
  const std::vector<int64_t> f16_offsets = dtype == DType::kQ6_K ? std::vector<int64_t>{208}
                                           : dtype == DType::kQ4_1 || dtype == DType::kQ5_1 ||
                                                   dtype == DType::kQ4_K || dtype == DType::kQ5_K
                                               ? std::vector<int64_t>{0, 2}
                                               : std::vector<int64_t>{0};
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t off : f16_offsets) {
      std::memcpy(&v[b * bytes + off], &scales[b * bytes + off], 2);
    }
  }
  return v;
}

// Weights of random bytes (every level, scale and min a block can store, the extremes
// included: q8_0's -128, q6_k's 63 and its scale -128, the 6-bit scales' 63, q5_0's -16 and
// q5_1's 31 beside any min), and weights whose every level is its format's highest (a kernel
// that sums several vectors of products in int16 before widening reaches its bound only there),
// times rows of x whose levels are all +-127: the products that bring the 8-bit kernels' int16
// sums closest to saturating. x's signs all +, all -, alternating, and those of a weight row (a
// signed format's largest pair sums).
TEST(QuantLinear, ExtremeLevelsOnEverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t M = 5, T = 6;
  for (DType dtype : kQuantized) {
    for (bool highest : {false, true}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (highest ? " highest levels" : " random bytes"));
      const int64_t B = DTypeBlockElements(dtype), K = B == 32 ? 800 : 768;
      Weight w(dtype, M, K,
               highest ? HighestLevelBlocks(dtype, M * K / B, rng)
                       : RandomBlocks(dtype, M * K / B, rng));
      std::vector<float> x(static_cast<size_t>(T * K));
      for (int64_t k = 0; k < K; ++k) {
        const auto sign_of = [&](int64_t m) { return w.values[m * K + k] >= 0.0 ? 1.0f : -1.0f; };
        const float row[T] = {1.0f,       -1.0f,       k % 2 == 0 ? 1.0f : -1.0f,
                              sign_of(0), -sign_of(1), sign_of(2)};
        for (int64_t t = 0; t < T; ++t) x[t * K + k] = row[t];
      }
      const std::vector<double> bias;
      const Expected e = Oracle(w, x, T, bias);
      EXPECT_GE(ForEachKernel([&] { RunAndCheck(w, x, T, bias, e); }), kMinSimdTargets);
    }
  }
}

// x and out feature-major (T >= 2: a single row is both layouts): up to 64 rows copied into
// row-major rows for the few-rows kernel, which quantizes x; beyond, the sgemm path over
// decoded panels.
TEST(QuantLinear, FeatureMajorLayouts) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (DType dtype : kQuantized) {
    SCOPED_TRACE(DTypeName(dtype));
    Weight w(dtype, 33, 512, rng);
    for (int64_t T : {int64_t{2}, int64_t{5}, kLinearGemvMaxRows + 3}) {
      const std::vector<float> x = RandomX(T, 512, rng);
      const std::vector<double> bias = RandomBias(33, true, rng);
      RunAndCheck(w, x, T, bias, Oracle(w, x, T, bias), /*feature_major=*/true);
    }
  }
}

// Large enough to split over threads (M * K >= 2^15): 1 and 2 threads give the same bits on the
// few-rows kernel (each output is one thread's, in one order) and agree within rounding on the
// sgemm path (whose panels follow the split); the same count twice gives the same bits.
TEST(QuantLinear, ThreadCountsAndDeterminism) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (DType dtype : kQuantized) {
    SCOPED_TRACE(DTypeName(dtype));
    Weight w(dtype, 301, 768, rng);
    for (int64_t T : {1, 8, 33, 130}) {
      SCOPED_TRACE("T=" + std::to_string(T));
      const std::vector<float> x = RandomX(T, 768, rng);
      const std::vector<double> bias = RandomBias(301, true, rng);
      const Expected e = Oracle(w, x, T, bias);
      std::vector<float> one, two, again;
      {
        ScopedThreads threads(1);
        one = RunAndCheck(w, x, T, bias, e);
      }
      {
        ScopedThreads threads(2);
        two = RunAndCheck(w, x, T, bias, e);
        again = RunAndCheck(w, x, T, bias, e);
      }
      EXPECT_EQ(two, again) << "2 threads twice";
      if (T <= kLinearGemvMaxRows) EXPECT_EQ(one, two) << "1 thread against 2";
    }
  }
}

// Row 0's outputs for T = 1 to 64 rows of x (the same row 0): the first, and every T's
// compared with it.
std::vector<float> RowZeroAtEveryBatch(Weight& w, const std::vector<float>& x, int64_t K,
                                       const std::vector<float>& bias) {
  const int64_t M = static_cast<int64_t>(bias.size());
  std::vector<float> first;
  for (int64_t T = 1; T <= kLinearGemvMaxRows; ++T) {
    std::vector<float> out(static_cast<size_t>(T * M), std::nanf(""));
    const Status s = LinearForward({Tensor::Contiguous(x.data(), DType::kF32, {T, K}), w.view(),
                                    Tensor::Contiguous(bias.data(), DType::kF32, {M})},
                                   Tensor::Contiguous(out.data(), DType::kF32, {T, M}));
    EXPECT_TRUE(s.ok()) << s.message();
    if (first.empty()) first.assign(out.begin(), out.begin() + M);
    EXPECT_EQ(std::memcmp(out.data(), first.data(), M * sizeof(float)), 0)
        << "row 0 at T=" << T << " differs from T=1";
  }
  return first;
}

// A row's outputs do not depend on the other rows of the batch (T = 1 to 64), on every kernel:
// a server's sequences keep their bits as others join or leave. For the formats of 32, also a
// K of 25 blocks (not a whole number of 8: the by-columns kernels' last group of blocks, and an
// odd last block for Q4_0 / Q5_0's pairs). The signed formats of 32 sum in one order with VNNI
// and without (quant_columns_x86-inl.h): the same bits on both byte kernels.
TEST(QuantLinear, RowsDoNotDependOnTheBatch) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t M = 37;
  for (DType dtype : kQuantized) {
    for (int64_t K : {int64_t{512}, int64_t{800}}) {
      if (K % DTypeBlockElements(dtype) != 0) continue;
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " K=" + std::to_string(K));
      Weight w(dtype, M, K, rng);
      const std::vector<float> x = RandomX(kLinearGemvMaxRows, K, rng);
      const std::vector<float> bias(static_cast<size_t>(M), 0.25f);
      ForEachKernel([&] { RowZeroAtEveryBatch(w, x, K, bias); });
      const bool signed32 = dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ5_0;
      if (signed32 && cpu::QuantDotVnni()) {
        const std::vector<float> with = RowZeroAtEveryBatch(w, x, K, bias);
        cpu::SetQuantDotVnni(false);
        const std::vector<float> without = RowZeroAtEveryBatch(w, x, K, bias);
        cpu::SetQuantDotVnni(true);
        EXPECT_EQ(with, without) << "VNNI on and off";
      }
    }
  }
}

// Every row of a batch (T = 2 to 64: tiles of x and AMX's groups of 8, full and short) has the
// bits it has alone, on every kernel; on a CPU with AMX, the tile multiplies (Q8_0, Q4_K, Q5_K)
// give the bits of the VNNI kernels.
TEST(QuantLinear, EveryRowHasItsBitsFromBatchOne) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t M = 37, K = 768;
  for (DType dtype : kQuantized) {
    SCOPED_TRACE(DTypeName(dtype));
    Weight w(dtype, M, K, rng);
    const std::vector<double> bias_d = rng.UniformVec(M, -1.0, 1.0);
    const std::vector<float> bias(bias_d.begin(), bias_d.end());
    const auto run = [&](const float* x, int64_t T) {
      std::vector<float> out(static_cast<size_t>(T * M), std::nanf(""));
      const Status s = LinearForward({Tensor::Contiguous(x, DType::kF32, {T, K}), w.view(),
                                      Tensor::Contiguous(bias.data(), DType::kF32, {M})},
                                     Tensor::Contiguous(out.data(), DType::kF32, {T, M}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    };
    for (int64_t T :
         {int64_t{2}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{17}, kLinearGemvMaxRows}) {
      SCOPED_TRACE("T=" + std::to_string(T));
      const std::vector<float> x = RandomX(T, K, rng);
      std::vector<float> with_amx;
      ForEachKernel([&] {
        const std::vector<float> batch = run(x.data(), T);
        for (int64_t t = 0; t < T; ++t) {
          const std::vector<float> alone = run(x.data() + t * K, 1);
          EXPECT_EQ(std::memcmp(batch.data() + t * M, alone.data(), M * sizeof(float)), 0)
              << "row " << t << " of " << T;
        }
      });
      if (cpu::AmxInt8()) {
        const std::vector<float> with = run(x.data(), T);
        cpu::SetAmx(false);
        const std::vector<float> without = run(x.data(), T);
        cpu::SetAmx(true);
        EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * sizeof(float)), 0)
            << "AMX on and off";
      }
    }
  }
}

// A NaN or an infinity in one row of x reaches every output of that row (the few-rows kernels
// quantize x per block: a NaN must not be lost in the block's maximum), on every kernel, and
// the other rows keep their bits.
TEST(QuantLinear, NanAndInfinityInXReachTheirRow) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t M = 9, K = 512;
  for (DType dtype : kQuantized) {
    Weight w(dtype, M, K, rng);
    for (int64_t T : {1, 3, 8, 11}) {
      for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
        const int64_t row = T / 2, k = static_cast<int64_t>(rng.Uniform(0.0, K - 1.0));
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " T=" + std::to_string(T) +
                     " row=" + std::to_string(row) + " k=" + std::to_string(k) +
                     " value=" + std::to_string(bad));
        const std::vector<float> clean = RandomX(T, K, rng);
        std::vector<float> x = clean;
        x[row * K + k] = bad;
        const auto run = [&](const std::vector<float>& in) {
          std::vector<float> out(static_cast<size_t>(T * M), 0.5f);
          const Status s = LinearForward(
              {Tensor::Contiguous(in.data(), DType::kF32, {T, K}), w.view(), Tensor{}},
              Tensor::Contiguous(out.data(), DType::kF32, {T, M}));
          EXPECT_TRUE(s.ok()) << s.message();
          return out;
        };
        ForEachKernel([&] {
          const std::vector<float> expected = run(clean), out = run(x);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t m = 0; m < M; ++m) {
              const float v = out[t * M + m];
              if (t == row) {
                EXPECT_FALSE(std::isfinite(v)) << "row " << t << " output " << m << ": " << v;
              } else {
                EXPECT_EQ(std::memcmp(&v, &expected[t * M + m], sizeof v), 0)
                    << "row " << t << " output " << m;
              }
            }
          }
        });
      }
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

// Shared test helpers: seeded random inputs (the seed is printed on failure), poisoned
// outputs, relative error against the fp64 oracle, NaN-aware comparisons.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/simd_targets.hpp"
#include "ssmkit/tensor.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {

// A fresh seed per run unless SSMKIT_TEST_SEED pins one. Every test that draws random
// inputs puts the seed in its failure messages via SCOPED_TRACE(SeedTrace(seed)).
inline uint64_t FreshSeed() {
  if (const char* env = std::getenv("SSMKIT_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  return static_cast<uint64_t>(
             std::chrono::high_resolution_clock::now().time_since_epoch().count()) ^
         static_cast<uint64_t>(std::random_device{}());
}

inline std::string SeedTrace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with SSMKIT_TEST_SEED=" + std::to_string(seed) +
         ")";
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  double Normal(double mean = 0.0, double stddev = 1.0) {
    return std::normal_distribution<double>(mean, stddev)(engine_);
  }
  std::vector<double> UniformVec(int64_t n, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = Uniform(lo, hi);
    return v;
  }
  std::vector<double> NormalVec(int64_t n, double stddev = 1.0) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = Normal(0.0, stddev);
    return v;
  }

 private:
  std::mt19937_64 engine_;
};

// Storage for a tensor of any dtype, filled from doubles, read back as doubles.
// Holding the values actually stored (after rounding to bf16) lets the oracle see exactly
// what the kernel saw.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(std::vector<int64_t> shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    bytes_.assign(static_cast<size_t>(n * DTypeSize(dtype_)), 0);
    numel_ = n;
  }
  // Rounds `values` to the dtype; returns the stored values as doubles.
  std::vector<double> Fill(const std::vector<double>& values) {
    for (int64_t i = 0; i < numel_; ++i)
      StoreFromF32(bytes_.data(), dtype_, i, static_cast<float>(values[i]));
    return ToDouble();
  }
  // Writes NaN everywhere: whatever the op does not write stays NaN and fails the comparison.
  void Poison() {
    for (int64_t i = 0; i < numel_; ++i)
      StoreFromF32(bytes_.data(), dtype_, i, std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<double> ToDouble() const {
    std::vector<double> v(static_cast<size_t>(numel_));
    for (int64_t i = 0; i < numel_; ++i) v[i] = LoadAsF32(bytes_.data(), dtype_, i);
    return v;
  }
  Tensor view() {
    Tensor t;
    t.data = bytes_.data();
    t.dtype = dtype_;
    t.rank = static_cast<int>(shape_.size());
    int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.shape[d] = shape_[d];
      t.strides[d] = stride;
      stride *= shape_[d];
    }
    return t;
  }
  int64_t numel() const { return numel_; }
  void* data() { return bytes_.data(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kF32;
  int64_t numel_ = 0;
  std::vector<uint8_t> bytes_;
};

// ||got - want|| / ||want||; +inf when got holds a NaN or inf (NaN never passes), and
// the absolute norm of got when want is all zero.
// n token ids drawn uniformly from [0, V).
inline std::vector<int32_t> RandomTokens(Rng& rng, int64_t n, int64_t V) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng.Uniform(0, static_cast<double>(V) - 1e-9));
  return t;
}

inline double Norm(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

inline double RelativeError(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Central finite difference of a scalar function of one coordinate of `x`.
template <class Loss>
double CentralDifference(std::vector<double>& x, size_t i, double step, Loss&& loss) {
  const double saved = x[i];
  x[i] = saved + step;
  const double plus = loss();
  x[i] = saved - step;
  const double minus = loss();
  x[i] = saved;
  return (plus - minus) / (2.0 * step);
}

// Sets the library's thread count for a scope.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) { SetNumThreads(n); }
  ~ScopedThreads() { SetNumThreads(0); }
};

// `blocks` blocks of a quantized dtype (core/quant.hpp) of random bytes, with every f16 scale a
// finite value of either sign (the other bytes are all valid whatever they hold): every level,
// scale and min the format can store, extremes included.
inline std::vector<uint8_t> RandomBlocks(DType dtype, int64_t blocks, Rng& rng) {
  const int64_t bytes = DTypeBlockBytes(dtype);
  std::vector<uint8_t> v(static_cast<size_t>(blocks * bytes));
  for (uint8_t& byte : v) byte = static_cast<uint8_t>(rng.Uniform(0, 256));
  std::vector<int> f16_offsets;
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
      f16_offsets = {0};
      break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      f16_offsets = {0, 2};
      break;
    default:
      f16_offsets = {208};
  }
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int off : f16_offsets) {
      const uint16_t h = F32ToF16(static_cast<float>(rng.Normal(0.0, 0.01)));
      std::memcpy(&v[static_cast<size_t>(blk * bytes + off)], &h, 2);
    }
  }
  return v;
}

// How many targets ForEachSimdTarget runs at least. x86-64: a SIMD target (AVX2, on every
// machine CI uses) and the portable fallback. aarch64: NEON alone, the baseline every such CPU
// has, beneath which Highway builds no fallback (the SVE targets are not built: CMakeLists.txt).
#if defined(__x86_64__) || defined(__i386__)
constexpr int kMinSimdTargets = 2;
#else
constexpr int kMinSimdTargets = 1;
#endif

// Runs fn once with dispatch forced to each Highway target the library was compiled for
// (CMakeLists.txt: on x86-64 AVX-512, AVX2 and Highway's portable fallback, SCALAR or EMU128 by
// Highway release, which is what a machine without a better compiled target runs; on aarch64
// NEON) that this CPU supports, so the narrower vector widths (and their tile and padding paths)
// are tested on a machine that would otherwise only ever run the widest. Returns how many ran.
template <class Fn>
int ForEachSimdTarget(Fn&& fn) {
  int targets_run = 0;
  for (int64_t target : CompiledSimdTargets()) {
    ++targets_run;
    ForceSimdTarget(target);
    SCOPED_TRACE(SimdTargetName(target));
    fn();
  }
  ForceSimdTarget(0);
  return targets_run;
}

}  // namespace ssmkit::testing

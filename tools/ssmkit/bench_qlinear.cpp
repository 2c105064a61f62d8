// `ssmkit bench qlinear`: LinearForward with llama.cpp's quantized weights (Q8_0, Q6_K, Q5_K,
// Q5_1, Q5_0, Q4_K, Q4_1, Q4_0) beside the f32 and bf16 weights of the same shape, for one decode
// token (T = 1) and a decode batch (T = 8): one (T, K) x (M, K)^T product, M = K = 4096 (a 7B
// model's attention projection) and 2048, and m1-130m's in_proj (M = 3072, K = 768) and out_proj
// (M = 768, K = 1536), where a decode step's products spend most of their time. At decode a
// model's weights stream from memory once per token, so each call reads the next of enough
// copies of the weight (256 MB in all) to leave the last-level cache, and the peer is a read of
// the same number of bytes from a cold buffer (ColdRead), timed interleaved: the ratio is the
// share of the read bandwidth reached.
// GB/s counts the weight bytes (plus x and out); ns/weight is per weight element.
// Dimension legend: T rows of x, K input features, M output features.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/quant.hpp"

namespace ssmkit::bench {
namespace {

struct QLinearShape {
  const char* name;
  int64_t M, K;
};
constexpr QLinearShape kShapes[] = {{"4096x4096", 4096, 4096},
                                    {"2048x2048", 2048, 2048},
                                    {"3072x768", 3072, 768},
                                    {"768x1536", 768, 1536}};
constexpr DType kDTypes[] = {DType::kF32,  DType::kBF16, DType::kQ8_0, DType::kQ6_K, DType::kQ5_K,
                             DType::kQ5_1, DType::kQ5_0, DType::kQ4_K, DType::kQ4_1, DType::kQ4_0};
constexpr int64_t kRows[] = {1, 8};

// Weight bytes cycled over: well past the last-level cache.
constexpr double kColdBytes = 256e6;

// `copies` copies of one random N(0, 0.02) (M, K) weight in `dtype`, one after the other.
std::vector<uint8_t> Weights(DType dtype, int64_t M, int64_t K, int copies, std::mt19937& rng) {
  std::vector<float> values(static_cast<size_t>(M * K));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : values) v = normal(rng);
  const int64_t bytes = M * DTypeRowBytes(dtype, K);
  std::vector<uint8_t> all(static_cast<size_t>(bytes * copies));
  const Tensor f32 = Tensor::Contiguous(values.data(), DType::kF32, {M, K});
  if (DTypeIsQuantized(dtype)) {
    (void)QuantizeWeight(f32, Tensor::Contiguous(all.data(), dtype, {M, K}));
  } else {
    for (int64_t i = 0; i < M * K; ++i) StoreFromF32(all.data(), dtype, i, values[i]);
  }
  for (int c = 1; c < copies; ++c) std::memcpy(all.data() + c * bytes, all.data(), bytes);
  return all;
}

int RunQLinearBench(const Options& options) {
  if (!options.ggml.empty()) {
    std::fprintf(stderr, "bench qlinear: --ggml: no ggml case here (the peer is a read floor)\n");
    return 2;
  }
  std::mt19937 rng(1234);
  ColdRead cold_read(kColdBytes);
  std::vector<Result> results;
  std::map<std::string, double> t1_ms;  // shape + dtype -> the T = 1 time
  std::vector<std::string> ratios;
  for (const QLinearShape& shape : kShapes) {
    if (!options.shape.empty() && options.shape != shape.name) continue;
    const int64_t M = shape.M, K = shape.K;
    for (DType dtype : kDTypes) {
      if (!options.algo.empty() && options.algo != DTypeName(dtype)) continue;
      const double weight_bytes = static_cast<double>(M * DTypeRowBytes(dtype, K));
      const int copies = static_cast<int>(std::clamp(kColdBytes / weight_bytes, 1.0, 1024.0));
      std::vector<uint8_t> weights = Weights(dtype, M, K, copies, rng);
      for (int64_t T : kRows) {
        std::vector<float> x(static_cast<size_t>(T * K)), out(static_cast<size_t>(T * M));
        std::normal_distribution<float> normal;
        for (float& v : x) v = normal(rng);
        int next = 0;
        Status status = Status::Ok();
        const auto product = [&] {
          const Tensor w = Tensor::Contiguous(
              weights.data() + static_cast<int64_t>(weight_bytes) * next, dtype, {M, K});
          next = (next + 1) % copies;
          status = LinearForward({Tensor::Contiguous(x.data(), DType::kF32, {T, K}), w, Tensor{}},
                                 Tensor::Contiguous(out.data(), DType::kF32, {T, M}));
        };
        const double bytes = weight_bytes + 4.0 * static_cast<double>(T * (K + M));
        const std::vector<double> ms =
            MedianMsInterleaved(options, {product, [&] { cold_read(bytes); }});
        if (!status.ok()) {
          std::fprintf(stderr, "%s\n", status.message().c_str());
          return 1;
        }
        Result r{"linear", shape.name, DTypeName(dtype),           "T=" + std::to_string(T),
                 ms[0],    bytes,      static_cast<double>(M * K), "weight"};
        r.peer_ms = ms[1];
        r.peer = "cold read of the bytes";
        results.push_back(r);
        const std::string key = std::string(shape.name) + " " + DTypeName(dtype);
        if (T == 1) t1_ms[key] = ms[0];
        if (T > 1 && t1_ms.count(key)) {
          char line[160];
          std::snprintf(line, sizeof line, "%-20s %5.3f bytes/weight, T=%lld / T=1 time %.2fx",
                        key.c_str(), weight_bytes / static_cast<double>(M * K),
                        static_cast<long long>(T), ms[0] / t1_ms[key]);
          ratios.push_back(line);
        }
      }
    }
  }
  if (!options.json) std::printf("CPU: %s\n", CpuName().c_str());
  Print(options, results);
  if (!options.json) {
    for (const std::string& line : ratios) std::printf("%s\n", line.c_str());
  }
  return 0;
}

const SuiteRegistration kRegistration{
    {"qlinear",
     "linear with llama.cpp's quantized weights (q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0) "
     "beside f32 and "
     "bf16: 4096x4096, 2048x2048 and m1-130m's 3072x768 and 768x1536 (M x K), T = 1 and 8, "
     "against a cold read of the same bytes",
     RunQLinearBench}};

}  // namespace
}  // namespace ssmkit::bench

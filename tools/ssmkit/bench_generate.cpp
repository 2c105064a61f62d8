// `ssmkit bench generate`: whole-model generation speed on random weights of the TARGETS.md
// shapes (m1-130m, m2-130m): a prefill of 512 tokens, then 256 decode steps with greedy
// sampling, at batch 1 and 8, with f32 and bf16 weights.
//
// The floor: a decode step must read every weight once (Model::decode_weight_bytes), so at
// batch B it cannot produce more than B * bandwidth / bytes tokens per second. The bandwidth is
// measured in the same run (a 2-thread-style vectorised sum over 1 GiB, the TARGETS.md method,
// with the library's thread count), so the ratio to the floor does not depend on the machine.
// Each case reports the median of --runs repetitions (default 3) of prefill + decode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/sampler.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::bench {
namespace {

constexpr int64_t kPromptTokens = 512;
constexpr int64_t kDecodeSteps = 256;
constexpr int kDefaultRepetitions = 3;

// Sums n floats with 64 independent partial sums (vectorised; no reassociation needed).
__attribute__((target_clones("avx512f", "avx2", "default"))) float SumFloats(const float* p, int64_t n) {
  float acc[64] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 64; ++j) acc[j] += p[i + j];
  }
  for (; i < n; ++i) acc[0] += p[i];
  float s = 0.0f;
  for (float a : acc) s += a;
  return s;
}

// Read bandwidth in GB/s: the best of several passes summing 1 GiB on NumThreads() threads.
double MeasureReadBandwidth() {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of floats
  std::vector<float> data(static_cast<size_t>(n), 1.0f);
  const int threads = NumThreads();
  double best = 0.0;
  float sink = 0.0f;
  for (int pass = 0; pass < 6; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      total += SumFloats(data.data() + begin, end - begin);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += total;
    if (pass > 0) best = std::max(best, static_cast<double>(n) * 4.0 / s / 1e9);  // pass 0 warms up
  }
  if (sink != static_cast<float>(n) * 6.0f) std::fprintf(stderr, "(bandwidth sum %g)\n", sink);
  return best;
}

struct CaseResult {
  std::string shape, dtype;
  int64_t batch = 0;
  double prefill_tok_s = 0, decode_tok_s = 0, floor_tok_s = 0;
  double weight_mb = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

Status RunCase(const std::string& shape, DType dtype, int64_t batch, int repetitions, double bandwidth,
               CaseResult* r) {
  ModelConfig config;
  SSMKIT_RETURN_IF_ERROR(PresetConfig(shape, &config));
  std::unique_ptr<Model> model;
  SSMKIT_RETURN_IF_ERROR(Model::Random(config, dtype, 1234, &model));
  std::unique_ptr<Session> session;
  SSMKIT_RETURN_IF_ERROR(Session::Create(*model, batch, &session));
  Sampler sampler;
  SSMKIT_RETURN_IF_ERROR(Sampler::Create({}, config.vocab_size, &sampler));
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.config_vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch), std::vector<int32_t>(kPromptTokens));
  for (auto& p : prompts) {
    for (auto& t : p) t = token(rng);
  }
  const int64_t V = config.vocab_size;
  std::vector<float> logits(static_cast<size_t>(batch * V));
  std::vector<int32_t> next(static_cast<size_t>(batch));
  std::vector<double> prefill_s, decode_s;
  for (int rep = 0; rep < repetitions; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    SSMKIT_RETURN_IF_ERROR(session->Prefill(prompts, logits));
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < kDecodeSteps; ++step) {
      for (int64_t b = 0; b < batch; ++b) next[b] = sampler.Sample(std::span<const float>(logits).subspan(b * V, V));
      SSMKIT_RETURN_IF_ERROR(session->Decode(next, logits));
    }
    const auto t2 = std::chrono::steady_clock::now();
    prefill_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    decode_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  r->shape = shape;
  r->dtype = DTypeName(dtype);
  r->batch = batch;
  r->prefill_tok_s = static_cast<double>(batch * kPromptTokens) / Median(prefill_s);
  r->decode_tok_s = static_cast<double>(batch * kDecodeSteps) / Median(decode_s);
  r->weight_mb = static_cast<double>(model->decode_weight_bytes()) / 1e6;
  r->floor_tok_s = static_cast<double>(batch) * bandwidth * 1e3 / r->weight_mb;
  return Status::Ok();
}

int RunGenerateBench(const Options& options) {
  const int repetitions = options.runs == Options{}.runs ? kDefaultRepetitions : options.runs;
  const double bandwidth = MeasureReadBandwidth();
  std::vector<CaseResult> results;
  for (const char* shape : {"m1-130m", "m2-130m"}) {
    if (!options.shape.empty() && options.shape != shape) continue;
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      if (!options.algo.empty() && options.algo != DTypeName(dtype)) continue;
      for (int64_t batch : {1, 8}) {
        CaseResult r;
        const Status s = RunCase(shape, dtype, batch, repetitions, bandwidth, &r);
        if (!s.ok()) {
          std::fprintf(stderr, "bench generate %s %s B=%lld: %s\n", shape, DTypeName(dtype),
                       static_cast<long long>(batch), s.message().c_str());
          return 1;
        }
        results.push_back(r);
      }
    }
  }
  if (results.empty()) {
    std::fprintf(stderr, "bench generate: no case matches --shape/--algo\n");
    return 1;
  }
  if (options.json) {
    nlohmann::json array = nlohmann::json::array();
    for (const CaseResult& r : results) {
      array.push_back({{"op", "generate"}, {"shape", r.shape}, {"weights", r.dtype}, {"batch", r.batch},
                       {"prompt_tokens", kPromptTokens}, {"decode_steps", kDecodeSteps},
                       {"prefill_tokens_per_s", r.prefill_tok_s}, {"decode_tokens_per_s", r.decode_tok_s},
                       {"weight_mb_per_step", r.weight_mb}, {"read_gb_per_s", bandwidth},
                       {"floor_tokens_per_s", r.floor_tok_s}, {"fraction_of_floor", r.decode_tok_s / r.floor_tok_s},
                       {"threads", NumThreads()}});
    }
    std::printf("%s\n", array.dump(1).c_str());
    return 0;
  }
  std::printf("read bandwidth %.1f GB/s (%d threads); prefill %lld tokens, decode %lld steps, median of %d\n",
              bandwidth, NumThreads(), static_cast<long long>(kPromptTokens), static_cast<long long>(kDecodeSteps),
              repetitions);
  std::printf("%-9s %-6s %5s %14s %14s %12s %14s %9s\n", "shape", "weights", "batch", "prefill tok/s",
              "decode tok/s", "MB/step", "floor tok/s", "of floor");
  for (const CaseResult& r : results) {
    std::printf("%-9s %-6s %5lld %14.1f %14.1f %12.1f %14.1f %8.0f%%\n", r.shape.c_str(), r.dtype.c_str(),
                static_cast<long long>(r.batch), r.prefill_tok_s, r.decode_tok_s, r.weight_mb, r.floor_tok_s,
                100.0 * r.decode_tok_s / r.floor_tok_s);
  }
  return 0;
}

const SuiteRegistration kRegistration{
    {"generate",
     "whole-model prefill (512 tokens) and decode (256 steps) on random m1-130m / m2-130m weights, "
     "batch 1 and 8, f32 and bf16 (--algo f32|bf16), against the weight-bandwidth floor",
     RunGenerateBench}};

}  // namespace
}  // namespace ssmkit::bench

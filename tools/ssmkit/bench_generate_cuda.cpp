// `ssmkit bench generate --device cuda`: decode speed of the engine on the GPU (a CUDA Session,
// src/model/gpu_decoder.hpp) on random bf16 weights of the pure Mamba shapes of docs/targets.md,
// m1-130m and m2-130m, at batch 1 and 64 (issue bars on an H100: >= 3,000 and >= 50,000
// tokens/s). Per case: a prefill of 64-token random prompts (the GPU runs a prompt through the
// decode step one token at a time: its rate is that of the step), then 256 greedy decode steps
// (DecodeGreedy: the argmax on the GPU, only the ids come back). The first repetition records
// the step's CUDA graph during its prefill; each case reports the median of --runs repetitions
// (default 3). "GB/s" is the weight bytes a step reads (Model::decode_weight_bytes, bf16) times
// the steps per second: the share of the GPU's memory bandwidth the weights alone take.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_generate_cuda.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit::bench {
namespace {

constexpr int64_t kPromptTokens = 64;
constexpr int64_t kDecodeSteps = 256;
constexpr int kDefaultRepetitions = 3;
constexpr const char* kShapes[] = {"m1-130m", "m2-130m"};
constexpr int64_t kBatches[] = {1, 64};

struct CudaCase {
  std::string shape;
  int64_t batch = 0;
  double prefill_tok_s = 0, decode_tok_s = 0, step_ms = 0, weight_mb = 0, weight_gb_s = 0;
};

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Status RunCase(const Model& model, int64_t batch, int repetitions, CudaCase* r) {
  const ModelConfig& config = model.config();
  SessionOptions options;
  options.max_batch = batch;
  options.device = Device::kCuda;
  std::unique_ptr<Session> session;
  SSMKIT_RETURN_IF_ERROR(Session::Create(model, options, &session));
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(0,
                                               static_cast<int32_t>(config.config_vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(kPromptTokens));
    for (auto& t : p) t = token(rng);
  }
  std::vector<float> logits(static_cast<size_t>(batch * config.vocab_size));
  std::vector<int32_t> ids(static_cast<size_t>(batch)), next(static_cast<size_t>(batch));
  std::vector<double> prefill_s, decode_s;
  for (int rep = 0; rep < repetitions; ++rep) {
    auto t0 = Clock::now();
    SSMKIT_RETURN_IF_ERROR(session->Prefill(prompts, logits));
    prefill_s.push_back(SecondsSince(t0));
    for (auto& t : ids) t = token(rng);
    t0 = Clock::now();
    for (int64_t step = 0; step < kDecodeSteps; ++step) {
      SSMKIT_RETURN_IF_ERROR(session->DecodeGreedy(ids, next));
      ids.swap(next);
    }
    decode_s.push_back(SecondsSince(t0));
  }
  r->batch = batch;
  r->prefill_tok_s = static_cast<double>(batch * kPromptTokens) / Median(prefill_s);
  const double decode = Median(decode_s);
  r->decode_tok_s = static_cast<double>(batch * kDecodeSteps) / decode;
  r->step_ms = 1e3 * decode / kDecodeSteps;
  r->weight_mb = static_cast<double>(model.decode_weight_bytes()) / 1e6;
  r->weight_gb_s = r->weight_mb / 1e3 / (decode / kDecodeSteps);
  return Status::Ok();
}

}  // namespace

int RunCudaGenerateBench(const Options& options) {
  const int repetitions = options.runs == Options{}.runs ? kDefaultRepetitions : options.runs;
  std::vector<CudaCase> results;
  for (const char* shape : kShapes) {
    if (!options.shape.empty() && options.shape != shape) continue;
    ModelConfig config;
    std::unique_ptr<Model> model;
    Status s = PresetConfig(shape, &config);
    if (s.ok()) s = Model::Random(config, DType::kBF16, 1234, &model);
    for (int64_t batch : kBatches) {
      if (!options.algo.empty() && options.algo != "b" + std::to_string(batch)) continue;
      CudaCase r;
      if (s.ok()) s = RunCase(*model, batch, repetitions, &r);
      if (!s.ok()) {
        std::fprintf(stderr, "bench generate --device cuda %s B=%lld: %s\n", shape,
                     static_cast<long long>(batch), s.message().c_str());
        return 1;
      }
      r.shape = shape;
      results.push_back(r);
    }
  }
  if (results.empty()) {
    std::fprintf(stderr, "bench generate --device cuda: no case matches --shape/--algo\n");
    return 1;
  }
  if (options.json) {
    nlohmann::json array = nlohmann::json::array();
    for (const CudaCase& r : results) {
      array.push_back({{"op", "generate"},
                       {"device", "cuda"},
                       {"shape", r.shape},
                       {"weights", "bf16"},
                       {"batch", r.batch},
                       {"prompt_tokens", kPromptTokens},
                       {"decode_steps", kDecodeSteps},
                       {"prefill_tokens_per_s", r.prefill_tok_s},
                       {"decode_tokens_per_s", r.decode_tok_s},
                       {"step_ms", r.step_ms},
                       {"weight_mb_per_step", r.weight_mb},
                       {"weight_gb_per_s", r.weight_gb_s}});
    }
    std::printf("%s\n", array.dump(1).c_str());
    return 0;
  }
  std::printf(
      "the engine on the GPU, bf16 random weights: prefill %lld tokens (one decode step per "
      "token), then %lld greedy decode steps; median of %d; bars (H100): >= 3000 tokens/s at "
      "batch 1, >= 50000 at batch 64\n",
      static_cast<long long>(kPromptTokens), static_cast<long long>(kDecodeSteps), repetitions);
  std::printf("%-10s %5s %13s %13s %9s %10s %12s\n", "shape", "batch", "prefill tok/s",
              "decode tok/s", "step ms", "MB/step", "weight GB/s");
  for (const CudaCase& r : results) {
    std::printf("%-10s %5lld %13.1f %13.1f %9.3f %10.1f %12.1f\n", r.shape.c_str(),
                static_cast<long long>(r.batch), r.prefill_tok_s, r.decode_tok_s, r.step_ms,
                r.weight_mb, r.weight_gb_s);
  }
  return 0;
}

}  // namespace ssmkit::bench

// `ssmkit bench generate`: whole-model generation speed on random weights of the docs/targets.md
// shapes: the pure m1-130m and m2-130m, the 2.8B m1-2.8b and m2-2.7b, and the hybrids
// granite-4.0-h-350m, granite-4.0-h-1b (Mamba-2 + attention + MLP) and falcon-h1-0.5b
// (attention and Mamba-2 side by side), their configs read from the published config.json keys
// (PresetConfig). Per shape and weight dtype (--weights, default f32,bf16, q8_0,q4_k for the
// 2.8B shapes; the quantized ones are llama.cpp's block types, each matrix quantized from the
// same random values): a prefill of 512 tokens (64 for the 2.8B shapes), then greedy decode
// steps (256; 64 for the hybrids, 32 for the 2.8B shapes), at batch 1 and 8, and at batch 32 (a
// server's batched decode step) a prefill of 64 tokens and 64 decode steps; for the hybrids also
// a prefill of one 8192-token prompt, where attention's quadratic cost shows, reported beside 16
// times the 512-token prefill's time (issue 18's bar: within 1.5x).
//
// The floor: a decode step must read every weight once (Model::decode_weight_bytes), so at
// batch B it cannot produce more than B * bandwidth / bytes tokens per second. The read
// bandwidth of the VMs we run on moves between ~30 and ~50 GB/s within minutes, so one probe at
// the start of a run does not describe its decode steps. Instead, after every kProbeEvery-th
// step, the probe sums a buffer of exactly the step's weight bytes on the library's thread
// count (the docs/targets.md method) and the step is compared with that moment's probe: of floor =
// median over those steps of (probe time / step time). The probe stands apart from the timed
// steps (it is not in decode tok/s), but it evicts the caches the next step would have found
// warm (the SSM and conv states, the activations), which can only lower decode tok/s.
// A step also reads and writes each sequence's SSM and conv state (f32, a fixed size per
// sequence: Session::SlotStateBytes of an empty slot): m2-130m's 19.4 MB per sequence, read and
// written, is ~8% of its f32 weights' bytes at batch 1 and 2.4 times them at batch 32.
// "of floor+state" counts those bytes too (read and written, at the probe's read rate;
// attention's KV rows are left out, so it errs low): the bytes a step cannot avoid moving.
//
// The ceiling at larger batches: a decode step multiplies every weight matrix by B rows, B
// multiply-adds per weight, so it cannot run faster than the machine's multiply-add rate allows.
// After every kProbeEvery-th step an FmaProbe (`bench floor`'s independent FMA chains) sized to
// the step's multiply-adds runs on the same threads, and "of FMA" is the median over those steps
// of (the step's multiply-adds per second) / (the probe's): the share of the FMA rate the step
// reaches (issue 20's bar: >= 50% at batch 8 and 32).
// Each case reports the median of --runs repetitions (default 3) of prefill + decode; the
// 8192-token prefill runs --runs times when --runs is given, else once (it takes minutes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_generate_cuda.hpp"
#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "ssmkit/quant.hpp"
#include "core/parallel.hpp"
#include "fma_rate.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/sampler.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::bench {
namespace {

constexpr int64_t kPromptTokens = 512;
constexpr int64_t kLongPromptTokens = 8192;
// Batches above this prefill and decode less: a step of 32 sequences takes as long as ~10 of
// one, and decode speed does not depend on the prompt's length (the state has a fixed size).
constexpr int64_t kLongRunMaxBatch = 8;
constexpr int64_t kShortPromptTokens = 64;
constexpr int64_t kShortDecodeSteps = 64;
constexpr int kDefaultRepetitions = 3;
// Decode steps per bandwidth probe: 64 probes per repetition. Tuned for run time only.
constexpr int64_t kProbeEvery = 4;

// The bandwidth probe's sum compiled for the widest x86 vectors the CPU runs (one build serves
// every x86 CPU); other architectures take the compiler's own choice.
#if defined(__x86_64__) || defined(__i386__)
#define SSMKIT_WIDEST_X86_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SSMKIT_WIDEST_X86_CLONES
#endif

// Sums n floats with 64 independent partial sums (vectorised; no reassociation needed).
SSMKIT_WIDEST_X86_CLONES float SumFloats(const float* p, int64_t n) {
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

// Seconds to sum `data` on NumThreads() threads (ParallelFor), each summing its contiguous
// share.
double TimedSum(const std::vector<float>& data, volatile float* sink) {
  const int64_t n = static_cast<int64_t>(data.size());
  std::vector<float> partial(static_cast<size_t>(ParallelBlocks(n)));
  const auto t0 = std::chrono::steady_clock::now();
  ParallelFor(n, [&](int64_t begin, int64_t end, int block) {
    partial[static_cast<size_t>(block)] = SumFloats(data.data() + begin, end - begin);
  });
  float total = 0.0f;
  for (float p : partial) total += p;
  *sink = total;  // volatile: the sum cannot be optimised out
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A benchmark shape: its PresetConfig name, prompt tokens and decode steps per repetition at
// batch <= kLongRunMaxBatch, whether the 8192-token prefill runs (the hybrids, whose attention
// grows with the prompt), and the weight dtypes run when --weights is not given. The 2.8B shapes
// (issue 19 item 6) prefill and decode less, and run quantized by default: f32 weights (11 GB)
// and the bandwidth probe's buffer of the same size would not fit a 24 GB machine.
struct Shape {
  const char* name;
  int64_t prompt_tokens, decode_steps;
  bool long_prefill;
  const char* default_weights;
};
constexpr Shape kShapes[] = {
    {"m1-130m", kPromptTokens, 256, false, "f32,bf16"},
    {"m2-130m", kPromptTokens, 256, false, "f32,bf16"},
    {"m1-2.8b", kShortPromptTokens, 32, false, "q8_0,q4_k"},
    {"m2-2.7b", kShortPromptTokens, 32, false, "q8_0,q4_k"},
    {"granite-4.0-h-350m", kPromptTokens, 64, true, "f32,bf16"},
    {"granite-4.0-h-1b", kPromptTokens, 64, true, "f32,bf16"},
    {"falcon-h1-0.5b", kPromptTokens, 64, true, "f32,bf16"},
};

struct CaseResult {
  std::string shape, dtype;
  int64_t batch = 0, prompt_tokens = 0, decode_steps = 0;
  double prefill_tok_s = 0, decode_tok_s = 0, floor_tok_s = 0;
  double weight_mb = 0, read_gb_s = 0, fraction_of_floor = 0;
  // The SSM and conv states read and written per step (all sequences), and the share of the
  // floor of weights plus those bytes.
  double state_mb = 0, fraction_of_floor_with_state = 0;
  double gflops = 0, fraction_of_fma = 0;  // the decode steps' multiply-adds (x2) per second
  // The 8192-token prefill (batch-1 hybrid cases; 0 = not run) and its time over 16 times the
  // 512-token prefill's.
  double long_prefill_tok_s = 0, long_over_16_short = 0;
};

std::vector<int32_t> RandomTokens(std::mt19937& rng, const ModelConfig& config, int64_t n) {
  std::uniform_int_distribution<int32_t> token(0,
                                               static_cast<int32_t>(config.config_vocab_size - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = token(rng);
  return tokens;
}

// Seconds the probe takes (one Run).
double TimedFma(FmaProbe& probe) {
  const auto t0 = std::chrono::steady_clock::now();
  probe.Run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Multiply-adds of one decode step of one sequence: every parameter once, except an untied
// embedding's (a row lookup). MoE models count every expert (as the floor's bytes do).
double StepMultiplyAdds(const Model& model) {
  const ModelConfig& c = model.config();
  const double lookup = c.tie_embeddings ? 0.0 : static_cast<double>(c.vocab_size * c.d_model);
  return static_cast<double>(model.parameter_count()) - lookup;
}

Status RunCase(const Model& model, const std::string& weights, const Shape& shape, int64_t batch,
               int repetitions, int long_repetitions, CaseResult* r) {
  const ModelConfig& config = model.config();
  std::unique_ptr<Session> session;
  SSMKIT_RETURN_IF_ERROR(Session::Create(model, batch, &session));
  int64_t slot_state_bytes = 0;  // an empty slot's: the recurrent states alone
  SSMKIT_RETURN_IF_ERROR(session->SlotStateBytes(0, &slot_state_bytes));
  Sampler sampler;
  SSMKIT_RETURN_IF_ERROR(Sampler::Create({}, config.vocab_size, &sampler));
  std::mt19937 rng(42);
  const bool long_run = batch <= kLongRunMaxBatch;
  const int64_t prompt_tokens = long_run ? shape.prompt_tokens : kShortPromptTokens;
  const int64_t decode_steps =
      long_run ? shape.decode_steps : std::min(shape.decode_steps, kShortDecodeSteps);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < batch; ++b) prompts.push_back(RandomTokens(rng, config, prompt_tokens));
  const int64_t V = config.vocab_size;
  std::vector<float> logits(static_cast<size_t>(batch * V));
  std::vector<int32_t> next(static_cast<size_t>(batch));
  const int64_t weight_bytes = model.decode_weight_bytes();
  const std::vector<float> probe(static_cast<size_t>(weight_bytes / 4), 1.0f);
  volatile float sink = 0.0f;
  const double step_fmas = StepMultiplyAdds(model) * static_cast<double>(batch);
  const double lanes = DispatchedFloatLanes();
  FmaProbe fma(NumThreads(), step_fmas / NumThreads() / lanes);
  const double probe_fmas = fma.FmasPerThread() * NumThreads() * lanes;
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<double> prefill_s, decode_s, probe_s, probe_over_step, step_over_fma;
  for (int rep = 0; rep < repetitions; ++rep) {
    const auto t0 = Clock::now();
    SSMKIT_RETURN_IF_ERROR(session->Prefill(prompts, logits));
    prefill_s.push_back(seconds_since(t0));
    double decode = 0.0;
    for (int64_t step = 0; step < decode_steps; ++step) {
      const auto s0 = Clock::now();
      for (int64_t b = 0; b < batch; ++b)
        next[b] = sampler.Sample(std::span<const float>(logits).subspan(b * V, V));
      SSMKIT_RETURN_IF_ERROR(session->Decode(next, logits));
      const double step_s = seconds_since(s0);
      decode += step_s;
      if (step % kProbeEvery == kProbeEvery - 1) {
        probe_s.push_back(TimedSum(probe, &sink));
        probe_over_step.push_back(probe_s.back() / step_s);
        const double fma_s = TimedFma(fma);
        step_over_fma.push_back((step_fmas / step_s) / (probe_fmas / fma_s));
      }
    }
    decode_s.push_back(decode);
  }
  r->shape = shape.name;
  r->dtype = weights;
  r->batch = batch;
  r->prompt_tokens = prompt_tokens;
  r->decode_steps = decode_steps;
  r->prefill_tok_s = static_cast<double>(batch * prompt_tokens) / Median(prefill_s);
  r->decode_tok_s = static_cast<double>(batch * decode_steps) / Median(decode_s);
  r->gflops = 2.0 * step_fmas / batch * r->decode_tok_s / 1e9;
  r->fraction_of_fma = Median(step_over_fma);
  if (!fma.Sane()) return Status::Internal("bench generate: unexpected FMA chain sums");
  r->weight_mb = static_cast<double>(weight_bytes) / 1e6;
  const double probe_median = Median(probe_s);
  r->read_gb_s = static_cast<double>(weight_bytes) / probe_median / 1e9;
  r->floor_tok_s = static_cast<double>(batch) / probe_median;
  r->fraction_of_floor = Median(probe_over_step);
  const double state_bytes = 2.0 * static_cast<double>(batch * slot_state_bytes);
  r->state_mb = state_bytes / 1e6;
  r->fraction_of_floor_with_state = r->fraction_of_floor *
                                    (static_cast<double>(weight_bytes) + state_bytes) /
                                    static_cast<double>(weight_bytes);
  if (shape.long_prefill && batch == 1) {
    const std::vector<std::vector<int32_t>> long_prompt{
        RandomTokens(rng, config, kLongPromptTokens)};
    std::vector<double> long_s;
    for (int rep = 0; rep < long_repetitions; ++rep) {
      const auto t0 = Clock::now();
      SSMKIT_RETURN_IF_ERROR(session->Prefill(long_prompt, logits));
      long_s.push_back(seconds_since(t0));
    }
    r->long_prefill_tok_s = static_cast<double>(kLongPromptTokens) / Median(long_s);
    r->long_over_16_short = Median(long_s) / (16.0 * Median(prefill_s));
  }
  return Status::Ok();
}

// "f32,q4_k" -> {kF32, kQ4_K}; false, with the message on stderr, at an unknown name.
bool ParseWeights(const std::string& text, std::vector<DType>* dtypes) {
  dtypes->clear();
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string name = text.substr(begin, end - begin);
    DType d;
    if (!name.empty() && !DTypeFromName(name, &d)) {
      std::fprintf(stderr,
                   "bench generate: --weights %s: unknown dtype (f32, bf16, f16, q8_0, "
                   "q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)\n",
                   name.c_str());
      return false;
    }
    if (!name.empty()) dtypes->push_back(d);
    begin = end + 1;
  }
  return true;
}

// Repetitions of prefill + decode per case: --runs, else kDefaultRepetitions.
int Repetitions(const Options& options) {
  return options.runs == Options{}.runs ? kDefaultRepetitions : options.runs;
}

// --algo f32 | bf16 | b32 | bf16/b32: a weight dtype, a batch, or both.
bool Selected(const Options& options, const std::string& weights, int64_t batch) {
  const std::string batch_name = "b" + std::to_string(batch);
  return options.algo.empty() || options.algo == weights || options.algo == batch_name ||
         options.algo == weights + "/" + batch_name;
}

// The cases of one model, batches 1, 8 and 32 as --algo selects; false after printing a failure.
bool RunModelCases(const Model& model, const std::string& weights, const Shape& shape,
                   const Options& options, std::vector<CaseResult>* results) {
  const int long_repetitions = options.runs == Options{}.runs ? 1 : options.runs;
  for (int64_t batch : {1, 8, 32}) {
    if (!Selected(options, weights, batch)) continue;
    CaseResult r;
    const Status s =
        RunCase(model, weights, shape, batch, Repetitions(options), long_repetitions, &r);
    if (!s.ok()) {
      std::fprintf(stderr, "bench generate %s %s B=%lld: %s\n", shape.name, weights.c_str(),
                   static_cast<long long>(batch), s.message().c_str());
      return false;
    }
    results->push_back(r);
  }
  return true;
}

// --model PATH: a checkpoint directory or GGUF file instead of the random presets (the same
// file llama.cpp runs, bench/llama_cpp_decode.sh), named by its file name; 64-token prompts
// and 64 decode steps at every batch, as llama-batched-bench -npp 64 -ntg 64 runs them.
int RunFileModel(const Options& options, std::vector<CaseResult>* results) {
  std::unique_ptr<Model> model;
  const Status s = Model::Load(options.model, &model);
  if (!s.ok()) {
    std::fprintf(stderr, "bench generate: --model %s\n", s.message().c_str());
    return 1;
  }
  const std::string name = std::filesystem::path(options.model).filename().string();
  const Shape shape{name.c_str(), kShortPromptTokens, kShortDecodeSteps, false, ""};
  return RunModelCases(*model, model->weight_dtype_name(), shape, options, results) ? 0 : 1;
}

// The random presets of kShapes that --shape / --weights / --algo select; 0, or the exit code
// after printing a failure.
int RunPresets(const Options& options, std::vector<DType> dtypes,
               std::vector<CaseResult>* results) {
  for (const Shape& shape : kShapes) {
    if (!options.shape.empty() && options.shape != shape.name) continue;
    if (options.weights.empty()) ParseWeights(shape.default_weights, &dtypes);
    for (DType dtype : dtypes) {
      const std::string weights = DTypeName(dtype);
      if (!Selected(options, weights, 1) && !Selected(options, weights, 8) &&
          !Selected(options, weights, 32))
        continue;
      ModelConfig config;
      std::unique_ptr<Model> model;
      Status s = PresetConfig(shape.name, &config);
      if (s.ok()) s = Model::Random(config, dtype, 1234, &model);
      if (!s.ok()) {
        std::fprintf(stderr, "bench generate %s %s: %s\n", shape.name, weights.c_str(),
                     s.message().c_str());
        return 1;
      }
      // A quantized model's few fallback matrices make weight_dtype_name() "mixed": the
      // requested dtype names the row.
      if (!RunModelCases(*model, weights, shape, options, results)) return 1;
    }
  }
  return 0;
}

int RunGenerateBench(const Options& options) {
  if (options.device == "cuda") return RunCudaGenerateBench(options);
  std::vector<DType> dtypes;
  if (!ParseWeights(options.weights, &dtypes)) return 2;
  std::vector<CaseResult> results;
  const int rc = options.model.empty() ? RunPresets(options, dtypes, &results)
                                       : RunFileModel(options, &results);
  if (rc != 0) return rc;
  if (results.empty()) {
    std::fprintf(stderr, "bench generate: no case matches --shape/--algo\n");
    return 1;
  }
  if (options.json) {
    nlohmann::json array = nlohmann::json::array();
    for (const CaseResult& r : results) {
      nlohmann::json row = {{"op", "generate"},
                            {"shape", r.shape},
                            {"weights", r.dtype},
                            {"batch", r.batch},
                            {"prompt_tokens", r.prompt_tokens},
                            {"decode_steps", r.decode_steps},
                            {"prefill_tokens_per_s", r.prefill_tok_s},
                            {"decode_tokens_per_s", r.decode_tok_s},
                            {"weight_mb_per_step", r.weight_mb},
                            {"read_gb_per_s", r.read_gb_s},
                            {"floor_tokens_per_s", r.floor_tok_s},
                            {"fraction_of_floor", r.fraction_of_floor},
                            {"state_mb_per_step", r.state_mb},
                            {"fraction_of_floor_with_state", r.fraction_of_floor_with_state},
                            {"decode_gflops", r.gflops},
                            {"fraction_of_fma", r.fraction_of_fma},
                            {"simd_target", DispatchedTargetName()},
                            {"threads", NumThreads()}};
      if (r.long_prefill_tok_s > 0) {
        row["long_prompt_tokens"] = kLongPromptTokens;
        row["long_prefill_tokens_per_s"] = r.long_prefill_tok_s;
        row["long_prefill_over_16x_short"] = r.long_over_16_short;
      }
      array.push_back(row);
    }
    std::printf("%s\n", array.dump(1).c_str());
    return 0;
  }
  std::printf(
      "prefill %lld tokens (%lld for the 2.8B shapes and at batch 32; also %lld for the hybrids "
      "at batch 1), then decode steps (at most %lld at batch 32); median of %d, %d threads, %s; "
      "a read-bandwidth probe over the step's weight bytes and an FMA probe of the step's "
      "multiply-adds after every %lldth step\n",
      static_cast<long long>(kPromptTokens), static_cast<long long>(kShortPromptTokens),
      static_cast<long long>(kLongPromptTokens), static_cast<long long>(kShortDecodeSteps),
      Repetitions(options), NumThreads(), DispatchedTargetName().c_str(),
      static_cast<long long>(kProbeEvery));
  std::printf("%-18s %-6s %5s %13s %13s %13s %9s %10s %10s %12s %9s %9s %7s %9s %15s\n", "shape",
              "weights", "batch", "prefill tok/s", "8192 tok/s", "8192/(16x512)", "decode",
              "MB/step", "probe GB/s", "floor tok/s", "of floor", "GFLOP/s", "of FMA", "state MB",
              "of floor+state");
  for (const CaseResult& r : results) {
    char long_rate[32] = "-", long_ratio[32] = "-";
    if (r.long_prefill_tok_s > 0) {
      std::snprintf(long_rate, sizeof long_rate, "%.1f", r.long_prefill_tok_s);
      std::snprintf(long_ratio, sizeof long_ratio, "%.2f", r.long_over_16_short);
    }
    std::printf(
        "%-18s %-6s %5lld %13.1f %13s %13s %9.1f %10.1f %10.1f %12.1f %8.0f%% %9.1f %6.0f%% "
        "%9.1f %14.0f%%\n",
        r.shape.c_str(), r.dtype.c_str(), static_cast<long long>(r.batch), r.prefill_tok_s,
        long_rate, long_ratio, r.decode_tok_s, r.weight_mb, r.read_gb_s, r.floor_tok_s,
        100.0 * r.fraction_of_floor, r.gflops, 100.0 * r.fraction_of_fma, r.state_mb,
        100.0 * r.fraction_of_floor_with_state);
  }
  return 0;
}

const SuiteRegistration kRegistration{
    {"generate",
     "whole-model prefill (512 tokens; 8192 for the hybrids) and decode on random weights of "
     "m1-130m, m2-130m, m1-2.8b, m2-2.7b, granite-4.0-h-350m, granite-4.0-h-1b, falcon-h1-0.5b "
     "(--shape NAME), batch 1, 8 and 32, f32 and bf16 (--algo f32|bf16|b8|bf16/b32 ...; "
     "--weights q8_0,q4_k,...), against the "
     "weight-bandwidth floor and the FMA rate; all shapes take over an hour on 2 threads. "
     "--device cuda: the GPU engine on m1-130m and m2-130m, bf16, batch 1 and 64",
     RunGenerateBench}};

}  // namespace
}  // namespace ssmkit::bench

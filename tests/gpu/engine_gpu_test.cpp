// The engine on the GPU (a CUDA Session, src/model/gpu_decoder.hpp) against the CPU engine on
// the tiny fixture checkpoints (tests/fixtures/models: Mamba-1 and Mamba-2, Hugging Face and
// state-spaces formats, f32 and bf16): prefill and decode logits at batch 1, 3 and 4 with
// prompts of different lengths, greedy ids, a greedy generation; each with the step replayed
// as a CUDA graph and launched eagerly (SSMKIT_CUDA_GRAPHS=0), and the two against each other.
// A hybrid on CUDA is Unsupported, naming its first non-Mamba block (checked without a GPU).
//
// Bound: |gpu - cpu| <= 3e-2 * max(1, max |cpu logit| of the row). The GPU rounds activations to
// bf16 (mamba_ssm's autocast does the same) where the CPU keeps f32: the in_proj, x_proj,
// dt_proj and out_proj outputs, the conv and state-update outputs, the norms' outputs, about
// eight roundings of 2^-9 relative error each per layer, and the weights of an f32 checkpoint
// once. Through the fixtures' two layers and the LM head that is at most ~16 * 2^-9 = 3% of the
// logits' scale if every error lined up; they do not: transformers' own bf16 run of
// mamba1-hf-bf16 (the same rounding points) differs from its f32 run of mamba1-hf by at most
// 0.4% of the logits' scale (their expected.safetensors), so a pass is expected with ~8x to
// spare (the SSM and conv states stay f32 on both). Greedy ids must be equal wherever the CPU's
// best logit beats the runner-up by more than twice the bound; elsewhere the GPU's choice must be
// within the bound of the CPU's best. Graph replay and eager launches run the same kernels on
// the same inputs: they must agree to 1e-6 of the row's scale.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "ssmkit/generate.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kRelativeBound = 3e-2;
constexpr int kDecodeSteps = 6;

// The fixtures: beside the working directory when run from a checkout's root (bench/device/
// run.sh, on a machine where the build's path does not exist), else the source tree built from.
std::string FixtureModel(const std::string& name) {
  const std::string local = "tests/fixtures/models/" + name;
  if (std::filesystem::exists(local + "/config.json")) return local;
  return std::string(SSMKIT_FIXTURES_DIR) + "/models/" + name;
}

std::unique_ptr<Model> Load(const std::string& name) {
  std::unique_ptr<Model> model;
  const Status s = Model::Load(FixtureModel(name), &model);
  EXPECT_TRUE(s.ok()) << name << ": " << s.message();
  return model;
}

Status CreateSession(const Model& model, int64_t batch, Device device,
                     std::unique_ptr<Session>* session) {
  SessionOptions options;
  options.max_batch = batch;
  options.device = device;
  return Session::Create(model, options, session);
}

// Row scale: the bound's unit.
double Scale(const float* row, int64_t n) {
  double m = 1.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(row[i])));
  return m;
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t rows,
                 int64_t V, double relative, const std::string& what) {
  for (int64_t r = 0; r < rows; ++r) {
    const double bound = relative * Scale(cpu.data() + r * V, V);
    double worst = 0.0;
    int64_t at = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double e = std::fabs(static_cast<double>(gpu[r * V + j]) - cpu[r * V + j]);
      if (!(e <= worst)) {  // NaN counts as the worst
        worst = e;
        at = j;
      }
    }
    EXPECT_LE(worst, bound) << what << ", row " << r << ": logit " << at << " gpu "
                            << gpu[r * V + at] << " cpu " << cpu[r * V + at];
  }
}

// The greedy id the GPU chose for one row, against the CPU's logits of that row.
void ExpectGreedyAgrees(int32_t gpu_id, const float* cpu, int64_t sampled, int64_t V,
                        const std::string& what) {
  ASSERT_GE(gpu_id, 0) << what;
  ASSERT_LT(gpu_id, sampled) << what;
  const int64_t best = std::max_element(cpu, cpu + sampled) - cpu;
  float runner_up = -INFINITY;
  for (int64_t j = 0; j < sampled; ++j) {
    if (j != best) runner_up = std::max(runner_up, cpu[j]);
  }
  const double bound = kRelativeBound * Scale(cpu, V);
  if (cpu[best] - runner_up > 2 * bound) {
    EXPECT_EQ(gpu_id, best) << what << ": the CPU's margin " << cpu[best] - runner_up;
  } else {
    EXPECT_GE(cpu[gpu_id], cpu[best] - bound) << what << ": a near tie, but not within the bound";
  }
}

// Prompts of different lengths (1 to 7 tokens), so the prefill's longest-first layout and every
// batch size below B are exercised.
std::vector<std::vector<int32_t>> Prompts(int64_t B, int64_t vocab) {
  const int64_t lengths[] = {5, 2, 7, 1, 3};
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < lengths[b % 5]; ++t) {
      prompts[b].push_back(static_cast<int32_t>((17 * b + 31 * t + 3) % vocab));
    }
  }
  return prompts;
}

// Prefill and kDecodeSteps steps on the GPU and the CPU, the GPU's greedy ids fed to both; the
// GPU's logits of every step appended to *trace.
void CompareWithCpu(const std::string& name, int64_t B, std::vector<float>* trace) {
  SCOPED_TRACE(name + " B=" + std::to_string(B));
  const std::unique_ptr<Model> model = Load(name);
  ASSERT_TRUE(model);
  std::unique_ptr<Session> gpu, cpu;
  Status s = CreateSession(*model, B, Device::kCuda, &gpu);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(CreateSession(*model, B, Device::kCpu, &cpu).ok());
  const int64_t V = model->config().vocab_size;
  const int64_t sampled = std::min(V, gpu->config_vocab_size());
  const auto prompts = Prompts(B, sampled);
  std::vector<float> g(static_cast<size_t>(B * V), NAN), c(static_cast<size_t>(B * V));
  s = gpu->Prefill(prompts, g);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(cpu->Prefill(prompts, c).ok());
  ExpectClose(g, c, B, V, kRelativeBound, "prefill");
  trace->insert(trace->end(), g.begin(), g.end());
  std::vector<int32_t> ids(static_cast<size_t>(B)), greedy(static_cast<size_t>(B), -1);
  for (int64_t b = 0; b < B; ++b) {
    ids[b] = static_cast<int32_t>(std::max_element(g.data() + b * V, g.data() + b * V + sampled) -
                                  (g.data() + b * V));
  }
  for (int step = 0; step < kDecodeSteps; ++step) {
    const std::string what = "decode step " + std::to_string(step);
    // Odd steps ask for the greedy ids, even ones for the logits: both paths, same state.
    if (step % 2 == 1) {
      s = gpu->DecodeGreedy(ids, greedy);
      ASSERT_TRUE(s.ok()) << what << ": " << s.message();
      ASSERT_TRUE(cpu->Decode(ids, c).ok());
      for (int64_t b = 0; b < B; ++b) {
        ExpectGreedyAgrees(greedy[b], c.data() + b * V, sampled, V,
                           what + " row " + std::to_string(b));
      }
      ids = greedy;
      continue;
    }
    std::fill(g.begin(), g.end(), NAN);
    s = gpu->Decode(ids, g);
    ASSERT_TRUE(s.ok()) << what << ": " << s.message();
    ASSERT_TRUE(cpu->Decode(ids, c).ok());
    ExpectClose(g, c, B, V, kRelativeBound, what);
    trace->insert(trace->end(), g.begin(), g.end());
    for (int64_t b = 0; b < B; ++b) {
      ids[b] = static_cast<int32_t>(std::max_element(g.data() + b * V, g.data() + b * V + sampled) -
                                    (g.data() + b * V));
    }
  }
}

const char* const kFixtures[] = {"mamba1-hf-bf16", "mamba1-hf", "mamba1-ss", "mamba2-hf",
                                 "mamba2-ss"};

TEST(EngineGpu, DecodeMatchesCpu) {
  SSMKIT_REQUIRE_GPU();
  for (const char* name : kFixtures) {
    for (int64_t B : {1, 3, 4}) {
      std::vector<float> graphed, eager;
      CompareWithCpu(name, B, &graphed);
      {
        ScopedVariant off("SSMKIT_CUDA_GRAPHS", "0");
        SCOPED_TRACE("SSMKIT_CUDA_GRAPHS=0");
        CompareWithCpu(name, B, &eager);
      }
      // The same kernels on the same inputs, recorded or not.
      ASSERT_EQ(graphed.size(), eager.size()) << name;
      const int64_t V = static_cast<int64_t>(Load(name)->config().vocab_size);
      ExpectClose(graphed, eager, static_cast<int64_t>(eager.size()) / V, V, 1e-6,
                  std::string(name) + ": graph against eager");
    }
  }
}

// The Generator's greedy path (DecodeGreedy on the GPU) against the CPU's logits, token by
// token: the prompt "The" of the CLI test (ids 53 267), 8 tokens.
TEST(EngineGpu, GreedyGenerationMatchesCpu) {
  SSMKIT_REQUIRE_GPU();
  for (const char* name : {"mamba1-hf", "mamba2-hf"}) {
    SCOPED_TRACE(name);
    const std::unique_ptr<Model> model = Load(name);
    ASSERT_TRUE(model);
    std::unique_ptr<Session> gpu, cpu;
    Status s = CreateSession(*model, 1, Device::kCuda, &gpu);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(CreateSession(*model, 1, Device::kCpu, &cpu).ok());
    const std::vector<int32_t> prompt = {53, 267};
    GenerateOptions options;
    options.max_tokens = 8;
    std::vector<int32_t> tokens;
    GenerateStats stats;
    s = Generate(
        *gpu, prompt, options, [&](int32_t t) { tokens.push_back(t); }, &stats);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(tokens.size(), 8u);
    const int64_t V = model->config().vocab_size;
    const int64_t sampled = std::min(V, cpu->config_vocab_size());
    std::vector<float> c(static_cast<size_t>(V));
    ASSERT_TRUE(cpu->Prefill({prompt}, c).ok());
    for (size_t i = 0; i < tokens.size(); ++i) {
      ExpectGreedyAgrees(tokens[i], c.data(), sampled, V, "token " + std::to_string(i));
      if (i + 1 < tokens.size()) ASSERT_TRUE(cpu->Decode({&tokens[i], 1}, c).ok());
    }
  }
}

TEST(EngineGpu, BadInputIsAStatus) {
  SSMKIT_REQUIRE_GPU();
  const std::unique_ptr<Model> model = Load("mamba2-hf");
  ASSERT_TRUE(model);
  std::unique_ptr<Session> gpu;
  Status s = CreateSession(*model, 2, Device::kCuda, &gpu);
  ASSERT_TRUE(s.ok()) << s.message();
  const int64_t V = model->config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(2 * V));
  std::vector<int32_t> ids = {1, 2}, next(2);
  EXPECT_EQ(gpu->Decode(ids, logits).code(), StatusCode::kInvalidArgument);  // no prefill yet
  EXPECT_EQ(gpu->Prefill({{1, 2}, {static_cast<int32_t>(V)}}, logits).code(),
            StatusCode::kInvalidArgument);  // a token outside the vocabulary
  EXPECT_EQ(gpu->Prefill({{1, 2}, {3}, {4}}, logits).code(),
            StatusCode::kInvalidArgument);  // more prompts than max_batch
  std::vector<float> every(static_cast<size_t>(2 * 2 * V));
  EXPECT_EQ(gpu->Prefill({{1, 2}, {3}}, logits, every).code(), StatusCode::kUnsupported);
  ASSERT_TRUE(gpu->Prefill({{1, 2}, {3}}, logits).ok());
  EXPECT_EQ(gpu->DecodeGreedy({ids.data(), 1}, next).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu->DecodeSlots(std::vector<int32_t>{0}, {ids.data(), 1}, logits).code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(gpu->ResetSlot(0).code(), StatusCode::kUnsupported);
  s = gpu->DecodeGreedy(ids, next);
  EXPECT_TRUE(s.ok()) << s.message();  // the session still works after refusals
  EXPECT_EQ(gpu->slot_length(0), 3);
  EXPECT_EQ(gpu->slot_length(1), 2);
}

// Needs no GPU: the model is refused before any device is looked for.
TEST(EngineGpu, HybridIsUnsupportedNamingTheBlock) {
  for (const char* name : {"jamba", "granitemoehybrid-dense", "zamba2", "falcon_h1"}) {
    SCOPED_TRACE(name);
    const std::unique_ptr<Model> model = Load(name);
    ASSERT_TRUE(model);
    std::string first;
    for (const BlockSpec& b : model->config().block_list()) {
      if (b.kind != BlockKind::kMamba1 && b.kind != BlockKind::kMamba2) {
        first = BlockKindName(b.kind);
        break;
      }
    }
    ASSERT_FALSE(first.empty());
    std::unique_ptr<Session> session;
    const Status s = CreateSession(*model, 1, Device::kCuda, &session);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
    EXPECT_NE(s.message().find("is a " + first + " block"), std::string::npos) << s.message();
    EXPECT_FALSE(session);
  }
}

}  // namespace
}  // namespace ssmkit::testing

// The engine against itself on random models, for the options the transformers fixtures do not
// cover: a Mamba-2 time_step_limit that acts (applied by the SSD in prefill, by the model at
// decode), D per channel (mamba_ssm's D_has_hdim), projection biases in Mamba-2, several
// groups, conv width 2 and 3. For each: the logits of a prefill of prompt + continuation equal,
// position by position, those of a prefill of the prompt followed by decode steps; and a
// batch of prompts of different lengths equals the prompts one by one. And the opt-in bf16
// products (SetBf16Products) in a bf16 model's prefill.
#include <algorithm>
#include <string>
#include <vector>

#include "random_model_config.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kTolerance = 1e-4;

struct Variant {
  const char* name;
  ModelConfig config;
};

ModelConfig Base(ModelArch arch) {
  return arch == ModelArch::kMamba1 ? RandomModelConfig(arch, {48, 3, 97, 8})
                                    : RandomModelConfig(arch, {48, 3, 97, 16, 6, 3, 8});
}

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  v.push_back({"mamba1", Base(ModelArch::kMamba1)});
  ModelConfig m1 = Base(ModelArch::kMamba1);
  m1.d_conv = 2;
  m1.proj_bias = true;
  m1.conv_bias = false;
  v.push_back({"mamba1 K=2 bias, no conv bias", m1});
  ModelConfig limit = Base(ModelArch::kMamba2);
  limit.dt_min = 0.004f;
  limit.dt_max = 0.03f;  // random dt_bias spans [1e-3, 1e-1]: the clamp acts at both ends
  v.push_back({"mamba2 dt limit", limit});
  ModelConfig m2 = Base(ModelArch::kMamba2);
  m2.d_per_channel = true;
  m2.proj_bias = true;
  m2.d_conv = 3;
  m2.ngroups = 2;
  m2.tie_embeddings = false;
  v.push_back({"mamba2 D per channel, bias, K=3, untied", m2});
  return v;
}

std::vector<double> Row(const std::vector<float>& v, int64_t row, int64_t width) {
  return std::vector<double>(v.begin() + row * width, v.begin() + (row + 1) * width);
}

TEST(ModelConsistency, PrefillThenDecodeEqualsLongerPrefill) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (const Variant& variant : Variants()) {
    SCOPED_TRACE(variant.name);
    std::unique_ptr<Model> model;
    const Status s = Model::Random(variant.config, DType::kF32, seed, &model);
    ASSERT_TRUE(s.ok()) << s.message();
    std::unique_ptr<Session> session;
    ASSERT_TRUE(Session::Create(*model, 3, &session).ok());
    const int64_t V = variant.config.vocab_size, prompt_len = 11, steps = 9;
    std::vector<int32_t> all(prompt_len + steps);
    for (auto& t : all) t = static_cast<int32_t>(rng.Uniform(0, V - 1));
    std::vector<float> full((prompt_len + steps) * V), last(V);
    ASSERT_TRUE(session->Prefill({all}, last, full).ok());
    const std::vector<int32_t> prompt(all.begin(), all.begin() + prompt_len);
    ASSERT_TRUE(session->Prefill({prompt}, last).ok());
    for (int64_t j = 0; j < steps; ++j) {
      const int64_t pos = prompt_len - 1 + j;
      EXPECT_LE(RelativeError(Row(last, 0, V), Row(full, pos, V)), kTolerance)
          << "position " << pos;
      const int32_t next = all[pos + 1];
      ASSERT_TRUE(session->Decode(std::span<const int32_t>(&next, 1), last).ok());
    }
  }
}

TEST(ModelConsistency, BatchEqualsOneByOne) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (const Variant& variant : Variants()) {
    SCOPED_TRACE(variant.name);
    std::unique_ptr<Model> model;
    ASSERT_TRUE(Model::Random(variant.config, DType::kBF16, seed + 1, &model).ok());
    std::unique_ptr<Session> batch, single;
    ASSERT_TRUE(Session::Create(*model, 3, &batch).ok());
    ASSERT_TRUE(Session::Create(*model, 1, &single).ok());
    const int64_t V = variant.config.vocab_size;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t len : {1, 13, 6}) {
      std::vector<int32_t> p(len);
      for (auto& t : p) t = static_cast<int32_t>(rng.Uniform(0, V - 1));
      prompts.push_back(p);
    }
    std::vector<float> logits(3 * V), one(V);
    ASSERT_TRUE(batch->Prefill(prompts, logits).ok());
    std::vector<std::vector<float>> want(3);
    for (int b = 0; b < 3; ++b) {
      ASSERT_TRUE(single->Prefill({prompts[b]}, one).ok());
      EXPECT_LE(RelativeError(Row(logits, b, V), Row(one, 0, V)), kTolerance) << "prompt " << b;
    }
    // Two decode steps in the batch against the same steps one sequence at a time.
    const std::vector<int32_t> step1 = {5, 6, 7}, step2 = {8, 9, 10};
    ASSERT_TRUE(batch->Decode(step1, logits).ok());
    ASSERT_TRUE(batch->Decode(step2, logits).ok());
    for (int b = 0; b < 3; ++b) {
      ASSERT_TRUE(single->Prefill({prompts[b]}, one).ok());
      ASSERT_TRUE(single->Decode(std::span<const int32_t>(&step1[b], 1), one).ok());
      ASSERT_TRUE(single->Decode(std::span<const int32_t>(&step2[b], 1), one).ok());
      EXPECT_LE(RelativeError(Row(logits, b, V), Row(one, 0, V)), kTolerance)
          << "prompt " << b << " after 2 steps";
    }
  }
}

// A bf16 model's prefill of more rows than the few-rows kernel takes, with the bf16 products on:
// its projections round their inputs to bf16 (relative 2^-9), so every position's logits move
// from the f32-activation prefill's, by about that rounding through the layers and no more.
TEST(ModelConsistency, Bf16ProductsMoveThePrefillByTheirRounding) {
  if (!SetBf16Products(true)) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  SetBf16Products(false);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (ModelArch arch : {ModelArch::kMamba1, ModelArch::kMamba2}) {
    const ModelConfig config = Base(arch);
    std::unique_ptr<Model> model;
    ASSERT_TRUE(Model::Random(config, DType::kBF16, seed, &model).ok());
    std::unique_ptr<Session> session;
    ASSERT_TRUE(Session::Create(*model, 1, &session).ok());
    const int64_t V = config.vocab_size, L = 2 * kLinearGemvMaxRows + 3;
    std::vector<int32_t> prompt(L);
    for (auto& t : prompt) t = static_cast<int32_t>(rng.Uniform(0, V - 1));
    std::vector<float> last(V), f32_rows(L * V), bf16_rows(L * V, std::nanf(""));
    ASSERT_TRUE(session->Prefill({prompt}, last, f32_rows).ok());
    SetBf16Products(true);
    const Status s = session->Prefill({prompt}, last, bf16_rows);
    SetBf16Products(false);
    ASSERT_TRUE(s.ok()) << s.message();
    const double moved = RelativeError(Row(bf16_rows, 0, L * V), Row(f32_rows, 0, L * V));
    EXPECT_GT(moved, 1e-5) << (arch == ModelArch::kMamba1 ? "mamba1" : "mamba2")
                           << ": the products were not used";
    EXPECT_LT(moved, 2e-2) << (arch == ModelArch::kMamba1 ? "mamba1" : "mamba2");
  }
}

}  // namespace
}  // namespace ssmkit::testing

// Perplexity (include/ssmkit/perplexity.hpp) on random Mamba-1 and Mamba-2 models, against a
// recomputation that takes another path through the engine: each chunk fed one token at a
// time through Decode, and -log softmax in long double. Checked: which positions are scored
// (the second half of each chunk, llama-perplexity's rule), the mean and its standard error,
// that batching chunks changes nothing, and that bad options fail with the argument named and
// the result untouched.
#include "ssmkit/perplexity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "random_model_config.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct Recomputed {
  int64_t scored = 0;
  double mean = 0.0, stderr_of_mean = 0.0;
};

// Chunk c of `tokens` from a fresh state, one token per Decode; positions L/2 .. L-2 scored.
Recomputed Recompute(const Model& model, const std::vector<int32_t>& tokens, int64_t L,
                     int64_t chunks) {
  const int64_t V = model.config().vocab_size;
  std::unique_ptr<Session> session;
  EXPECT_TRUE(Session::Create(model, 1, &session).ok());
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<long double> nll;
  for (int64_t c = 0; c < chunks; ++c) {
    const int32_t* chunk = tokens.data() + c * L;
    EXPECT_TRUE(session->Prefill({{chunk[0]}}, logits).ok());
    for (int64_t j = 0; j + 1 < L; ++j) {
      if (j >= L / 2) {
        long double sum = 0.0L;
        for (float x : logits) sum += std::exp(static_cast<long double>(x));
        nll.push_back(std::log(sum) - static_cast<long double>(logits[chunk[j + 1]]));
      }
      EXPECT_TRUE(session->Decode(std::span<const int32_t>(chunk + j + 1, 1), logits).ok());
    }
  }
  long double total = 0.0L, squares = 0.0L;
  for (long double x : nll) total += x;
  const long double n = static_cast<long double>(nll.size());
  const long double mean = total / n;
  for (long double x : nll) squares += (x - mean) * (x - mean);
  return {static_cast<int64_t>(nll.size()), static_cast<double>(mean),
          static_cast<double>(std::sqrt(squares / (n - 1) / n))};
}

class PerplexityTest : public ::testing::TestWithParam<ModelArch> {
 protected:
  void SetUp() override {
    seed_ = FreshSeed();
    const ModelConfig config =
        GetParam() == ModelArch::kMamba1
            ? RandomModelConfig(ModelArch::kMamba1, {48, 2, 97, 8})
            : RandomModelConfig(ModelArch::kMamba2, {48, 2, 97, 16, 6, 3, 8});
    ASSERT_TRUE(Model::Random(config, DType::kF32, seed_, &model_).ok());
  }
  uint64_t seed_ = 0;
  std::unique_ptr<Model> model_;
};

TEST_P(PerplexityTest, MatchesTokenByTokenRecomputation) {
  SCOPED_TRACE(SeedTrace(seed_));
  Rng rng(seed_);
  const int64_t L = 23, chunks = 5;
  // Three tokens past the last whole chunk: never scored.
  const std::vector<int32_t> tokens = RandomTokens(rng, chunks * L + 3, 97);
  const Recomputed want = Recompute(*model_, tokens, L, chunks);
  ASSERT_EQ(want.scored, chunks * (L - 1 - L / 2));
  for (int64_t batch : {1, 2, 5, 8}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    PerplexityResult r;
    std::vector<int64_t> progress;
    ASSERT_TRUE(Perplexity(*model_, tokens, {L, 0, batch}, &r, [&](int64_t done, double ppl) {
                  EXPECT_TRUE(std::isfinite(ppl));
                  progress.push_back(done);
                }).ok());
    EXPECT_EQ(r.chunks, chunks);
    EXPECT_EQ(r.scored_tokens, want.scored);
    EXPECT_NEAR(r.mean_nll, want.mean, 1e-5 * want.mean);
    EXPECT_NEAR(r.nll_stderr, want.stderr_of_mean, 1e-3 * want.stderr_of_mean);
    EXPECT_NEAR(r.perplexity, std::exp(want.mean), 1e-5 * std::exp(want.mean));
    EXPECT_NEAR(r.perplexity_stderr, r.perplexity * r.nll_stderr, 1e-12 * r.perplexity);
    EXPECT_GT(r.nll_stderr, 0.0);
    EXPECT_EQ(progress.back(), chunks);
    EXPECT_EQ(static_cast<int64_t>(progress.size()), (chunks + batch - 1) / batch);
  }
}

TEST_P(PerplexityTest, MaxChunksScoresThePrefix) {
  SCOPED_TRACE(SeedTrace(seed_));
  Rng rng(seed_);
  const int64_t L = 16;
  const std::vector<int32_t> tokens = RandomTokens(rng, 6 * L, 97);
  const Recomputed want = Recompute(*model_, tokens, L, 2);
  PerplexityResult r;
  ASSERT_TRUE(Perplexity(*model_, tokens, {L, 2, 3}, &r).ok());
  EXPECT_EQ(r.chunks, 2);
  EXPECT_EQ(r.scored_tokens, 2 * (L - 1 - L / 2));
  EXPECT_NEAR(r.mean_nll, want.mean, 1e-5 * want.mean);
}

TEST_P(PerplexityTest, BadArgumentsAreNamedAndLeaveTheResult) {
  const std::vector<int32_t> tokens(40, 5);
  struct Bad {
    PerplexityOptions options;
    std::vector<int32_t> tokens;
    const char* message;
  };
  std::vector<int32_t> out_of_range = tokens;
  out_of_range[17] = 97;
  std::vector<int32_t> negative = tokens;
  negative[3] = -1;
  const Bad cases[] = {
      {{2, 0, 1}, tokens, "perplexity: context: expected >= 3, given 2"},
      {{8, -1, 1}, tokens, "perplexity: max_chunks: expected >= 0 (0: all), given -1"},
      {{8, 0, 0}, tokens, "perplexity: batch: expected >= 1, given 0"},
      {{41, 0, 1}, tokens, "expected at least one chunk of context 41 tokens, given 40"},
      {{8, 0, 1}, out_of_range, "tokens[17]: expected an id in [0, 97), given 97"},
      {{8, 0, 1}, negative, "tokens[3]: expected an id in [0, 97), given -1"},
  };
  for (const Bad& b : cases) {
    PerplexityResult r;
    r.perplexity = std::numeric_limits<double>::quiet_NaN();
    const Status s = Perplexity(*model_, b.tokens, b.options, &r);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(b.message), std::string::npos) << s.message();
    EXPECT_TRUE(std::isnan(r.perplexity));
    EXPECT_EQ(r.chunks, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Arch, PerplexityTest,
                         ::testing::Values(ModelArch::kMamba1, ModelArch::kMamba2),
                         [](const auto& info) {
                           return info.param == ModelArch::kMamba1 ? "mamba1" : "mamba2";
                         });

}  // namespace
}  // namespace ssmkit::testing

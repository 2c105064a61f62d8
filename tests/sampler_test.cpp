// The sampler and Generate: greedy choice (ties, NaN), option checks, the distribution of
// temperature sampling against softmax(logits / T) on fresh random logits, top-k and top-p
// supports against a brute-force sort (a 50k vocabulary with a nucleus wider than the first
// sorted prefix), determinism per seed; Generate's greedy output against transformers'
// (fixture) and its stop at the end-of-text token.
#include "ssmkit/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "core/safetensors.hpp"
#include "ssmkit/generate.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

Sampler Make(const SamplerOptions& o, int64_t vocab) {
  Sampler s;
  const Status st = Sampler::Create(o, vocab, &s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

std::vector<float> RandomLogits(Rng& rng, int64_t n, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.Normal(0.0, scale));
  return v;
}

// The ids of the smallest set of most likely tokens (of softmax(logits / T)) reaching mass p.
std::set<int32_t> Nucleus(const std::vector<float>& logits, double T, double p) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double mx = logits[order[0]];
  double total = 0.0;
  for (float l : logits) total += std::exp((l - mx) / T);
  std::set<int32_t> kept;
  double mass = 0.0;
  for (int32_t id : order) {
    if (logits[id] == -INFINITY) break;  // filtered out by top-k
    kept.insert(id);
    mass += std::exp((logits[id] - mx) / T) / total;
    if (mass >= p) break;
  }
  return kept;
}

TEST(Sampler, GreedyTakesTheFirstLargestAndSkipsNaN) {
  Sampler s = Make({}, 6);
  EXPECT_EQ(s.Sample(std::vector<float>{1, 3, 2, 3, -1, 0}), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{std::nanf(""), -5, std::nanf(""), -4, -4, -9}), 3);
  Sampler k1 = Make({2.0f, 1, 1.0f, 3}, 6);  // top_k = 1 is greedy whatever the temperature
  EXPECT_EQ(k1.Sample(std::vector<float>{0, 0, 9, 0, 0, 0}), 2);
}

// The one-pass definition: the first of the largest numbers, 0 when there is none.
int32_t FirstLargestNumber(const std::vector<float>& v) {
  int32_t best = 0;
  bool found = false;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) continue;
    if (!found || v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    found = true;
  }
  return best;
}

TEST(Sampler, GreedyOnLongLogitsIsTheFirstLargestNumber) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Rng rng(seed);
  for (int64_t n : {1, 15, 16, 17, 50280}) {
    Sampler s = Make({}, n);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v = RandomLogits(rng, n, 3.0);
      // Ties of the largest at indices in different lanes, NaN and -inf, and the degenerate rows.
      const auto at = [&] { return static_cast<size_t>(rng.Uniform(0.0, 1.0) * n) % v.size(); };
      if (trial % 4 == 1) {
        v[at()] = 1e3f;
        v[at()] = 1e3f;
      }
      if (trial % 4 == 2) v[at()] = std::nanf("");
      if (trial % 4 == 3) v[at()] = -INFINITY;
      if (trial == 16) std::fill(v.begin(), v.end(), std::nanf(""));
      if (trial == 17) std::fill(v.begin(), v.end(), -INFINITY);
      if (trial == 18) {
        std::fill(v.begin(), v.end(), std::nanf(""));
        v.back() = -INFINITY;
      }
      if (trial == 19) std::fill(v.begin(), v.end(), 2.5f);
      EXPECT_EQ(s.Sample(v), FirstLargestNumber(v)) << "n " << n << ", trial " << trial;
    }
  }
}

TEST(Sampler, RejectsBadOptions) {
  Sampler s;
  EXPECT_NE(Sampler::Create({-1.0f}, 10, &s).message().find("temperature"), std::string::npos);
  EXPECT_NE(Sampler::Create({INFINITY}, 10, &s).message().find("temperature"), std::string::npos);
  EXPECT_NE(Sampler::Create({1.0f, -3}, 10, &s).message().find("top_k: expected >= 0, given -3"),
            std::string::npos);
  EXPECT_NE(Sampler::Create({1.0f, 0, 0.0f}, 10, &s).message().find("top_p"), std::string::npos);
  EXPECT_NE(Sampler::Create({1.0f, 0, 1.5f}, 10, &s).message().find("top_p"), std::string::npos);
  EXPECT_NE(Sampler::Create({}, 0, &s).message().find("vocab_size"), std::string::npos);
}

TEST(Sampler, TemperatureFollowsSoftmax) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t n = 12;
  const std::vector<float> logits = RandomLogits(rng, n, 1.0);
  for (float T : {0.5f, 1.0f, 2.0f}) {
    Sampler s = Make({T, 0, 1.0f, seed}, n);
    const int draws = 60000;
    std::vector<int> count(n, 0);
    for (int i = 0; i < draws; ++i) ++count[s.Sample(logits)];
    const float mx = *std::max_element(logits.begin(), logits.end());
    double total = 0.0;
    for (float l : logits) total += std::exp((l - mx) / T);
    for (int64_t i = 0; i < n; ++i) {
      const double p = std::exp((logits[i] - mx) / T) / total;
      const double sd = std::sqrt(p * (1 - p) / draws);
      EXPECT_NEAR(static_cast<double>(count[i]) / draws, p, 5 * sd + 1e-4)
          << "token " << i << " T=" << T;
    }
  }
}

TEST(Sampler, TopKAndTopPSupports) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (int64_t n : {7, 1000, 50280}) {
    // Small logit spread: the 0.95 nucleus of 50k tokens holds tens of thousands of them.
    const std::vector<float> logits = RandomLogits(rng, n, n > 1000 ? 0.5 : 2.0);
    for (int64_t k : {0, 1, 5, 300}) {
      for (float p : {1.0f, 0.95f, 0.5f}) {
        const float T = 0.8f;
        // The reference support: the top k by logit, then the nucleus of the renormalised top k.
        std::vector<float> masked = logits;
        if (k > 0 && k < n) {
          std::vector<float> sorted = logits;
          std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(),
                           std::greater<float>());
          const float kth = sorted[k - 1];
          for (auto& l : masked) {
            if (l < kth) l = -INFINITY;
          }
        }
        const std::set<int32_t> support =
            k == 1 ? std::set<int32_t>{static_cast<int32_t>(
                         std::max_element(logits.begin(), logits.end()) - logits.begin())}
                   : Nucleus(masked, T, p);
        Sampler s = Make({T, k, p, seed + k}, n);
        std::set<int32_t> seen;
        const int draws = n > 1000 ? 40 : 300;  // a 50k-token nucleus costs a sort per draw
        for (int i = 0; i < draws; ++i) {
          const int32_t id = s.Sample(logits);
          ASSERT_TRUE(support.count(id))
              << "token " << id << " outside the support, n=" << n << " k=" << k << " p=" << p;
          seen.insert(id);
        }
        // More than one token seen, unless one token of the support holds so much of its
        // probability that every draw landing on it is not a rare event (a small n with a
        // wide spread can put 99.9% on one token).
        double top = 0.0, total = 0.0;
        const float max_logit = *std::max_element(logits.begin(), logits.end());
        for (int32_t id : support) {
          const double w = std::exp((logits[id] - max_logit) / T);
          top = std::max(top, w);
          total += w;
        }
        if (std::pow(top / total, draws) < 1e-9) {
          EXPECT_GT(seen.size(), 1u) << "n=" << n << " k=" << k << " p=" << p;
        }
      }
    }
  }
}

TEST(Sampler, SameSeedSameTokens) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const std::vector<float> logits = RandomLogits(rng, 500, 1.0);
  Sampler a = Make({1.0f, 50, 0.9f, 77}, 500), b = Make({1.0f, 50, 0.9f, 77}, 500),
          c = Make({1.0f, 50, 0.9f, 78}, 500);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 100; ++i) {
    ta.push_back(a.Sample(logits));
    tb.push_back(b.Sample(logits));
    tc.push_back(c.Sample(logits));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Generate, GreedyMatchesTransformersAndStopsAtEos) {
  const std::string dir = std::string(SSMKIT_FIXTURES_DIR) + "/models/mamba2-hf";
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Load(dir, &model).ok());
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::Create(*model, 1, &session).ok());
  SafetensorsCheckpoint expected;
  ASSERT_TRUE(SafetensorsCheckpoint::OpenFile(dir + "/expected.safetensors", &expected).ok());
  auto ints = [&](const char* name) {
    const SafetensorsTensor* t = expected.Find(name);
    const int32_t* p = reinterpret_cast<const int32_t*>(t->data);
    return std::vector<int32_t>(p, p + t->numel());
  };
  const std::vector<int32_t> prompt = ints("p1.ids"), greedy = ints("p1.greedy_ids");
  GenerateOptions options;
  options.max_tokens = static_cast<int64_t>(greedy.size());
  std::vector<int32_t> got;
  GenerateStats stats;
  ASSERT_TRUE(Generate(
                  *session, prompt, options, [&](int32_t t) { got.push_back(t); }, &stats)
                  .ok());
  EXPECT_EQ(got, greedy);
  EXPECT_EQ(stats.prompt_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(stats.generated_tokens, static_cast<int64_t>(greedy.size()));
  EXPECT_FALSE(stats.stopped_at_eos);
  // With the third greedy token as end-of-text, generation stops right after producing it.
  options.eos_token_id = greedy[2];
  got.clear();
  ASSERT_TRUE(Generate(
                  *session, prompt, options, [&](int32_t t) { got.push_back(t); }, &stats)
                  .ok());
  const auto first = std::find(greedy.begin(), greedy.end(), greedy[2]);
  EXPECT_EQ(got, std::vector<int32_t>(greedy.begin(), first + 1));
  EXPECT_TRUE(stats.stopped_at_eos);
  options.max_tokens = -1;
  EXPECT_FALSE(Generate(*session, prompt, options, nullptr, &stats).ok());
}

}  // namespace
}  // namespace ssmkit::testing

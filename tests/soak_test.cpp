// A long decode through one session of the built-in model: no NaN or infinity at any step, the
// final logits equal (within a tolerance) those of one fresh prefill of the same tokens, and
// the process's resident memory flat after warm-up. The token count is SSMKIT_SOAK_TOKENS
// (default 20,000 in the test command; docs/benchmarks.md records a 1,000,000-token run).
// Tokens are drawn from the model's own greedy choices mixed with random ones, so the state
// sees both the text it expects and text it does not.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

int64_t ResidentKiB() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int64_t SoakTokens() {
  const char* env = std::getenv("SSMKIT_SOAK_TOKENS");
  const int64_t n = env != nullptr ? std::atoll(env) : 0;
  return n > 0 ? n : 20000;
}

TEST(Soak, LongDecodeStaysFiniteMatchesPrefillAndKeepsMemoryFlat) {
  std::string dir;
  ASSERT_TRUE(DefaultModelDir(&dir).ok());
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Load(dir, &model).ok());
  const int64_t V = model->config().vocab_size, n = SoakTokens();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);

  std::unique_ptr<Session> decoder;
  ASSERT_TRUE(Session::Create(*model, 1, &decoder).ok());
  std::vector<int32_t> tokens{static_cast<int32_t>(rng.Uniform(0, static_cast<double>(V) - 1))};
  std::vector<float> logits(static_cast<size_t>(V));
  ASSERT_TRUE(decoder->Prefill({tokens}, logits).ok());
  int64_t resident_warm = 0, non_finite_step = -1;
  for (int64_t step = 1; step < n; ++step) {
    int32_t next;
    if (rng.Uniform(0, 1) < 0.5) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      next = static_cast<int32_t>(rng.Uniform(0, static_cast<double>(V) - 1));
    }
    tokens.push_back(next);
    ASSERT_TRUE(decoder->Decode({&next, 1}, logits).ok()) << "step " << step;
    if (non_finite_step < 0) {
      for (float x : logits) {
        if (!std::isfinite(x)) non_finite_step = step;
      }
    }
    if (step == 1000) resident_warm = ResidentKiB();
  }
  EXPECT_EQ(non_finite_step, -1) << "the first step with a non-finite logit";
  // Flat: the token list (4 bytes a token) is the test's own growth; the engine adds nothing.
  const int64_t resident_end = ResidentKiB();
  const int64_t own_growth_kib = (n * 4) / 1024;
  EXPECT_LT(resident_end - resident_warm, own_growth_kib + 4 * 1024)
      << "resident KiB after warm-up " << resident_warm << ", at the end " << resident_end;

  // The same tokens in one prefill (the chunked scans, another summation order) from a fresh
  // state: the recurrence must not have drifted.
  std::unique_ptr<Session> fresh;
  ASSERT_TRUE(Session::Create(*model, 1, &fresh).ok());
  std::vector<float> prefill_logits(static_cast<size_t>(V));
  ASSERT_TRUE(fresh->Prefill({tokens}, prefill_logits).ok());
  double diff = 0.0, norm = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    diff += std::pow(static_cast<double>(logits[v]) - prefill_logits[v], 2);
    norm += std::pow(static_cast<double>(prefill_logits[v]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-3) << "after " << n << " tokens";
}

}  // namespace
}  // namespace ssmkit::testing

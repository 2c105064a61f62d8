// The engine and the C ABI from many threads at once (a server's requests, Python threads, BEAM
// schedulers), run by the release suite and by the ThreadSanitizer preset: models loaded on
// several threads at once; one shared model serving a session per thread, each thread's
// prefill + greedy decode giving the bits the same calls give alone; sessions handed from
// thread to thread between calls; and the C ABI's last error kept per thread.
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "ssmkit/model.hpp"
#include "ssmkit/ssmkit.h"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int kThreads = 6;
constexpr int kDecodeSteps = 12;

std::string Fixture(const char* name) {
  return std::string(SSMKIT_FIXTURES_DIR) + "/models/" + name;
}

// The logits of a prefill of `prompt` and kDecodeSteps greedy steps after it, concatenated.
std::vector<float> GreedyLogits(const Model& model, const std::vector<int32_t>& prompt) {
  std::unique_ptr<Session> session;
  EXPECT_TRUE(Session::Create(model, 1, &session).ok());
  const int64_t V = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V)), all;
  EXPECT_TRUE(session->Prefill({prompt}, logits).ok());
  for (int step = 0; step < kDecodeSteps; ++step) {
    all.insert(all.end(), logits.begin(), logits.end());
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    const int32_t token = static_cast<int32_t>(best);
    EXPECT_TRUE(session->Decode({&token, 1}, logits).ok());
  }
  all.insert(all.end(), logits.begin(), logits.end());
  return all;
}

std::vector<int32_t> Prompt(int i, int64_t V) {
  std::vector<int32_t> p;
  for (int k = 0; k < 5 + i; ++k) p.push_back(static_cast<int32_t>((k * 7 + i * 13) % V));
  return p;
}

class EngineThreads : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { SetNumThreads(2); }
  void TearDown() override { SetNumThreads(0); }
};

TEST_P(EngineThreads, SharedModelSessionPerThreadGivesTheLoneBits) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Load(Fixture(GetParam()), &model).ok());
  const int64_t V = model->config().vocab_size;
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < kThreads; ++i) alone.push_back(GreedyLogits(*model, Prompt(i, V)));
  std::vector<std::vector<float>> together(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 3; ++round) together[i] = GreedyLogits(*model, Prompt(i, V));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(together[i], alone[i]) << "thread " << i;
}

TEST_P(EngineThreads, ModelsLoadOnManyThreadsAtOnce) {
  std::vector<std::unique_ptr<Model>> models(kThreads);
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { ok[i] = Model::Load(Fixture(GetParam()), &models[i]).ok(); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) ASSERT_TRUE(ok[i]) << "thread " << i;
  const int64_t V = models[0]->config().vocab_size;
  const std::vector<float> first = GreedyLogits(*models[0], Prompt(0, V));
  for (int i = 1; i < kThreads; ++i) EXPECT_EQ(GreedyLogits(*models[i], Prompt(0, V)), first);
}

// One caller at a time, but not always the same thread (a server's worker pool).
TEST_P(EngineThreads, SessionMovesBetweenThreads) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Load(Fixture(GetParam()), &model).ok());
  const int64_t V = model->config().vocab_size;
  const std::vector<float> expected = GreedyLogits(*model, Prompt(1, V));
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::Create(*model, 1, &session).ok());
  std::vector<float> logits(static_cast<size_t>(V)), all;
  std::thread([&] { EXPECT_TRUE(session->Prefill({Prompt(1, V)}, logits).ok()); }).join();
  for (int step = 0; step < kDecodeSteps; ++step) {
    all.insert(all.end(), logits.begin(), logits.end());
    const int32_t token =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::thread([&] { EXPECT_TRUE(session->Decode({&token, 1}, logits).ok()); }).join();
  }
  all.insert(all.end(), logits.begin(), logits.end());
  EXPECT_EQ(all, expected);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineThreads,
                         ::testing::Values("mamba1-hf", "mamba2-hf", "granitemoehybrid-moe",
                                           "zamba2"));

// ssmkit_last_error is per thread: a thread's failure never shows in another's message.
TEST(CapiThreads, LastErrorIsPerThread) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const std::string dir = "/no/such/model/" + std::to_string(i);
      for (int round = 0; round < 50; ++round) {
        ssmkit_model* model = nullptr;
        if (ssmkit_model_load(dir.c_str(), &model) == SSMKIT_OK) wrong.fetch_add(1);
        const std::string message = ssmkit_last_error();
        if (message.find(dir) == std::string::npos) wrong.fetch_add(1);
        std::this_thread::yield();
        if (std::string(ssmkit_last_error()) != message) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace ssmkit::testing

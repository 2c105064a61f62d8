// The continuous-batching scheduler on the built-in model (greedy, byte tokens): requests that
// join and leave the batch at different steps, with prompts longer than a prefill chunk, get the
// text the engine's Generate (what `ssmkit generate` runs) gives each alone; a cancelled
// request frees its slot; the queue refuses past its limit and a draining scheduler refuses
// all; Stop fails what is left with 503; a prompt that extends a cached prefix restores it and
// continues identically; stop strings, EOS and max_tokens end a request as OpenAI's do.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/scheduler.hpp"
#include "ssmkit/generate.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::server {
namespace {

using namespace std::chrono_literals;

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetNumThreads(1);  // the texts are compared; one thread keeps the shared CI cores calm
    std::string dir;
    ASSERT_TRUE(DefaultModelDir(&dir).ok());
    ASSERT_TRUE(Model::Load(dir, &model_).ok());
    tokenizer_ = Tokenizer::Bytes();
  }
  static void TearDownTestSuite() {
    model_.reset();
    SetNumThreads(0);
  }

  std::unique_ptr<Scheduler> Make(int64_t slots, int64_t queue, int64_t chunk, int64_t cache_mb) {
    SchedulerOptions o;
    o.slots = slots;
    o.max_queue = queue;
    o.prefill_chunk = chunk;
    o.state_cache_bytes = cache_mb << 20;
    std::unique_ptr<Scheduler> s;
    const Status st = Scheduler::Create(*model_, *tokenizer_, o, &metrics_, &s);
    EXPECT_TRUE(st.ok()) << st.message();
    return s;
  }

  static std::shared_ptr<RequestState> Job(const std::string& prompt, int64_t max_tokens,
                                           std::vector<std::string> stop = {}) {
    GenerationJob job;
    for (unsigned char c : prompt) job.prompt.push_back(c);
    job.max_tokens = max_tokens;
    job.stop = std::move(stop);
    return std::make_shared<RequestState>(std::move(job));
  }

  // Everything a request produced, once it finished.
  static RequestUpdate Wait(RequestState& r) {
    RequestUpdate all, u;
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (!all.finished && std::chrono::steady_clock::now() < deadline) {
      if (!r.Take(100ms, &u)) continue;
      all.text += u.text;
      all.finished = u.finished;
      all.finish_reason = u.finish_reason;
      all.error = u.error;
      all.completion_tokens = u.completion_tokens;
      all.cached_tokens = u.cached_tokens;
    }
    EXPECT_TRUE(all.finished) << "timed out";
    return all;
  }

  // The engine's own greedy continuation, as `ssmkit generate` prints it.
  static std::string Alone(const std::string& prompt, int64_t max_tokens) {
    std::unique_ptr<Session> session;
    EXPECT_TRUE(Session::Create(*model_, 1, &session).ok());
    std::vector<int32_t> ids;
    for (unsigned char c : prompt) ids.push_back(c);
    GenerateOptions o;
    o.max_tokens = max_tokens;
    TokenTextStream stream(*tokenizer_, true);
    std::string text;
    GenerateStats stats;
    EXPECT_TRUE(Generate(
                    *session, ids, o, [&](int32_t id) { text += stream.Push(id); }, &stats)
                    .ok());
    return text + stream.Finish();
  }

  static std::unique_ptr<Model> model_;
  static std::unique_ptr<Tokenizer> tokenizer_;
  Metrics metrics_;
};

std::unique_ptr<Model> SchedulerTest::model_;
std::unique_ptr<Tokenizer> SchedulerTest::tokenizer_;

TEST_F(SchedulerTest, BatchingChangesNothing) {
  // Prompts of 1 to 70 bytes with a prefill chunk of 16: long ones prefill over several steps
  // while others decode; 10 requests through 4 slots join and leave at different steps.
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"And", 20},
      {"In the beginning God created the heaven and the earth. And the earth was", 30},
      {"T", 5},
      {"The LORD is my shepherd; I shall not want.", 25},
      {"Blessed are the", 12},
      {"And it came to pass, when men began to multiply on the face of the earth", 18},
      {"Now", 33},
      {"Behold, I", 8},
      {"Thus saith the LORD of hosts", 21},
      {"And he said", 16},
  };
  auto scheduler = Make(4, 16, 16, 0);
  std::vector<std::shared_ptr<RequestState>> requests;
  for (const auto& [prompt, n] : cases) {
    requests.push_back(Job(prompt, n));
    ASSERT_EQ(scheduler->Submit(requests.back()), Scheduler::Admission::kAccepted);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const RequestUpdate u = Wait(*requests[i]);
    EXPECT_EQ(u.text, Alone(cases[i].first, cases[i].second)) << cases[i].first;
    EXPECT_EQ(u.finish_reason, "length");
    EXPECT_EQ(u.completion_tokens, cases[i].second);
  }
  EXPECT_TRUE(scheduler->Idle());
}

TEST_F(SchedulerTest, CancelledRequestFreesItsSlot) {
  auto scheduler = Make(1, 4, 64, 0);
  auto a = Job("And God said", 100000);
  ASSERT_EQ(scheduler->Submit(a), Scheduler::Admission::kAccepted);
  RequestUpdate u;
  while (!a->Take(100ms, &u) || u.text.empty()) {
  }
  a->Cancel();
  auto b = Job("Now", 4);
  ASSERT_EQ(scheduler->Submit(b), Scheduler::Admission::kAccepted);
  EXPECT_EQ(Wait(*b).text, Alone("Now", 4));
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!scheduler->Idle() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(scheduler->Idle());
}

TEST_F(SchedulerTest, QueueLimitDrainAndStop) {
  auto scheduler = Make(1, 1, 64, 0);
  auto running = Job("And", 100000), queued = Job("The", 100000);
  ASSERT_EQ(scheduler->Submit(running), Scheduler::Admission::kAccepted);
  ASSERT_EQ(scheduler->Submit(queued), Scheduler::Admission::kAccepted);
  EXPECT_EQ(scheduler->Submit(Job("x", 1)), Scheduler::Admission::kQueueFull);
  scheduler->Drain();
  EXPECT_EQ(scheduler->Submit(Job("x", 1)), Scheduler::Admission::kDraining);
  scheduler->Stop();
  for (auto* r : {running.get(), queued.get()}) {
    const RequestUpdate u = Wait(*r);
    ASSERT_TRUE(u.error.has_value());
    EXPECT_EQ(u.error->http_status, 503);
  }
}

TEST_F(SchedulerTest, PrefixCacheRestoresAndContinuesIdentically) {
  auto cached = Make(2, 4, 32, 64);
  const std::string prefix =
      "In the beginning God created the heaven and the earth. And the earth was without form, ";
  const std::string prompt = prefix + "and void";
  EXPECT_EQ(Wait(*[&] {
              auto r = Job(prefix, 3);
              EXPECT_EQ(cached->Submit(r), Scheduler::Admission::kAccepted);
              return r;
            }())
                .cached_tokens,
            0);
  auto again = Job(prompt, 40);
  ASSERT_EQ(cached->Submit(again), Scheduler::Admission::kAccepted);
  const RequestUpdate u = Wait(*again);
  EXPECT_EQ(u.cached_tokens, static_cast<int64_t>(prefix.size()));
  EXPECT_EQ(u.text, Alone(prompt, 40));
  // The whole prompt cached (with its logits): nothing to prefill, the same text.
  auto third = Job(prompt, 40);
  ASSERT_EQ(cached->Submit(third), Scheduler::Admission::kAccepted);
  const RequestUpdate v = Wait(*third);
  EXPECT_EQ(v.cached_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(v.text, u.text);
}

TEST_F(SchedulerTest, StopStringsEosAndLength) {
  auto scheduler = Make(2, 4, 64, 0);
  const std::string full = Alone("And God said", 120);
  const size_t at = full.find("LORD");
  ASSERT_NE(at, std::string::npos) << full;
  auto stopped = Job("And God said", 120, {"LORD"});
  ASSERT_EQ(scheduler->Submit(stopped), Scheduler::Admission::kAccepted);
  const RequestUpdate u = Wait(*stopped);
  EXPECT_EQ(u.text, full.substr(0, at));
  EXPECT_EQ(u.finish_reason, "stop");
  // The model's first generated byte as the end-of-sequence token: generation ends there, and
  // its text is not sent.
  GenerationJob job;
  for (unsigned char c : std::string("And God said")) job.prompt.push_back(c);
  job.max_tokens = 50;
  job.eos_token_id = static_cast<unsigned char>(full[0]);
  auto eos = std::make_shared<RequestState>(job);
  ASSERT_EQ(scheduler->Submit(eos), Scheduler::Admission::kAccepted);
  const RequestUpdate e = Wait(*eos);
  EXPECT_EQ(e.text, "");
  EXPECT_EQ(e.finish_reason, "stop");
  EXPECT_EQ(e.completion_tokens, 1);
}

}  // namespace
}  // namespace ssmkit::server

// One generation request between the HTTP thread that answers it and the scheduler thread
// that runs it: the job (prompt, limits, sampling), and the output accumulated since the
// HTTP thread last looked (text, logprobs, the end). The HTTP thread may cancel it at any time
// (a client that went away); the scheduler drops it at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.hpp"
#include "ssmkit/sampler.hpp"

namespace ssmkit::server {

using Clock = std::chrono::steady_clock;

struct GenerationJob {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_tokens = 16;      // >= 1
  SamplerOptions sampling;
  std::vector<std::string> stop;
  int top_logprobs = -1;      // -1: no logprobs; else the top n alternatives (n <= 5)
  int32_t eos_token_id = -1;  // generation ends after it (its text is not sent); -1: none
};

// The log-probability of a generated token under the model's distribution (the softmax of the
// logits, before temperature and filtering), and the n most likely alternatives.
struct TokenLogprob {
  std::string bytes;  // the token's bytes (special tokens included), maybe not UTF-8 alone
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // (bytes, logprob), most likely first
};

// Everything that happened since the last Take.
struct RequestUpdate {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  std::string finish_reason;  // "stop" (EOS or a stop string) or "length", when finished
  std::optional<ApiError> error;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from the prefix state cache
};

class RequestState {
 public:
  explicit RequestState(GenerationJob job) : job_(std::move(job)), arrival_(Clock::now()) {}

  const GenerationJob& job() const { return job_; }
  Clock::time_point arrival() const { return arrival_; }

  // HTTP side. Waits up to `timeout` for news; true with *update holding it (the text and
  // logprobs since the last call, and the end once it came).
  bool Take(std::chrono::milliseconds timeout, RequestUpdate* update);
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Scheduler side.
  void SetCachedTokens(int64_t n);
  void Append(const std::string& text, TokenLogprob* logprob, int64_t completion_tokens);
  void Finish(const std::string& text, const char* reason, int64_t completion_tokens);
  void Fail(ApiError error);

 private:
  const GenerationJob job_;
  const Clock::time_point arrival_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable news_;
  RequestUpdate pending_;  // guarded by mu_
  bool has_news_ = false;
};

}  // namespace ssmkit::server

#include "server/request_state.hpp"

namespace ssmkit::server {

bool RequestState::Take(std::chrono::milliseconds timeout, RequestUpdate* update) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!news_.wait_for(lock, timeout, [this] { return has_news_; })) return false;
  *update = std::move(pending_);
  pending_ = RequestUpdate{};
  // The counts stay: every update carries the usage so far.
  pending_.prompt_tokens = update->prompt_tokens;
  pending_.completion_tokens = update->completion_tokens;
  pending_.cached_tokens = update->cached_tokens;
  has_news_ = false;
  return true;
}

void RequestState::SetCachedTokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.prompt_tokens = static_cast<int64_t>(job_.prompt.size());
  pending_.cached_tokens = n;
}

void RequestState::Append(const std::string& text, TokenLogprob* logprob,
                          int64_t completion_tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.text += text;
    if (logprob != nullptr) pending_.logprobs.push_back(std::move(*logprob));
    pending_.prompt_tokens = static_cast<int64_t>(job_.prompt.size());
    pending_.completion_tokens = completion_tokens;
    has_news_ = true;
  }
  news_.notify_one();
}

void RequestState::Finish(const std::string& text, const char* reason, int64_t completion_tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.text += text;
    pending_.finished = true;
    pending_.finish_reason = reason;
    pending_.prompt_tokens = static_cast<int64_t>(job_.prompt.size());
    pending_.completion_tokens = completion_tokens;
    has_news_ = true;
  }
  news_.notify_one();
}

void RequestState::Fail(ApiError error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.finished = true;
    pending_.error = std::move(error);
    has_news_ = true;
  }
  news_.notify_one();
}

}  // namespace ssmkit::server

#include "ssmkit/generate.hpp"

#include <algorithm>
#include <chrono>
#include <new>
#include <string>

namespace ssmkit {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Status Generator::Start(Session& session, const std::vector<int32_t>& prompt,
                        const GenerateOptions& options) {
  finished_ = true;
  if (options.max_tokens < 0) {
    return Status::InvalidArgument("generate: max_tokens: expected >= 0, given " +
                                   std::to_string(options.max_tokens));
  }
  stats_ = GenerateStats{};
  stats_.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (options.max_tokens == 0) return Status::Ok();
  const int64_t V = session.vocab_size();
  sampled_vocab_ = std::min<int64_t>(V, session.config_vocab_size());
  SSMKIT_RETURN_IF_ERROR(Sampler::Create(options.sampling, sampled_vocab_, &sampler_));
  try {
    logits_.resize(static_cast<size_t>(V));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("generate: out of memory");
  }
  const auto t0 = Clock::now();
  SSMKIT_RETURN_IF_ERROR(session.Prefill({prompt}, logits_));
  stats_.prefill_seconds = SecondsSince(t0);
  session_ = &session;
  options_ = options;
  finished_ = false;
  return Status::Ok();
}

Status Generator::Next(int32_t* token, bool* done) {
  if (finished_) {
    *done = true;
    return Status::Ok();
  }
  const auto t0 = Clock::now();
  const SamplerOptions& o = options_.sampling;
  // Greedy decode steps take the argmax in the session (on the GPU for a CUDA session: only
  // the id comes back); the first token and sampling read the logits.
  const bool greedy = stats_.generated_tokens > 0 && (o.temperature == 0.0f || o.top_k == 1);
  if (greedy) {
    int32_t next = -1;
    const Status s = session_->DecodeGreedy(std::span<const int32_t>(&last_token_, 1),
                                            std::span<int32_t>(&next, 1));
    if (!s.ok()) {
      finished_ = true;
      return s;
    }
    last_token_ = next;
  } else {
    if (stats_.generated_tokens > 0) {
      const Status s = session_->Decode(std::span<const int32_t>(&last_token_, 1), logits_);
      if (!s.ok()) {
        finished_ = true;
        return s;
      }
    }
    last_token_ = sampler_.Sample(std::span<const float>(logits_).first(sampled_vocab_));
  }
  // The first token's sampling counts with the prefill that produced its logits.
  (stats_.generated_tokens == 0 ? stats_.prefill_seconds : stats_.decode_seconds) +=
      SecondsSince(t0);
  ++stats_.generated_tokens;
  if (last_token_ == options_.eos_token_id) {
    stats_.stopped_at_eos = true;
    finished_ = true;
  }
  if (stats_.generated_tokens >= options_.max_tokens) finished_ = true;
  *token = last_token_;
  *done = false;
  return Status::Ok();
}

Status Generate(Session& session, const std::vector<int32_t>& prompt,
                const GenerateOptions& options, const std::function<void(int32_t)>& on_token,
                GenerateStats* stats) {
  Generator generator;
  Status status = generator.Start(session, prompt, options);
  for (bool done = !status.ok(); !done;) {
    int32_t token = -1;
    status = generator.Next(&token, &done);
    if (!status.ok()) break;
    if (!done && on_token) on_token(token);
  }
  *stats = generator.stats();
  return status;
}

Status StartFromBeginningOfText(const ModelConfig& config, std::vector<int32_t>* prompt) {
  if (!prompt->empty()) return Status::Ok();
  const int64_t start = config.bos_token_id >= 0 ? config.bos_token_id : config.eos_token_id;
  if (start < 0) {
    return Status::InvalidArgument(
        "generate: the prompt is empty and the model names no bos or eos token to start from");
  }
  prompt->push_back(static_cast<int32_t>(start));
  return Status::Ok();
}

}  // namespace ssmkit

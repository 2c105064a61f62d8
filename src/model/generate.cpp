#include "ssmkit/generate.hpp"

#include <algorithm>
#include <chrono>
#include <new>
#include <string>

namespace ssmkit {

Status Generate(Session& session, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                const std::function<void(int32_t)>& on_token, GenerateStats* stats) {
  using Clock = std::chrono::steady_clock;
  if (options.max_tokens < 0) {
    return Status::InvalidArgument("generate: max_tokens: expected >= 0, given " + std::to_string(options.max_tokens));
  }
  *stats = GenerateStats{};
  stats->prompt_tokens = static_cast<int64_t>(prompt.size());
  if (options.max_tokens == 0) return Status::Ok();
  const int64_t V = session.vocab_size();
  const int64_t sampled = std::min<int64_t>(V, session.config_vocab_size());
  Sampler sampler;
  SSMKIT_RETURN_IF_ERROR(Sampler::Create(options.sampling, sampled, &sampler));
  std::vector<float> logits;
  try {
    logits.resize(static_cast<size_t>(V));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("generate: out of memory");
  }
  const auto t0 = Clock::now();
  SSMKIT_RETURN_IF_ERROR(session.Prefill({prompt}, logits));
  int32_t token = sampler.Sample(std::span<const float>(logits).first(sampled));
  const auto t1 = Clock::now();
  stats->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (;;) {
    ++stats->generated_tokens;
    if (on_token) on_token(token);
    if (token == options.eos_token_id) {
      stats->stopped_at_eos = true;
      break;
    }
    if (stats->generated_tokens >= options.max_tokens) break;
    SSMKIT_RETURN_IF_ERROR(session.Decode(std::span<const int32_t>(&token, 1), logits));
    token = sampler.Sample(std::span<const float>(logits).first(sampled));
  }
  stats->decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return Status::Ok();
}

}  // namespace ssmkit

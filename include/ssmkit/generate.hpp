// Text generation: prefill a prompt, then decode one token at a time, sampling each, until the
// end-of-sequence token or a token limit; each token is handed to a callback as it is produced
// (for streaming), with the time spent in prefill and decode.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ssmkit/model.hpp"
#include "ssmkit/sampler.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit {

struct GenerateOptions {
  int64_t max_tokens = 128;   // new tokens at most (>= 0)
  int32_t eos_token_id = -1;  // stop after producing it (-1: never)
  SamplerOptions sampling;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0.0;  // the prompt's prefill and the first token's sampling
  double decode_seconds = 0.0;   // the decode steps for the remaining tokens
  bool stopped_at_eos = false;
};

// Generation one token at a time, for callers that stream and may stop early (the C ABI's
// callback, Python's iterator); Generate below is a loop over it. Start prefills the prompt;
// each Next samples one token (decoding the previous one first). Tokens are sampled from the
// first config_vocab_size logits (padding rows of a padded vocabulary are never produced).
// The Session (batch 1 while generating) must outlive the Generator and not be used by
// anything else until generation ends.
class Generator {
 public:
  // Checks the options (max_tokens >= 0, the sampling options) and prefills `prompt`.
  Status Start(Session& session, const std::vector<int32_t>& prompt,
               const GenerateOptions& options);
  // The next token, with *done = false; or *done = true and no token once max_tokens have been
  // produced, the last one was the end-of-sequence token, or Start failed or was not called.
  Status Next(int32_t* token, bool* done);
  // True once the last token has been returned (Next would give *done = true).
  bool finished() const { return finished_; }
  const GenerateStats& stats() const { return stats_; }

 private:
  Session* session_ = nullptr;
  GenerateOptions options_;
  Sampler sampler_;
  std::vector<float> logits_;  // (V)
  int64_t sampled_vocab_ = 0;
  int32_t last_token_ = -1;
  bool finished_ = true;
  GenerateStats stats_;
};

// Runs a Generator to the end, handing each token to on_token (which may be empty).
Status Generate(Session& session, const std::vector<int32_t>& prompt,
                const GenerateOptions& options, const std::function<void(int32_t)>& on_token,
                GenerateStats* stats);

// The prompt a model starts from when given no text: an empty `prompt` becomes its
// beginning-of-text token (the end-of-text token when it names none), as the checkpoints were
// trained; a non-empty one is left as it is. Fails when it is empty and the model names neither.
Status StartFromBeginningOfText(const ModelConfig& config, std::vector<int32_t>* prompt);

}  // namespace ssmkit

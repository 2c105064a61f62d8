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
  int64_t max_tokens = 128;  // new tokens at most (>= 0)
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

// Tokens are sampled from the first config_vocab_size logits (padding rows of a padded
// vocabulary are never produced). on_token may be empty.
Status Generate(Session& session, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                const std::function<void(int32_t)>& on_token, GenerateStats* stats);

}  // namespace ssmkit

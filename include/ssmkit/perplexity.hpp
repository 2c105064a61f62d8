// Perplexity of a model on a token sequence, measured as llama.cpp's llama-perplexity does, so
// that the two engines' figures on one file compare: the tokens are cut into chunks of
// `context` tokens, each chunk runs from a fresh state, and only the second half of each chunk
// is scored (the logits at position j against token j + 1, for j from context / 2 to
// context - 2), so that every scored token has at least context / 2 tokens before it. Unlike
// llama-perplexity, no beginning-of-text token is put in front of a chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit {

struct PerplexityOptions {
  int64_t context = 512;   // tokens per chunk (>= 3)
  int64_t max_chunks = 0;  // chunks scored at most (0: every whole chunk of the tokens)
  int64_t batch = 1;       // chunks run together in one prefill (>= 1)
};

struct PerplexityResult {
  int64_t chunks = 0;              // chunks scored
  int64_t scored_tokens = 0;       // chunks * (context - 1 - context / 2)
  double mean_nll = 0.0;           // nats per scored token: -log p(token | the chunk before it)
  double nll_stderr = 0.0;         // standard error of mean_nll (over the scored tokens)
  double perplexity = 0.0;         // exp(mean_nll)
  double perplexity_stderr = 0.0;  // perplexity * nll_stderr (first order)
};

// Scores `tokens` (ids < the model's vocab_size; at least one whole chunk) with `model`. The
// softmax runs over all vocab_size logits, as transformers' loss does. on_chunk, when given,
// is called after each chunk with the chunks done and the perplexity so far.
Status Perplexity(const Model& model, std::span<const int32_t> tokens,
                  const PerplexityOptions& options, PerplexityResult* result,
                  const std::function<void(int64_t chunks, double perplexity)>& on_chunk = {});

}  // namespace ssmkit

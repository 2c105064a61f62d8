// Choosing the next token from logits: greedy, or sampling with temperature, top-k and top-p
// (nucleus), seeded. The filters apply in the order transformers' logits warpers do:
// temperature, then top-k (the k largest logits), then top-p (the smallest set of the most
// likely remaining tokens whose probability reaches p, at least one), then a draw from the
// renormalised probabilities. Greedy (temperature 0, or top_k 1) takes the largest logit, the
// first on ties. Allocation-free after construction; deterministic for a given seed.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // 1: no top-p filter; in (0, 1]
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Checks the options (temperature >= 0 and finite, top_k >= 0, 0 < top_p <= 1).
  static Status Create(const SamplerOptions& options, int64_t vocab_size, Sampler* sampler);

  // A token in [0, logits.size()); logits.size() <= the vocab_size given to Create. NaN logits
  // are never chosen (an all-NaN row gives token 0).
  int32_t Sample(std::span<const float> logits);

  const SamplerOptions& options() const { return options_; }

 private:
  int32_t Greedy(std::span<const float> logits) const;
  // Puts the m largest logits' ids among order_[0, within) first, sorted largest first.
  void SortLargest(std::span<const float> logits, int64_t m, int64_t within);

  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // candidate ids
  std::vector<double> probs_;   // their probabilities, in order_'s order
};

}  // namespace ssmkit

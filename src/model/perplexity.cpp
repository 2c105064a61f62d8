// Perplexity (include/ssmkit/perplexity.hpp): chunks prefilled `batch` at a time with every
// position's logits, the second half of each chunk scored in double precision.
#include "ssmkit/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/parallel.hpp"

namespace ssmkit {
namespace {

// -log softmax(row)[target], in double: the row's maximum is subtracted before exp.
double NegativeLogLikelihood(const float* row /* (V) */, int64_t V, int32_t target) {
  const float max = *std::max_element(row, row + V);
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - max));
  return std::log(sum) - static_cast<double>(row[target] - max);
}

Status CheckOptions(const PerplexityOptions& o, int64_t n_tokens) {
  auto bad = [](const char* name, int64_t given, const std::string& expected) {
    return Status::InvalidArgument(std::string("perplexity: ") + name + ": expected " + expected +
                                   ", given " + std::to_string(given));
  };
  if (o.context < 3) return bad("context", o.context, ">= 3");
  if (o.max_chunks < 0) return bad("max_chunks", o.max_chunks, ">= 0 (0: all)");
  if (o.batch < 1) return bad("batch", o.batch, ">= 1");
  if (n_tokens < o.context) {
    return Status::InvalidArgument("perplexity: tokens: expected at least one chunk of context " +
                                   std::to_string(o.context) + " tokens, given " +
                                   std::to_string(n_tokens));
  }
  return Status::Ok();
}

}  // namespace

Status Perplexity(const Model& model, std::span<const int32_t> tokens,
                  const PerplexityOptions& options, PerplexityResult* result,
                  const std::function<void(int64_t, double)>& on_chunk) {
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  SSMKIT_RETURN_IF_ERROR(CheckOptions(options, n_tokens));
  const int64_t L = options.context;
  int64_t chunks = n_tokens / L;
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
  const int64_t B = std::min(options.batch, chunks);
  const int64_t V = model.config().vocab_size;
  for (int64_t i = 0; i < chunks * L; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return Status::InvalidArgument("perplexity: tokens[" + std::to_string(i) + "]: expected an " +
                                     "id in [0, " + std::to_string(V) + "), given " +
                                     std::to_string(tokens[i]));
    }
  }
  std::unique_ptr<Session> session;
  SSMKIT_RETURN_IF_ERROR(Session::Create(model, B, &session));
  const int64_t first = L / 2;           // the first scored position
  const int64_t scored = L - 1 - first;  // positions first .. L-2 predict tokens first+1 .. L-1
  std::vector<float> logits, all_logits;
  std::vector<double> nll;  // (chunks * scored)
  try {
    logits.resize(static_cast<size_t>(B * V));
    all_logits.resize(static_cast<size_t>(B * L * V));
    nll.resize(static_cast<size_t>(chunks * scored));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("perplexity: out of memory for " + std::to_string(B) + " x " +
                               std::to_string(L) + " x " + std::to_string(V) + " logits");
  }
  double total = 0.0;
  for (int64_t c0 = 0; c0 < chunks; c0 += B) {
    const int64_t b_count = std::min(B, chunks - c0);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t b = 0; b < b_count; ++b) {
      const int32_t* chunk = tokens.data() + (c0 + b) * L;
      prompts.emplace_back(chunk, chunk + L);
    }
    SSMKIT_RETURN_IF_ERROR(session->Prefill(prompts, logits, all_logits));
    ParallelFor(b_count * scored, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / scored, j = first + i % scored;
        nll[static_cast<size_t>((c0 + b) * scored + i % scored)] = NegativeLogLikelihood(
            all_logits.data() + (b * L + j) * V, V, prompts[static_cast<size_t>(b)][j + 1]);
      }
    });
    for (int64_t i = c0 * scored; i < (c0 + b_count) * scored; ++i) total += nll[i];
    if (on_chunk) on_chunk(c0 + b_count, std::exp(total / ((c0 + b_count) * scored)));
  }
  const double n = static_cast<double>(chunks * scored);
  const double mean = total / n;
  double squares = 0.0;
  for (double x : nll) squares += (x - mean) * (x - mean);
  PerplexityResult r;
  r.chunks = chunks;
  r.scored_tokens = chunks * scored;
  r.mean_nll = mean;
  r.nll_stderr = n > 1 ? std::sqrt(squares / (n - 1) / n) : 0.0;
  r.perplexity = std::exp(mean);
  r.perplexity_stderr = r.perplexity * r.nll_stderr;
  *result = r;
  return Status::Ok();
}

}  // namespace ssmkit

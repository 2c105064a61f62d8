#include "perplexity_command.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "model_args.hpp"
#include "ssmkit/perplexity.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::cli {
namespace {

struct PerplexityArgs {
  std::string model, data, tokenizer;
  PerplexityOptions options;
  bool json = false;
};

int RunPerplexity(PerplexityArgs a) {
  if (!ResolveModel("perplexity", &a.model)) return 2;
  std::string text;
  Status s = ReadTextFile(a.data, &text);
  if (!s.ok()) return Fail(Status(s.code(), "--data " + s.message()));
  std::unique_ptr<Model> model;
  s = Model::Load(a.model, &model);
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Tokenizer> tokenizer;
  s = OpenTokenizer(a.tokenizer, a.model, *model, &tokenizer);
  if (!s.ok()) return Fail(s);
  std::vector<int32_t> tokens;
  s = tokenizer->Encode(text, &tokens);
  if (!s.ok()) return Fail(s);
  const auto t0 = std::chrono::steady_clock::now();
  PerplexityResult r;
  bool progress_printed = false;  // "[chunks]perplexity" after each batch, as llama-perplexity
  s = Perplexity(*model, tokens, a.options, &r, [&](int64_t chunks, double ppl) {
    if (a.json) return;
    std::fprintf(stderr, "[%lld]%.4f ", static_cast<long long>(chunks), ppl);
    progress_printed = true;
  });
  if (progress_printed) std::fprintf(stderr, "\n");
  if (!s.ok()) return Fail(s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens_per_s = static_cast<double>(r.chunks * a.options.context) / seconds;
  if (a.json) {
    const nlohmann::json row = {{"model", a.model},
                                {"data", a.data},
                                {"weights", model->weight_dtype_name()},
                                {"text_tokens", tokens.size()},
                                {"context", a.options.context},
                                {"chunks", r.chunks},
                                {"scored_tokens", r.scored_tokens},
                                {"mean_nll", r.mean_nll},
                                {"nll_stderr", r.nll_stderr},
                                {"perplexity", r.perplexity},
                                {"perplexity_stderr", r.perplexity_stderr},
                                {"seconds", seconds},
                                {"tokens_per_s", tokens_per_s},
                                {"threads", NumThreads()}};
    std::printf("%s\n", row.dump(1).c_str());
    return 0;
  }
  std::printf(
      "perplexity: %.4f +/- %.4f (%lld chunks of %lld tokens, %lld tokens scored; %.4f nats, "
      "%.4f bits per token)\n",
      r.perplexity, r.perplexity_stderr, static_cast<long long>(r.chunks),
      static_cast<long long>(a.options.context), static_cast<long long>(r.scored_tokens),
      r.mean_nll, r.mean_nll / std::log(2.0));
  std::fprintf(stderr, "%s weights, %.1f s (%.1f tokens/s), %d threads\n",
               model->weight_dtype_name().c_str(), seconds, tokens_per_s, NumThreads());
  return 0;
}

}  // namespace

void AddPerplexityCommand(CLI::App& app, const int& threads, int& exit_code) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* sub = app.add_subcommand(
      "perplexity",
      "a checkpoint's perplexity on a text file, scored as llama.cpp's llama-perplexity does: "
      "chunks of --ctx tokens from a fresh state, the second half of each scored");
  sub->add_option("--model", args->model,
                  "checkpoint directory or .gguf file; default: the built-in models/default");
  sub->add_option("--data", args->data, "the text file")->required();
  sub->add_option("--ctx", args->options.context, "tokens per chunk (default 512)")
      ->check(CLI::Range(int64_t{3}, int64_t{1} << 20));
  sub->add_option("--chunks", args->options.max_chunks, "chunks scored at most (0 = all)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--batch", args->options.batch, "chunks run together (default 1)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json, or 'bytes' (default: the model's own)");
  sub->add_flag("--json", args->json, "print one JSON object instead of text");
  sub->callback([args, &threads, &exit_code] {
    SetNumThreads(threads);
    exit_code = RunPerplexity(*args);
  });
}

}  // namespace ssmkit::cli

// `ssmkit generate` and `ssmkit info`: the engine on a checkpoint directory.
#include "engine_commands.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model_args.hpp"
#include "ssmkit/generate.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/threads.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, tokenizer;
  std::string device = "cpu";
  int64_t max_tokens = 128;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool print_ids = false;
};

// One line on stderr, "label: 1 2 3": token ids that have no text of their own (a random
// model's, or ids past the tokenizer's vocabulary) can be compared with another engine's.
void PrintIds(const char* label, const std::vector<int32_t>& ids) {
  std::fprintf(stderr, "%s:", label);
  for (int32_t id : ids) std::fprintf(stderr, " %d", id);
  std::fprintf(stderr, "\n");
}

int RunGenerate(GenerateArgs a) {
  if (!ResolveModel("generate", &a.model)) return 2;
  std::unique_ptr<Model> model;
  Status s = Model::Load(a.model, &model);
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Tokenizer> tokenizer;
  s = OpenTokenizer(a.tokenizer, a.model, *model, &tokenizer);
  if (!s.ok()) return Fail(s);
  std::vector<int32_t> prompt;
  s = tokenizer->Encode(a.prompt, &prompt);
  if (!s.ok()) return Fail(s);
  tokenizer->AddSpecialTokens(&prompt);  // the tokenizer's template (a start token), if any
  const ModelConfig& c = model->config();
  s = StartFromBeginningOfText(c, &prompt);
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Session> session;
  SessionOptions session_options;
  session_options.device = a.device == "cuda" ? Device::kCuda : Device::kCpu;
  s = Session::Create(*model, session_options, &session);
  if (!s.ok()) return Fail(s);
  GenerateOptions options;
  options.max_tokens = a.max_tokens;
  options.eos_token_id = a.ignore_eos ? -1 : static_cast<int32_t>(c.eos_token_id);
  options.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  Sampler check;  // bad sampling options fail before anything is printed
  s = Sampler::Create(options.sampling, 1, &check);
  if (!s.ok()) return Fail(s);
  std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
  std::fflush(stdout);
  TokenTextStream stream(*tokenizer, /*skip_special=*/true);
  auto write = [](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  GenerateStats stats;
  std::vector<int32_t> generated;
  s = Generate(
      *session, prompt, options,
      [&](int32_t id) {
        write(stream.Push(id));
        if (a.print_ids) generated.push_back(id);
      },
      &stats);
  // The newline is flushed before the stats go to stderr, so that with both streams on one
  // pipe (2>&1) the stats line does not run into the generated text.
  write(stream.Finish() + "\n");
  if (!s.ok()) return Fail(s);
  if (a.print_ids) {
    PrintIds("prompt ids", prompt);
    PrintIds("generated ids", generated);
  }
  const int64_t decoded = stats.generated_tokens > 0 ? stats.generated_tokens - 1 : 0;
  const std::string where =
      a.device == "cuda" ? "the GPU" : std::to_string(NumThreads()) + " threads";
  std::fprintf(stderr,
               "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %lld tokens in %.3f s "
               "(%.1f tokens/s); %s%s\n",
               static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds,
               stats.prefill_seconds > 0 ? stats.prompt_tokens / stats.prefill_seconds : 0.0,
               static_cast<long long>(decoded), stats.decode_seconds,
               stats.decode_seconds > 0 ? decoded / stats.decode_seconds : 0.0, where.c_str(),
               stats.stopped_at_eos ? "; stopped at end-of-text" : "");
  return 0;
}

// The block list and the attention / feed-forward settings of a hybrid.
void PrintHybrid(const ModelConfig& c) {
  std::string list;
  for (const BlockSpec& b : c.block_list()) {
    list += (list.empty() ? "" : " ") + std::string(BlockKindName(b.kind));
  }
  std::printf("blocks:         %s\n", list.c_str());
  const AttentionConfig& a = c.attention;
  if (a.num_heads > 0) {
    const std::string position =
        a.rotary_dim > 0 ? "rope theta " + std::to_string(static_cast<long long>(a.rope_theta)) +
                               " on " + std::to_string(a.rotary_dim) + " dims"
                         : "no position embedding";
    std::printf("attention:      %lld heads, %lld key/value heads, head dim %lld, %s\n",
                static_cast<long long>(a.num_heads), static_cast<long long>(a.num_kv_heads),
                static_cast<long long>(a.head_dim), position.c_str());
  }
  const FeedForwardConfig& f = c.ffn;
  std::printf("feed-forward:   %s %s", f.gated ? "gated" : "ungated", f.activation.c_str());
  if (f.intermediate > 0) std::printf(", MLP width %lld", static_cast<long long>(f.intermediate));
  if (f.num_experts > 0) {
    std::printf(", MoE %lld experts of width %lld, top-%lld", static_cast<long long>(f.num_experts),
                static_cast<long long>(f.moe_intermediate), static_cast<long long>(f.top_k));
    if (f.latent > 0) std::printf(" at latent width %lld", static_cast<long long>(f.latent));
  }
  if (f.shared_intermediate > 0 && f.num_experts > 0)
    std::printf(", shared expert width %lld", static_cast<long long>(f.shared_intermediate));
  std::printf("\n");
}

int RunInfo(std::string dir) {
  if (!ResolveModel("info", &dir)) return 2;
  std::unique_ptr<Model> model;
  const Status s = Model::Load(dir, &model);
  if (!s.ok()) return Fail(s);
  const ModelConfig& c = model->config();
  const bool m2 = c.arch == ModelArch::kMamba2;
  std::printf("model:          %s\n", dir.c_str());
  std::printf("files:          %s\n", model->source().c_str());
  const std::string format = c.format == "hf"     ? "Hugging Face " + c.hf_architecture()
                             : c.format == "gguf" ? "GGUF (llama.cpp) " + c.family
                                                  : "state-spaces (mamba_ssm)";
  std::printf("format:         %s\n", format.c_str());
  std::printf(
      "architecture:   %s, %lld layers, d_model %lld, d_inner %lld, d_state %lld, conv %lld\n",
      m2 ? "Mamba-2" : "Mamba-1", static_cast<long long>(c.n_layer),
      static_cast<long long>(c.d_model), static_cast<long long>(c.d_inner),
      static_cast<long long>(c.d_state), static_cast<long long>(c.d_conv));
  if (m2) {
    std::printf("heads:          %lld x head dim %lld, %lld groups, chunk %lld\n",
                static_cast<long long>(c.nheads), static_cast<long long>(c.headdim),
                static_cast<long long>(c.ngroups), static_cast<long long>(c.chunk_size));
  } else {
    std::printf("dt_rank:        %lld\n", static_cast<long long>(c.dt_rank));
  }
  if (!c.is_pure_mamba()) PrintHybrid(c);
  std::printf("vocab:          %lld rows (%lld in the config)\n",
              static_cast<long long>(c.vocab_size), static_cast<long long>(c.config_vocab_size));
  std::printf("LM head:        %s\n", c.tie_embeddings ? "tied to the embedding" : "separate");
  std::printf("weights:        %s\n", model->weight_dtype_name().c_str());
  std::printf("parameters:     %lld (%.1f M)\n", static_cast<long long>(model->parameter_count()),
              model->parameter_count() / 1e6);
  std::printf("decode reads:   %.1f MB of weights per step\n", model->decode_weight_bytes() / 1e6);
  return 0;
}

}  // namespace

void AddEngineCommands(CLI::App& app, const int& threads, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* gen =
      app.add_subcommand("generate", "generate text from a checkpoint, streamed to stdout");
  gen->add_option("--model", args->model,
                  "checkpoint directory (config.json + model.safetensors); default: the built-in "
                  "models/default");
  gen->add_option("--prompt", args->prompt, "the text to continue");
  gen->add_option("--max-tokens", args->max_tokens, "new tokens at most")
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--temperature", args->temperature, "0 = greedy (default)")
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-k", args->top_k, "sample from the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-p", args->top_p, "nucleus sampling threshold in (0, 1]");
  gen->add_option("--seed", args->seed, "random seed for sampling");
  gen->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json, or 'bytes' (default: the model directory's)");
  gen->add_flag("--ignore-eos", args->ignore_eos, "keep going past the end-of-text token");
  gen->add_option("--device", args->device,
                  "cpu (default) or cuda: the engine on the GPU (Mamba-1 and Mamba-2 models; "
                  "docs/cuda.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  gen->add_flag("--print-ids", args->print_ids,
                "also print the prompt's and the generated token ids to stderr");
  gen->callback([args, &threads, &exit_code] {
    SetNumThreads(threads);
    exit_code = RunGenerate(*args);
  });

  auto dir = std::make_shared<std::string>();
  CLI::App* info =
      app.add_subcommand("info", "print a checkpoint's architecture and parameter count");
  info->add_option("--model", *dir,
                   "checkpoint directory (config.json + model.safetensors); default: the built-in "
                   "models/default");
  info->callback([dir, &exit_code] { exit_code = RunInfo(*dir); });
}

}  // namespace ssmkit::cli

// ssmkit: the command-line front end. Subcommands: bench (every registered suite), check
// (ops against their oracles), generate and info (the engine, engine_commands.cpp), serve
// (serve_command.cpp), train, quantize and perplexity (their *_command.cpp).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_harness.hpp"
#include "check_harness.hpp"
#include "engine_commands.hpp"
#include "perplexity_command.hpp"
#include "quantize_command.hpp"
#include "serve_command.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/threads.hpp"
#include "train_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ssmkit: selective state space models (Mamba-1, Mamba-2), forward and backward"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "threads to use (default: SSMKIT_NUM_THREADS or all cores)");
  app.add_flag_callback(
      "--bf16-products",
      [] {
        if (!ssmkit::SetBf16Products(true)) {
          std::fprintf(stderr, "--bf16-products: this CPU has no AVX-512 BF16; x stays f32\n");
        }
      },
      "products of bf16 weights with 2 or more rows (prefill, decode batches) with x rounded "
      "to bf16 (AVX-512 BF16's vdpbf16ps, as llama.cpp does, or AMX's bf16 tiles "
      "where the CPU has them; default: SSMKIT_BF16_PRODUCTS=1, else off)");

  CLI::App* bench =
      app.add_subcommand("bench", "time the ops against the shapes of docs/targets.md");
  bench->require_subcommand(1);
  ssmkit::bench::Options options;
  int exit_code = 0;
  for (const ssmkit::bench::Suite& suite : ssmkit::bench::Suites()) {
    CLI::App* sub = bench->add_subcommand(suite.name, suite.help);
    sub->add_flag("--json", options.json, "print one JSON array instead of a table");
    sub->add_option("--runs", options.runs, "timed runs per case (median reported)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--warmup", options.warmup, "untimed runs before timing")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--shape", options.shape, "only this workload shape (e.g. policy, m1-130m)");
    sub->add_option("--algo", options.algo, "only this algorithm");
    sub->add_option("--weights", options.weights,
                    "weight dtypes of `generate`: f32, bf16, f16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                    "q4_k, q5_k, q6_k "
                    "(comma-separated; default f32,bf16, and q8_0,q4_k for m1-2.8b and m2-2.7b)");
    sub->add_option("--target", options.target,
                    "force this SIMD target (e.g. avx2, scalar; avx3-novnni: AVX-512 without the "
                    "quantized products' VNNI, avx3-noamx: without their AMX; default: the best "
                    "this CPU runs)");
    sub->add_option("--ggml", options.ggml,
                    "a ggml test-backend-ops binary: measure the peer in this run\n"
                    "(docs/benchmarks.md)");
    if (suite.name == "generate") {
      sub->add_option("--device", options.device,
                      "cpu (default) or cuda: the engine on the GPU at batch 1 and 64 (bf16)")
          ->check(CLI::IsMember({"cpu", "cuda"}));
      sub->add_option(
          "--model", options.model,
          "a checkpoint directory or .gguf file instead of the random presets (64-token "
          "prompts, 64 decode steps)");
    }
    sub->callback([&options, &exit_code, &suite, &threads] {
      ssmkit::SetNumThreads(threads);
      if (!ssmkit::bench::ForceTarget(options.target)) {
        exit_code = 2;
        return;
      }
      exit_code = suite.run(options);
    });
  }

  CLI::App* check =
      app.add_subcommand("check", "run an op on random inputs against its fp64 oracle");
  check->require_subcommand(1);
  ssmkit::check_cli::Options check_options;
  for (const ssmkit::check_cli::Check& c : ssmkit::check_cli::Checks()) {
    CLI::App* sub = check->add_subcommand(c.name, c.help);
    sub->add_option("--lengths", check_options.lengths, "sequence lengths")->delimiter(',');
    sub->add_option("--algo", check_options.algo, "only this algorithm");
    sub->add_option("--seed", check_options.seed, "random seed (default: fresh, printed)");
    sub->add_option("--dim", check_options.dim, "channels")->check(CLI::PositiveNumber);
    sub->add_option("--dt-min", check_options.dt_min, "smallest time step")
        ->check(CLI::PositiveNumber);
    sub->add_option("--dt-max", check_options.dt_max, "largest time step")
        ->check(CLI::PositiveNumber);
    sub->add_flag("--json", check_options.json, "print one JSON array instead of a table");
    sub->callback([&check_options, &exit_code, &c, &threads] {
      ssmkit::SetNumThreads(threads);
      exit_code = c.run(check_options);
    });
  }

  ssmkit::cli::AddEngineCommands(app, threads, exit_code);
  ssmkit::cli::AddTrainCommand(app, threads, exit_code);
  ssmkit::cli::AddServeCommand(app, threads, exit_code);
  ssmkit::cli::AddQuantizeCommand(app, threads, exit_code);
  ssmkit::cli::AddPerplexityCommand(app, threads, exit_code);

  CLI11_PARSE(app, argc, argv);
  return exit_code;
}

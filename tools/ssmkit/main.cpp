// ssmkit: the command-line front end. Subcommands: bench (every registered suite) and the
// engine commands as they land (generate, train, check, info).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench_harness.hpp"
#include "ssmkit/threads.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ssmkit: selective state space models (Mamba-1, Mamba-2), forward and backward"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "threads to use (default: SSMKIT_NUM_THREADS or all cores)");

  CLI::App* bench = app.add_subcommand("bench", "time the ops against the shapes of TARGETS.md");
  bench->require_subcommand(1);
  ssmkit::bench::Options options;
  int exit_code = 0;
  for (const ssmkit::bench::Suite& suite : ssmkit::bench::Suites()) {
    CLI::App* sub = bench->add_subcommand(suite.name, suite.help);
    sub->add_flag("--json", options.json, "print one JSON array instead of a table");
    sub->add_option("--runs", options.runs, "timed runs per case (median reported)")->check(CLI::PositiveNumber);
    sub->add_option("--warmup", options.warmup, "untimed runs before timing")->check(CLI::NonNegativeNumber);
    sub->add_option("--shape", options.shape, "only this workload shape (e.g. policy, m1-130m)");
    sub->add_option("--algo", options.algo, "only this algorithm");
    sub->callback([&options, &exit_code, &suite, &threads] {
      ssmkit::SetNumThreads(threads);
      exit_code = suite.run(options);
    });
  }

  CLI11_PARSE(app, argc, argv);
  return exit_code;
}

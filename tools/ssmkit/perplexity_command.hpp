// `ssmkit perplexity`: a model's perplexity on a text file (include/ssmkit/perplexity.hpp),
// added to the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace ssmkit::cli {

// `threads` is read when the command runs (after parsing); `exit_code` receives its result.
void AddPerplexityCommand(CLI::App& app, const int& threads, int& exit_code);

}  // namespace ssmkit::cli

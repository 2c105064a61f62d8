// `ssmkit train`: byte-level language-model training on a text file (include/ssmkit/train.hpp).
#pragma once

#include <CLI/CLI.hpp>

namespace ssmkit::cli {

// Registers the subcommand on `app`; its callback sets the thread count from `threads` and
// writes the process exit code to `exit_code` (both read or written when it runs).
void AddTrainCommand(CLI::App& app, const int& threads, int& exit_code);

}  // namespace ssmkit::cli

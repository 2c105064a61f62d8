// The engine's subcommands, `ssmkit generate` and `ssmkit info`, added to the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace ssmkit::cli {

// `threads` is read when a command runs (after parsing); `exit_code` receives its result.
void AddEngineCommands(CLI::App& app, const int& threads, int& exit_code);

}  // namespace ssmkit::cli

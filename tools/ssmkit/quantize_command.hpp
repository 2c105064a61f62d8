// `ssmkit quantize --type TYPE IN OUT.gguf`, added to the CLI app (src/model/gguf_export.hpp).
#pragma once

#include <CLI/CLI.hpp>

namespace ssmkit::cli {

// `threads` is read when the command runs (after parsing); `exit_code` receives its result.
void AddQuantizeCommand(CLI::App& app, const int& threads, int& exit_code);

}  // namespace ssmkit::cli

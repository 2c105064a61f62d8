// The built-in model: `ssmkit generate` and `ssmkit info` use models/default (a byte-level
// Mamba-2 trained on the King James Bible, docs/default_model.md) when no --model is given.
#pragma once

#include <string>

#include "ssmkit/status.hpp"

namespace ssmkit::cli {

// The first of these that holds config.json and model.safetensors:
//   1. $SSMKIT_DEFAULT_MODEL (when set, only it: a wrong path is an error, not a fallback);
//   2. models/default above the executable: <exe dir>/../../models/default (the build/<preset>/
//      binary of a clone), <exe dir>/../share/ssmkit/models/default (an install prefix),
//      <exe dir>/models/default;
//   3. the source tree the binary was built from.
// The error lists every place looked at.
Status FindDefaultModel(std::string* dir);

}  // namespace ssmkit::cli

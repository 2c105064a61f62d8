// What the engine's commands (generate, info, perplexity) share: the model they run (the
// built-in one when none is named), its tokenizer, and how a failure is printed.
#pragma once

#include <memory>
#include <string>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::cli {

// Prints "error: <message>" on stderr; returns the exit code 1.
int Fail(const Status& s);

// An empty *model becomes the built-in model (models/default, ssmkit::DefaultModelDir). False,
// with the reason on stderr for `command`, when there is none.
bool ResolveModel(const char* command, std::string* model);

// `tokenizer`: a tokenizer.json path, "bytes", or empty for the model's own
// (Tokenizer::ForModel on `model_path`).
Status OpenTokenizer(const std::string& tokenizer, const std::string& model_path,
                     const Model& model, std::unique_ptr<Tokenizer>* t);

}  // namespace ssmkit::cli

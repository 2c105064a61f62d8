// The request bodies of POST /v1/completions and POST /v1/chat/completions, parsed and checked
// field by field against OpenAI's API: a field we know with a value of the wrong type or out of
// range is a 400 naming it; a field we do not know is ignored (clients send extras such as
// `user`); a feature we do not implement (n > 1, echo, penalties, logit_bias, tools, ...) is a
// 400 saying so rather than a silent difference. docs/server.md lists every field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.hpp"

namespace ssmkit::server {

enum class Endpoint { kCompletions, kChatCompletions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  // Completions: the prompt as text, or as token ids (prompt_is_ids).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // Chat: [{"role": ..., "content": ...}, ...], content always a string (text parts joined).
  nlohmann::ordered_json messages;
  std::optional<int64_t> max_tokens;  // absent: the endpoint's default (server.cpp)
  float temperature = 1.0f;           // OpenAI's defaults
  float top_p = 1.0f;
  int64_t top_k = 0;              // an extension (vLLM, llama.cpp): 0 = off
  std::optional<uint64_t> seed;   // absent: a fresh random seed
  std::vector<std::string> stop;  // up to 4 non-empty strings
  int top_logprobs = -1;          // -1: no logprobs; 0..5: the chosen token's and top n
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;     // an extension (vLLM, llama.cpp): for benchmarks
};

// Limits of the checks above (OpenAI's where it states one).
inline constexpr int kMaxStopStrings = 4;
inline constexpr int kMaxTopLogprobs = 5;

// Parses `body` (any bytes: malformed JSON and invalid UTF-8 are 400s) for `endpoint`. Returns
// the error that answers the request, or nothing with *request filled.
std::optional<ApiError> ParseCompletionRequest(std::string_view body, Endpoint endpoint,
                                               CompletionRequest* request);

}  // namespace ssmkit::server

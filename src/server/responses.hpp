// The JSON bodies of OpenAI's completion and chat completion responses, whole or as the
// server-sent events of a stream ("data: {...}\n\n", then "data: [DONE]\n\n"), built from
// the scheduler's RequestUpdates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/completion_request.hpp"
#include "server/request_state.hpp"

namespace ssmkit::server {

// What every chunk of one response shares, and the state a stream carries between chunks.
struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool include_usage = false;  // stream_options.include_usage
  int64_t text_offset = 0;     // completions logprobs: characters sent so far (UTF-8 bytes)
  bool sent_role = false;      // chat streams: the first delta names the role
  int64_t tokens_sent = 0;     // streams: one chunk per token, even one with no text of its own
};

// A fresh context: a random id with the endpoint's prefix, the current time.
ResponseContext NewResponseContext(Endpoint endpoint, const std::string& model);

// The whole response of a finished request (`update` holds all of its text and logprobs).
std::string CompleteResponse(ResponseContext& ctx, const RequestUpdate& update);

// The events for `update` (empty when it holds nothing to send); after the finishing update,
// the final chunk and "data: [DONE]".
std::string StreamEvents(ResponseContext& ctx, const RequestUpdate& update);

// An error in the middle of a stream: {"error": {...}} as an event, then "data: [DONE]".
std::string StreamError(const ApiError& error);

}  // namespace ssmkit::server

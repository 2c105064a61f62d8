#include "server/responses.hpp"

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "ssmkit/tokenizer.hpp"

namespace ssmkit::server {
namespace {

using nlohmann::json;

// Token bytes as text: a token that ends inside a UTF-8 character reads as U+FFFD, as
// OpenAI's tokens do; `bytes` keeps the exact bytes.
std::string TokenText(const std::string& bytes) {
  std::string text;
  Utf8Lossy(bytes, /*final=*/true, &text);
  return text;
}

json ByteList(const std::string& bytes) {
  json list = json::array();
  for (unsigned char b : bytes) list.push_back(static_cast<int>(b));
  return list;
}

json Usage(const RequestUpdate& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
json CompletionLogprobs(ResponseContext& ctx, const std::vector<TokenLogprob>& lps) {
  json tokens = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string text = TokenText(lp.bytes);
    tokens.push_back(text);
    logprobs.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [bytes, logprob] : lp.top) top[TokenText(bytes)] = logprob;
    tops.push_back(std::move(top));
    offsets.push_back(ctx.text_offset);
    ctx.text_offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", logprobs},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
json ChatLogprobs(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    json top = json::array();
    for (const auto& [bytes, logprob] : lp.top) {
      top.push_back(
          {{"token", TokenText(bytes)}, {"logprob", logprob}, {"bytes", ByteList(bytes)}});
    }
    content.push_back({{"token", TokenText(lp.bytes)},
                       {"logprob", lp.logprob},
                       {"bytes", ByteList(lp.bytes)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json FinishReason(const RequestUpdate& u) { return u.finished ? json(u.finish_reason) : json(); }

json Choice(ResponseContext& ctx, const RequestUpdate& u, bool stream, bool wants_logprobs) {
  json choice = {{"index", 0}};
  json logprobs;
  if (wants_logprobs) {
    logprobs = ctx.endpoint == Endpoint::kCompletions ? CompletionLogprobs(ctx, u.logprobs)
                                                      : ChatLogprobs(u.logprobs);
  }
  if (ctx.endpoint == Endpoint::kCompletions) {
    choice["text"] = u.text;
  } else if (!stream) {
    choice["message"] = {{"role", "assistant"}, {"content", u.text}};
  } else {
    json delta = json::object();
    if (!ctx.sent_role) {
      delta["role"] = "assistant";
      ctx.sent_role = true;
    }
    if (!u.text.empty() || !u.finished) delta["content"] = u.text;
    choice["delta"] = delta;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = FinishReason(u);
  return choice;
}

json Envelope(const ResponseContext& ctx, bool stream) {
  const char* object = ctx.endpoint == Endpoint::kCompletions
                           ? "text_completion"
                           : (stream ? "chat.completion.chunk" : "chat.completion");
  return {{"id", ctx.id},
          {"object", object},
          {"created", ctx.created},
          {"model", ctx.model},
          {"system_fingerprint", "ssmkit"}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Event(const json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace

ResponseContext NewResponseContext(Endpoint endpoint, const std::string& model) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  ResponseContext ctx;
  ctx.endpoint = endpoint;
  ctx.model = model;
  ctx.id = endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-";
  for (int i = 0; i < 24; ++i) ctx.id += kHex[rng() % 16];
  ctx.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return ctx;
}

std::string CompleteResponse(ResponseContext& ctx, const RequestUpdate& update) {
  json body = Envelope(ctx, false);
  body["choices"] = json::array({Choice(ctx, update, false, !update.logprobs.empty())});
  body["usage"] = Usage(update);
  return Dump(body);
}

std::string StreamEvents(ResponseContext& ctx, const RequestUpdate& update) {
  std::string out;
  const bool has_logprobs = !update.logprobs.empty();
  const bool new_tokens = update.completion_tokens > ctx.tokens_sent;
  ctx.tokens_sent = update.completion_tokens;
  // A chunk per new token (clients time tokens by chunks), a role chunk first in chat.
  if (!update.text.empty() || has_logprobs || (new_tokens && !update.finished) ||
      (!ctx.sent_role && ctx.endpoint == Endpoint::kChatCompletions)) {
    // The text (and logprobs) of this update, without the finish: as OpenAI, the finish
    // reason comes in a chunk of its own.
    RequestUpdate text = update;
    text.finished = false;
    json chunk = Envelope(ctx, true);
    chunk["choices"] = json::array({Choice(ctx, text, true, has_logprobs)});
    if (ctx.include_usage) chunk["usage"] = nullptr;
    out += Event(chunk);
  }
  if (!update.finished) return out;
  RequestUpdate last;
  last.finished = true;
  last.finish_reason = update.finish_reason;
  json chunk = Envelope(ctx, true);
  chunk["choices"] = json::array({Choice(ctx, last, true, false)});
  if (ctx.include_usage) {
    chunk["usage"] = nullptr;
    out += Event(chunk);
    json usage = Envelope(ctx, true);
    usage["choices"] = json::array();
    usage["usage"] = Usage(update);
    out += Event(usage);
  } else {
    // Usage in every response: the finishing chunk carries it.
    chunk["usage"] = Usage(update);
    out += Event(chunk);
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string StreamError(const ApiError& error) {
  return "data: " + error.ToJson() + "\n\n" + "data: [DONE]\n\n";
}

}  // namespace ssmkit::server

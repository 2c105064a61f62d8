#include "server/http_api.hpp"

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "server/responses.hpp"
#include "ssmkit/generate.hpp"

namespace ssmkit::server {
namespace {

using nlohmann::json;

constexpr auto kPollInterval = std::chrono::milliseconds(1000);
// Seconds a client told "overloaded" should wait before retrying.
constexpr const char* kRetryAfterSeconds = "1";

const char* EndpointName(Endpoint e) {
  return e == Endpoint::kCompletions ? "completions" : "chat.completions";
}

void SetJson(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

ApiError Overloaded(const std::string& why) {
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.code = "overloaded";
  e.message = why;
  return e;
}

// The message OpenAI gives for an over-long request.
ApiError ContextExceeded(int64_t context, int64_t prompt, int64_t completion) {
  ApiError e = ApiError::BadRequest(
      "messages", "This model's maximum context length is " + std::to_string(context) +
                      " tokens. However, you requested " + std::to_string(prompt + completion) +
                      " tokens (" + std::to_string(prompt) + " in the prompt, " +
                      std::to_string(completion) +
                      " in the completion). Please reduce the length of the prompt or completion.");
  e.code = "context_length_exceeded";
  return e;
}

// Messages for httplib's own error responses (no handler ran, or the body was refused).
std::string StatusMessage(const httplib::Request& req, int status, int64_t max_body_bytes) {
  switch (status) {
    case 404:
      return "no such endpoint: " + req.method + " " + req.path;
    case 413:
      return "the request body is larger than the server's limit of " +
             std::to_string(max_body_bytes) + " bytes";
    case 414:
      return "the request URI is too long";
    default:
      return "the request could not be served (HTTP " + std::to_string(status) + ")";
  }
}

}  // namespace

HttpApi::HttpApi(ServedModel served, Scheduler* scheduler, Metrics* metrics, std::string api_key,
                 int64_t max_body_bytes)
    : served_(std::move(served)),
      scheduler_(scheduler),
      metrics_(metrics),
      api_key_(std::move(api_key)),
      max_body_bytes_(max_body_bytes) {}

void HttpApi::Register(httplib::Server& server) {
  server.set_payload_max_length(static_cast<size_t>(max_body_bytes_));
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (api_key_.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + api_key_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    ApiError e;
    e.http_status = 401;
    e.code = "invalid_api_key";
    e.message = req.has_header("Authorization")
                    ? "Incorrect API key provided"
                    : "No API key provided: send the header 'Authorization: Bearer KEY'";
    SetJson(res, 401, e.ToJson());
    metrics_->CountRequest(req.path, "rejected");
    return httplib::Server::HandlerResponse::Handled;
  });
  const httplib::Server::HandlerWithResponse errors = [this](const httplib::Request& req,
                                                             httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = res.status;
    e.message = StatusMessage(req, res.status, max_body_bytes_);
    if (res.status >= 500) e.type = "server_error";
    res.set_content(e.ToJson(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  };
  server.set_error_handler(errors);
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        SetJson(res, 500, ApiError::Internal("internal error: " + what).ToJson());
      });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(req, res, Endpoint::kCompletions);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(req, res, Endpoint::kChatCompletions);
  });
  auto model_json = [this] {
    return json{{"id", served_.id},
                {"object", "model"},
                {"created", served_.created},
                {"owned_by", "ssmkit"}};
  };
  server.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    SetJson(res, 200, json{{"object", "list"}, {"data", json::array({model_json()})}}.dump());
  });
  server.Get(R"(/v1/models/(.+))",
             [this, model_json](const httplib::Request& req, httplib::Response& res) {
               if (req.matches[1] == served_.id) {
                 SetJson(res, 200, model_json().dump());
                 return;
               }
               ApiError e = ApiError::BadRequest(
                   "model", "The model '" + req.matches[1].str() + "' does not exist");
               e.http_status = 404;
               e.code = "model_not_found";
               SetJson(res, 404, e.ToJson());
             });
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool draining = draining_.load();
    SetJson(res, draining ? 503 : 200,
            json{{"status", draining ? "draining" : "ok"}, {"slots", scheduler_->slots()}}.dump());
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Text(), "text/plain; version=0.0.4");
  });
}

void HttpApi::Reply(httplib::Response& res, const ApiError& error, const std::string& endpoint) {
  SetJson(res, error.http_status, error.ToJson());
  if (error.http_status == 503) res.set_header("Retry-After", kRetryAfterSeconds);
  metrics_->CountRequest(endpoint, error.http_status == 503  ? "overloaded"
                                   : error.http_status < 500 ? "rejected"
                                                             : "error");
}

std::optional<ApiError> HttpApi::PromptTokens(const CompletionRequest& r,
                                              std::vector<int32_t>* prompt) const {
  const ModelConfig& c = served_.model->config();
  Status s;
  if (r.endpoint == Endpoint::kChatCompletions) {
    if (served_.chat_template == nullptr) {
      ApiError e = ApiError::BadRequest(
          "messages", "the model '" + served_.id +
                          "' has no chat template (tokenizer_config.json's chat_template): use "
                          "/v1/completions, or start the server with --chat-template FILE");
      return e;
    }
    std::string text;
    s = served_.chat_template->Render(r.messages, /*add_generation_prompt=*/true, &text);
    if (!s.ok()) return ApiError::BadRequest("messages", "chat template: " + s.message());
    // As apply_chat_template(tokenize=True): the template writes the special tokens itself.
    s = served_.tokenizer->Encode(text, prompt);
  } else if (r.prompt_is_ids) {
    for (int32_t id : r.prompt_ids) {
      if (id >= c.vocab_size) {
        return ApiError::BadRequest("prompt", "'prompt': token id " + std::to_string(id) +
                                                  " outside the vocabulary [0, " +
                                                  std::to_string(c.vocab_size) + ")");
      }
    }
    *prompt = r.prompt_ids;
  } else {
    // As `ssmkit generate`: the tokenizer's template (a start token), if any.
    s = served_.tokenizer->Encode(r.prompt_text, prompt);
    if (s.ok()) served_.tokenizer->AddSpecialTokens(prompt);
  }
  if (s.ok()) s = StartFromBeginningOfText(c, prompt);
  if (!s.ok()) return ApiError::BadRequest("prompt", s.message());
  return std::nullopt;
}

std::optional<ApiError> HttpApi::MakeJob(const CompletionRequest& r, std::vector<int32_t> prompt,
                                         GenerationJob* job) const {
  const int64_t context = served_.context;
  const int64_t n = static_cast<int64_t>(prompt.size());
  // OpenAI's defaults: 16 new tokens for completions, the rest of the context for chat.
  constexpr int64_t kCompletionsDefault = 16;
  int64_t max_tokens = r.max_tokens.value_or(
      r.endpoint == Endpoint::kCompletions ? kCompletionsDefault : context - n);
  if (!r.max_tokens) max_tokens = std::min(max_tokens, context - n);
  if (n >= context || n + max_tokens > context) {
    return ContextExceeded(context, n, std::max<int64_t>(max_tokens, 1));
  }
  job->prompt = std::move(prompt);
  job->max_tokens = max_tokens;
  job->sampling.temperature = r.temperature;
  job->sampling.top_p = r.top_p;
  job->sampling.top_k = r.top_k;
  if (r.seed) {
    job->sampling.seed = *r.seed;
  } else {
    static thread_local std::mt19937_64 fresh{std::random_device{}()};
    job->sampling.seed = fresh();
  }
  job->stop = r.stop;
  job->top_logprobs = r.top_logprobs;
  const int64_t eos = served_.model->config().eos_token_id;
  job->eos_token_id = r.ignore_eos || eos < 0 ? -1 : static_cast<int32_t>(eos);
  return std::nullopt;
}

void HttpApi::Generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const std::string name = EndpointName(endpoint);
  if (draining_.load()) return Reply(res, Overloaded("the server is shutting down"), name);
  CompletionRequest request;
  if (auto e = ParseCompletionRequest(req.body, endpoint, &request)) return Reply(res, *e, name);
  std::vector<int32_t> prompt;
  if (auto e = PromptTokens(request, &prompt)) return Reply(res, *e, name);
  GenerationJob job;
  if (auto e = MakeJob(request, std::move(prompt), &job)) return Reply(res, *e, name);
  auto state = std::make_shared<RequestState>(std::move(job));
  switch (scheduler_->Submit(state)) {
    case Scheduler::Admission::kQueueFull:
      return Reply(res, Overloaded("every slot is busy and the queue is full: retry later"), name);
    case Scheduler::Admission::kDraining:
      return Reply(res, Overloaded("the server is shutting down"), name);
    case Scheduler::Admission::kAccepted:
      break;
  }
  ++in_flight_;
  if (request.stream) return Stream(request, std::move(state), res, name);
  RequestUpdate all, u;
  while (!all.finished) {
    if (!state->Take(kPollInterval, &u)) continue;
    all.text += u.text;
    for (TokenLogprob& lp : u.logprobs) all.logprobs.push_back(std::move(lp));
    all.finished = u.finished;
    all.finish_reason = u.finish_reason;
    all.error = u.error;
    all.prompt_tokens = u.prompt_tokens;
    all.completion_tokens = u.completion_tokens;
    all.cached_tokens = u.cached_tokens;
  }
  --in_flight_;
  if (all.error) return Reply(res, *all.error, name);
  ResponseContext ctx = NewResponseContext(endpoint, served_.id);
  SetJson(res, 200, CompleteResponse(ctx, all));
  metrics_->CountRequest(name, "ok");
}

void HttpApi::Stream(const CompletionRequest& request, std::shared_ptr<RequestState> state,
                     httplib::Response& res, const std::string& endpoint) {
  auto ctx = std::make_shared<ResponseContext>(NewResponseContext(request.endpoint, served_.id));
  ctx->include_usage = request.include_usage;
  auto failed = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, ctx, failed](size_t, httplib::DataSink& sink) {
        RequestUpdate u;
        if (!state->Take(kPollInterval, &u)) {
          // Nothing yet (queued, or a long prefill): an SSE comment, which clients ignore,
          // finds out whether the client is still there.
          static const std::string ping = ": ping\n\n";
          return sink.write(ping.data(), ping.size());
        }
        const std::string events = u.error ? StreamError(*u.error) : StreamEvents(*ctx, u);
        if (!events.empty() && !sink.write(events.data(), events.size())) return false;
        if (u.finished) {
          *failed = u.error.has_value();
          sink.done();
        }
        return true;
      },
      [this, state, failed, endpoint](bool success) {
        // The client went away (or the write failed): the scheduler frees the slot.
        if (!success) state->Cancel();
        --in_flight_;
        metrics_->CountRequest(endpoint, !success ? "stopped_by_client" : *failed ? "error" : "ok");
      });
}

}  // namespace ssmkit::server

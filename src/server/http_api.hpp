// The HTTP routes of `ssmkit serve` on a cpp-httplib server: request parsing and checks,
// tokenization (and the chat template), submission to the scheduler, and the responses,
// whole or streamed as server-sent events.
#pragma once

#include <atomic>
#include <cstdint>
#include <httplib.h>
#include <string>

#include "server/chat_template.hpp"
#include "server/completion_request.hpp"
#include "server/metrics.hpp"
#include "server/scheduler.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::server {

struct ServedModel {
  const Model* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat requests are a 400
  std::string id;                               // /v1/models' id
  int64_t context = 0;                          // prompt + completion tokens per request
  int64_t created = 0;                          // Unix seconds (/v1/models)
};

class HttpApi {
 public:
  HttpApi(ServedModel served, Scheduler* scheduler, Metrics* metrics, std::string api_key,
          int64_t max_body_bytes);

  // Routes, the API-key check, JSON error bodies for httplib's own errors (404, 413, ...).
  void Register(httplib::Server& server);
  // From now on generation requests and /health answer 503.
  void BeginDrain() { draining_.store(true); }
  // Generation requests whose response is not yet fully written.
  int64_t in_flight() const { return in_flight_.load(); }

 private:
  void Generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  // The prompt's tokens, or the error that answers the request.
  std::optional<ApiError> PromptTokens(const CompletionRequest& request,
                                       std::vector<int32_t>* prompt) const;
  // The job for the scheduler: limits checked against the context.
  std::optional<ApiError> MakeJob(const CompletionRequest& request, std::vector<int32_t> prompt,
                                  GenerationJob* job) const;
  void Stream(const CompletionRequest& request, std::shared_ptr<RequestState> state,
              httplib::Response& res, const std::string& endpoint);
  void Reply(httplib::Response& res, const ApiError& error, const std::string& endpoint);

  ServedModel served_;
  Scheduler* scheduler_;
  Metrics* metrics_;
  std::string api_key_;
  int64_t max_body_bytes_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace ssmkit::server

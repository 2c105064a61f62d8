// libFuzzer target for the server's request parser (src/server/completion_request.cpp): any
// bytes as the body of POST /v1/completions or /v1/chat/completions must give a request or an
// ApiError whose JSON body is valid, never crash or throw. Seed corpus:
// tests/fuzz/corpus/completion_request/. Run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/completion_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto endpoint :
       {ssmkit::server::Endpoint::kCompletions, ssmkit::server::Endpoint::kChatCompletions}) {
    ssmkit::server::CompletionRequest request;
    const auto error = ssmkit::server::ParseCompletionRequest(body, endpoint, &request);
    if (!error) continue;
    if (error->http_status != 400) std::abort();
    // The error body must itself be JSON, whatever bytes its message quotes.
    if (!nlohmann::json::accept(error->ToJson())) std::abort();
  }
  return 0;
}

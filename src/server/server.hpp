// `ssmkit serve`: an OpenAI-compatible HTTP server over one model (docs/server.md).
//   POST /v1/completions, POST /v1/chat/completions (JSON, or server-sent events with
//   "stream": true), GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics.
// cpp-httplib (Debian's libcpp-httplib-dev) does the HTTP; server/scheduler.hpp the batching.
#pragma once

#include <cstdint>
#include <string>

namespace ssmkit::server {

struct ServerOptions {
  std::string model;            // checkpoint directory; empty: the built-in model
  std::string preset;           // instead of `model`: random weights of a docs/targets.md shape
  std::string weights = "f32";  // the preset's weight dtype: f32, bf16, f16
  std::string tokenizer;        // as `ssmkit generate --tokenizer`: a file, or "bytes"
  std::string chat_template;    // a Jinja file overriding tokenizer_config.json's template
  std::string model_id;         // the id /v1/models lists; empty: the directory's name
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (printed)
  int64_t slots = 8;
  int threads = 0;  // engine threads (0: the library's default)
  int64_t state_cache_mb = 512;
  std::string api_key;  // empty: none required
  int64_t max_queue = 64;
  int64_t prefill_chunk = 256;
  int64_t context = 0;  // tokens per request (prompt + completion); 0: the model's (server.cpp)
  int64_t max_body_bytes = 8 << 20;
  double drain_seconds = 30.0;  // SIGTERM: how long in-flight requests may run on
  int http_threads = 0;         // 0: slots + max_queue + 16
};

// Loads the model, serves until SIGTERM or SIGINT, then drains: new requests get 503, those
// in flight finish (within drain_seconds), and it returns 0. Returns 1 (with a message on
// stderr) when the model, tokenizer or address cannot be used.
int RunServer(const ServerOptions& options);

}  // namespace ssmkit::server

// `ssmkit serve`: flags to server::ServerOptions (docs/server.md); `ssmkit chat-template`:
// a chat template rendered on message lists read from stdin, as the server renders them.
#include "serve_command.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "server/chat_template.hpp"
#include "server/server.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit::cli {
namespace {

// stdin: a JSON array of {"messages": [...], "add_generation_prompt": bool, "bos_token": ...,
// ...}; stdout: a JSON array of {"text": ...} or {"error": ...}, one per case.
int RenderChatTemplates(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "chat-template: %s cannot be read\n", path.c_str());
    return 1;
  }
  const std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::ordered_json cases;
  try {
    cases = nlohmann::ordered_json::parse(std::cin);
  } catch (const nlohmann::ordered_json::exception& e) {
    std::fprintf(stderr, "chat-template: stdin: %s\n", e.what());
    return 1;
  }
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    nlohmann::json special = nlohmann::json::object();
    for (const auto& [k, v] : c.items()) {
      if (k != "messages" && k != "add_generation_prompt" && v.is_string()) special[k] = v;
    }
    std::unique_ptr<server::ChatTemplate> t;
    Status s = server::ChatTemplate::FromSource(source, special, &t);
    std::string text;
    if (s.ok()) {
      s = t->Render(c.value("messages", nlohmann::ordered_json::array()),
                    c.value("add_generation_prompt", false), &text);
    }
    results.push_back(s.ok() ? nlohmann::ordered_json{{"text", text}}
                             : nlohmann::ordered_json{{"error", s.message()}});
  }
  std::printf(
      "%s\n",
      results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, const int& threads, int& exit_code) {
  auto o = std::make_shared<server::ServerOptions>();
  CLI::App* serve = app.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server with continuous batching (docs/server.md)");
  serve->add_option("--model", o->model,
                    "checkpoint directory (config.json + model.safetensors); default: the "
                    "built-in models/default");
  serve->add_option("--preset", o->preset,
                    "instead of --model: random weights of a docs/targets.md shape (" +
                        PresetNames() + "), for benchmarks");
  serve->add_option("--weights", o->weights, "the preset's weight dtype: f32, bf16 or f16");
  serve->add_option("--tokenizer", o->tokenizer,
                    "tokenizer.json, or 'bytes' (default: the model directory's)");
  serve->add_option("--chat-template", o->chat_template,
                    "a Jinja chat template file (default: tokenizer_config.json's)");
  serve->add_option("--model-id", o->model_id,
                    "the model's id in /v1/models (default: the directory's name)");
  serve->add_option("--host", o->host, "address to listen on")->capture_default_str();
  serve->add_option("--port", o->port, "port (0: any free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve->add_option("--slots", o->slots, "sequences decoded together (the batch)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  serve->add_option("--queue", o->max_queue, "requests waiting for a slot before 503s")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  serve->add_option("--state-cache-mb", o->state_cache_mb, "the prefix state cache's size (0: off)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  serve
      ->add_option("--prefill-chunk", o->prefill_chunk,
                   "prompt tokens per prefill step between decode steps; the state cache's "
                   "interval")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  serve
      ->add_option("--ctx-size", o->context,
                   "prompt + completion tokens per request (0: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  serve->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY'");
  serve->add_option("--max-body-bytes", o->max_body_bytes, "the largest request body accepted")
      ->check(CLI::Range(1024, 1 << 30))
      ->capture_default_str();
  serve
      ->add_option("--drain-seconds", o->drain_seconds,
                   "on SIGTERM, how long requests in flight may run on")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  serve
      ->add_option("--http-threads", o->http_threads, "HTTP worker threads (0: slots + queue + 16)")
      ->check(CLI::Range(0, 4096));
  serve->callback([o, &threads, &exit_code] {
    o->threads = threads;
    exit_code = server::RunServer(*o);
  });

  auto path = std::make_shared<std::string>();
  CLI::App* render = app.add_subcommand(
      "chat-template",
      "render a Jinja chat template on the message lists of a JSON array read from stdin");
  render->add_option("--template", *path, "the template file")->required();
  render->callback([path, &exit_code] { exit_code = RenderChatTemplates(*path); });
}

}  // namespace ssmkit::cli

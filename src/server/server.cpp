#include "server/server.hpp"

#include <httplib.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "server/http_api.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::server {
namespace {

// The context a request may use when the session sets none (pure SSM models: their state does
// not grow, so this is only a policy): the config's max_position_embeddings, else this.
constexpr int64_t kDefaultContext = 8192;

int Fail(const std::string& message) {
  std::fprintf(stderr, "ssmkit serve: %s\n", message.c_str());
  return 1;
}

Status LoadModel(const ServerOptions& o, std::string* dir, std::unique_ptr<Model>* model) {
  if (!o.preset.empty()) {
    ModelConfig config;
    SSMKIT_RETURN_IF_ERROR(PresetConfig(o.preset, &config));
    const DType dtype = o.weights == "bf16"  ? DType::kBF16
                        : o.weights == "f16" ? DType::kF16
                                             : DType::kF32;
    if (o.weights != "f32" && o.weights != "bf16" && o.weights != "f16") {
      return Status::InvalidArgument("--weights: expected f32, bf16 or f16, given " + o.weights);
    }
    return Model::Random(config, dtype, /*seed=*/1234, model);
  }
  *dir = o.model;
  if (dir->empty()) SSMKIT_RETURN_IF_ERROR(DefaultModelDir(dir));
  return Model::Load(*dir, model);
}

Status LoadTokenizer(const ServerOptions& o, const std::string& dir, const Model& model,
                     std::unique_ptr<Tokenizer>* t) {
  if (o.tokenizer == "bytes" || (o.tokenizer.empty() && !o.preset.empty())) {
    *t = Tokenizer::Bytes();
    return Status::Ok();
  }
  if (!o.tokenizer.empty()) return Tokenizer::FromFile(o.tokenizer, t);
  return Tokenizer::ForModel(dir, model.config().vocab_size, t);
}

std::string ModelId(const ServerOptions& o, const std::string& dir) {
  if (!o.model_id.empty()) return o.model_id;
  if (!o.preset.empty()) return o.preset;
  std::filesystem::path p(dir);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// SIGTERM / SIGINT set a flag that the drain thread polls: the drain itself runs in an
// ordinary thread, not in the handler. (Blocking the signals instead would not do: libraries
// such as OpenBLAS start threads before main, and a signal may land in any of them.)
volatile std::sig_atomic_t g_signalled = 0;

extern "C" void OnStopSignal(int) { g_signalled = 1; }

void WaitForSignal(const std::atomic<bool>& done, std::atomic<bool>* signalled) {
  while (!done.load()) {
    if (g_signalled) {
      signalled->store(true);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int RunServer(const ServerOptions& o) {
  g_signalled = 0;
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  SetNumThreads(o.threads);

  std::string dir;
  std::unique_ptr<Model> model;
  Status s = LoadModel(o, &dir, &model);
  if (!s.ok()) return Fail(s.message());
  std::unique_ptr<Tokenizer> tokenizer;
  s = LoadTokenizer(o, dir, *model, &tokenizer);
  if (!s.ok()) return Fail(s.message() + " (--tokenizer FILE, or --tokenizer bytes)");
  std::unique_ptr<ChatTemplate> chat;
  if (o.preset.empty() || !o.chat_template.empty()) {
    s = ChatTemplate::Load(dir, o.chat_template, &chat);
    if (!s.ok()) return Fail(s.message());
  }

  Metrics metrics;
  SchedulerOptions so;
  so.slots = o.slots;
  so.max_queue = o.max_queue;
  so.prefill_chunk = o.prefill_chunk;
  so.state_cache_bytes = o.state_cache_mb << 20;
  so.max_context = o.context;
  std::unique_ptr<Scheduler> scheduler;
  s = Scheduler::Create(*model, *tokenizer, so, &metrics, &scheduler);
  if (!s.ok()) return Fail(s.message());

  ServedModel served;
  served.model = model.get();
  served.tokenizer = tokenizer.get();
  served.chat_template = chat.get();
  served.id = ModelId(o, dir);
  const int64_t session_context = scheduler->max_context();
  const int64_t config_context = model->config().max_position_embeddings;
  served.context = o.context > 0         ? o.context
                   : session_context > 0 ? session_context
                   : config_context > 0  ? config_context
                                         : kDefaultContext;
  if (session_context > 0) served.context = std::min(served.context, session_context);
  served.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();

  httplib::Server http;
  HttpApi api(served, scheduler.get(), &metrics, o.api_key, o.max_body_bytes);
  api.Register(http);
  // One HTTP thread per connection in flight: a streaming request holds its thread.
  const int http_threads =
      o.http_threads > 0 ? o.http_threads : static_cast<int>(o.slots + o.max_queue + 16);
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  int port = o.port;
  if (port == 0) {
    port = http.bind_to_any_port(o.host);
    if (port < 0) return Fail("cannot bind " + o.host);
  } else if (!http.bind_to_port(o.host, port)) {
    return Fail("cannot bind " + o.host + ":" + std::to_string(port));
  }
  std::printf(
      "ssmkit serve: %s (%s weights, %lld slots, %d threads, context %lld, state cache %lld MB%s) "
      "listening on http://%s:%d\n",
      served.id.c_str(), model->weight_dtype_name().c_str(), static_cast<long long>(o.slots),
      NumThreads(), static_cast<long long>(served.context),
      static_cast<long long>(o.state_cache_mb), chat ? ", chat template" : "", o.host.c_str(),
      port);
  std::fflush(stdout);

  std::atomic<bool> done{false}, signalled{false};
  std::thread drainer([&] {
    WaitForSignal(done, &signalled);
    if (!signalled.load()) return;
    std::printf("ssmkit serve: draining %lld request(s) in flight\n",
                static_cast<long long>(api.in_flight()));
    std::fflush(stdout);
    api.BeginDrain();
    scheduler->Drain();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(o.drain_seconds);
    while ((!scheduler->Idle() || api.in_flight() > 0) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // A signal that came before listen started: stop() needs a running server.
    while (!http.is_running() && !done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    http.stop();
  });
  const bool listened = http.listen_after_bind();
  done.store(true);
  drainer.join();
  scheduler->Stop();
  if (!listened && !signalled.load()) return Fail("the HTTP server stopped unexpectedly");
  std::printf("ssmkit serve: stopped\n");
  return 0;
}

}  // namespace ssmkit::server

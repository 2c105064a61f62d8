#include "server/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

namespace ssmkit::server {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

ApiError EngineError(const Status& s) {
  return ApiError::Internal("the engine failed: " + s.message());
}

}  // namespace

Scheduler::Scheduler(const Model& model, const Tokenizer& tokenizer,
                     const SchedulerOptions& options, Metrics* metrics)
    : model_(model),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      cache_(options.state_cache_bytes) {}

Status Scheduler::Create(const Model& model, const Tokenizer& tokenizer,
                         const SchedulerOptions& options, Metrics* metrics,
                         std::unique_ptr<Scheduler>* scheduler) {
  if (options.slots < 1 || options.max_queue < 0 || options.prefill_chunk < 1 ||
      options.state_cache_bytes < 0) {
    return Status::InvalidArgument(
        "scheduler: expected slots >= 1, max_queue >= 0, prefill_chunk >= 1 and "
        "state_cache_bytes >= 0, given " +
        std::to_string(options.slots) + ", " + std::to_string(options.max_queue) + ", " +
        std::to_string(options.prefill_chunk) + ", " + std::to_string(options.state_cache_bytes));
  }
  std::unique_ptr<Scheduler> s(new Scheduler(model, tokenizer, options, metrics));
  SessionOptions session_options;
  session_options.max_batch = options.slots;
  session_options.max_context = options.max_context;
  SSMKIT_RETURN_IF_ERROR(Session::Create(model, session_options, &s->session_));
  s->V_ = s->session_->vocab_size();
  s->sampled_vocab_ = std::min(s->V_, s->session_->config_vocab_size());
  const size_t n = static_cast<size_t>(options.slots);
  try {
    s->slots_.resize(n);
    s->step_slots_.reserve(n);
    s->step_tokens_.reserve(n);
    s->prefill_logits_.resize(n * static_cast<size_t>(s->V_));
    s->decode_logits_.resize(n * static_cast<size_t>(s->V_));
    s->logprob_order_.resize(static_cast<size_t>(s->V_));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("scheduler: out of memory for " + std::to_string(n) + " slots");
  }
  metrics->SetLoad(0, 0, options.slots);
  metrics->SetCache(s->cache_.stats(), options.state_cache_bytes);
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  *scheduler = std::move(s);
  return Status::Ok();
}

Scheduler::~Scheduler() { Stop(); }

Scheduler::Admission Scheduler::Submit(std::shared_ptr<RequestState> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) return Admission::kDraining;
    if (static_cast<int64_t>(queue_.size()) + running_ >= options_.slots + options_.max_queue) {
      return Admission::kQueueFull;
    }
    queue_.push_back(std::move(request));
  }
  wake_.notify_one();
  return Admission::kAccepted;
}

void Scheduler::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool Scheduler::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && running_ == 0;
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool Scheduler::WaitForWork() {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait(lock, [this] { return stopping_ || running_ > 0 || !queue_.empty(); });
  return !stopping_;
}

void Scheduler::Loop() {
  while (WaitForWork()) {
    Admit();
    DropCancelled();
    PrefillStep();
    DecodeStep();
    PublishLoad();
  }
  ApiError shutdown;
  shutdown.http_status = 503;
  shutdown.type = "server_error";
  shutdown.message = "the server is shutting down";
  for (Slot& s : slots_) {
    if (s.request == nullptr) continue;
    s.request->Fail(shutdown);
    Release(s);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : queue_) r->Fail(shutdown);
  queue_.clear();
}

void Scheduler::Admit() {
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    if (slots_[i].request != nullptr) continue;
    std::shared_ptr<RequestState> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Requests whose client left while they waited are dropped unseen.
      while (!queue_.empty() && queue_.front()->cancelled()) queue_.pop_front();
      if (queue_.empty()) break;
      next = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    Start(i, std::move(next));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(queue_, [](const auto& r) { return r->cancelled(); });
}

void Scheduler::Start(int32_t slot_id, std::shared_ptr<RequestState> request) {
  Slot& s = slots_[slot_id];
  s = Slot{};
  s.request = std::move(request);
  s.admitted = admissions_++;
  const GenerationJob& job = s.request->job();
  Status st = Sampler::Create(job.sampling, sampled_vocab_, &s.sampler);
  if (st.ok()) st = session_->ResetSlot(slot_id);
  if (!st.ok()) {
    s.request->Fail(EngineError(st));
    Release(s);
    return;
  }
  s.text.emplace(tokenizer_, job.stop);
  const PrefixCache::Entry* hit =
      options_.state_cache_bytes > 0 ? cache_.Lookup(job.prompt) : nullptr;
  if (hit != nullptr && session_->RestoreSlot(slot_id, hit->state).ok()) {
    s.prefilled = static_cast<int64_t>(hit->tokens.size());
  } else {
    hit = nullptr;
    (void)session_->ResetSlot(slot_id);  // a failed restore leaves nothing behind
  }
  s.request->SetCachedTokens(s.prefilled);
  if (hit != nullptr && s.prefilled == static_cast<int64_t>(job.prompt.size())) {
    // The whole prompt was cached, with its last logits: the first token needs no prefill.
    s.decoding = true;
    Emit(s, hit->logits);
  }
}

void Scheduler::DropCancelled() {
  for (Slot& s : slots_) {
    if (s.request != nullptr && s.request->cancelled()) Release(s);
  }
}

void Scheduler::PrefillStep() {
  step_slots_.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    if (slots_[i].request != nullptr && !slots_[i].decoding) step_slots_.push_back(i);
  }
  if (step_slots_.empty()) return;
  std::sort(step_slots_.begin(), step_slots_.end(),
            [this](int32_t a, int32_t b) { return slots_[a].admitted < slots_[b].admitted; });
  const int64_t chunk = options_.prefill_chunk;
  int64_t budget = chunk, tokens = 0;
  size_t n = 0;
  chunks_.resize(step_slots_.size());
  for (; n < step_slots_.size() && budget > 0; ++n) {
    const Slot& s = slots_[step_slots_[n]];
    const std::vector<int32_t>& prompt = s.request->job().prompt;
    const int64_t pos = s.prefilled;
    const int64_t end =
        std::min({static_cast<int64_t>(prompt.size()), (pos / chunk + 1) * chunk, pos + budget});
    chunks_[n].assign(prompt.begin() + pos, prompt.begin() + end);
    budget -= end - pos;
    tokens += end - pos;
  }
  step_slots_.resize(n);
  chunks_.resize(n);
  const auto t0 = Clock::now();
  const Status st = session_->PrefillSlots(step_slots_, chunks_, prefill_logits_);
  if (!st.ok()) {
    FailSlots(step_slots_, st);
    return;
  }
  metrics_->ObservePrefill(tokens, Seconds(Clock::now() - t0));
  for (size_t i = 0; i < n; ++i) {
    Slot& s = slots_[step_slots_[i]];
    s.prefilled += static_cast<int64_t>(chunks_[i].size());
    const std::span<const float> row =
        std::span<const float>(prefill_logits_).subspan(i * V_, static_cast<size_t>(V_));
    const bool done = s.prefilled == static_cast<int64_t>(s.request->job().prompt.size());
    if (done || s.prefilled % chunk == 0) SaveToCache(step_slots_[i], row);
    if (done) {
      s.decoding = true;
      Emit(s, row);
    }
  }
}

void Scheduler::DecodeStep() {
  step_slots_.clear();
  step_tokens_.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    if (slots_[i].request != nullptr && slots_[i].decoding) {
      step_slots_.push_back(i);
      step_tokens_.push_back(slots_[i].last_token);
    }
  }
  if (step_slots_.empty()) return;
  const auto t0 = Clock::now();
  const Status st = session_->DecodeSlots(step_slots_, step_tokens_, decode_logits_);
  if (!st.ok()) {
    FailSlots(step_slots_, st);
    return;
  }
  metrics_->ObserveDecodeStep(static_cast<int64_t>(step_slots_.size()), Seconds(Clock::now() - t0));
  for (size_t i = 0; i < step_slots_.size(); ++i) {
    Emit(slots_[step_slots_[i]],
         std::span<const float>(decode_logits_).subspan(i * V_, static_cast<size_t>(V_)));
  }
}

void Scheduler::Emit(Slot& s, std::span<const float> logits) {
  const GenerationJob& job = s.request->job();
  const int32_t token = s.sampler.Sample(logits.first(static_cast<size_t>(sampled_vocab_)));
  const Clock::time_point now = Clock::now();
  if (s.generated == 0) {
    metrics_->ObserveTimeToFirstToken(Seconds(now - s.request->arrival()));
  } else {
    metrics_->ObserveInterTokenLatency(Seconds(now - s.last_token_time));
  }
  s.last_token_time = now;
  s.last_token = token;
  ++s.generated;
  std::optional<TokenLogprob> logprob;
  if (job.top_logprobs >= 0) logprob = Logprobs(token, job.top_logprobs, logits);
  TokenLogprob* lp = logprob ? &*logprob : nullptr;
  if (token == job.eos_token_id) {
    s.request->Append("", lp, s.generated);
    s.request->Finish(s.text->Finish(), "stop", s.generated);
    Release(s);
    return;
  }
  bool stopped = false;
  const std::string text = s.text->Push(token, &stopped);
  s.request->Append(text, lp, s.generated);
  if (stopped) {
    s.request->Finish("", "stop", s.generated);
    Release(s);
  } else if (s.generated >= job.max_tokens) {
    s.request->Finish(s.text->Finish(), "length", s.generated);
    Release(s);
  }
}

TokenLogprob Scheduler::Logprobs(int32_t token, int n, std::span<const float> logits) {
  const int64_t V = sampled_vocab_;
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    if (!std::isnan(logits[v])) top = std::max(top, static_cast<double>(logits[v]));
  }
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    if (!std::isnan(logits[v])) sum += std::exp(static_cast<double>(logits[v]) - top);
  }
  const double log_z = top + std::log(sum);
  TokenLogprob lp;
  tokenizer_.AppendTokenBytes(token, /*skip_special=*/false, &lp.bytes);
  lp.logprob = static_cast<float>(logits[token] - log_z);
  if (n <= 0) return lp;
  for (int64_t v = 0; v < V; ++v) logprob_order_[v] = static_cast<int32_t>(v);
  auto larger = [&logits](int32_t a, int32_t b) {
    const float x = logits[a], y = logits[b];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y || (x == y && a < b);
  };
  const int64_t m = std::min<int64_t>(n, V);
  std::partial_sort(logprob_order_.begin(), logprob_order_.begin() + m, logprob_order_.begin() + V,
                    larger);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t id = logprob_order_[i];
    std::string bytes;
    tokenizer_.AppendTokenBytes(id, false, &bytes);
    lp.top.emplace_back(std::move(bytes), static_cast<float>(logits[id] - log_z));
  }
  return lp;
}

void Scheduler::SaveToCache(int32_t slot_id, std::span<const float> logits) {
  if (options_.state_cache_bytes == 0) return;
  const Slot& s = slots_[slot_id];
  const std::vector<int32_t>& prompt = s.request->job().prompt;
  const std::span<const int32_t> prefix(prompt.data(), static_cast<size_t>(s.prefilled));
  if (cache_.Contains(prefix)) return;
  int64_t bytes = 0;
  if (!session_->SlotStateBytes(slot_id, &bytes).ok()) return;
  if (bytes + static_cast<int64_t>(logits.size() * sizeof(float)) > cache_.capacity_bytes()) {
    return;
  }
  try {
    PrefixCache::Entry e;
    e.tokens.assign(prefix.begin(), prefix.end());
    e.state.resize(static_cast<size_t>(bytes));
    e.logits.assign(logits.begin(), logits.end());
    int64_t written = 0;
    if (!session_->SaveSlot(slot_id, e.state, &written).ok()) return;
    e.state.resize(static_cast<size_t>(written));
    cache_.Insert(std::move(e));
  } catch (const std::bad_alloc&) {
    // No room for one more state: the request goes on uncached.
  }
}

void Scheduler::Release(Slot& s) {
  if (s.request == nullptr) return;
  metrics_->AddTokens(static_cast<int64_t>(s.request->job().prompt.size()), s.generated);
  s.request.reset();
  s.text.reset();
  s.decoding = false;
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
}

void Scheduler::FailSlots(const std::vector<int32_t>& ids, const Status& status) {
  // The batched call failed for all of them: their states are gone (Session resets them).
  const std::vector<int32_t> copy = ids;
  for (int32_t id : copy) {
    Slot& s = slots_[id];
    if (s.request == nullptr) continue;
    s.request->Fail(EngineError(status));
    Release(s);
    (void)session_->ResetSlot(id);
  }
}

void Scheduler::PublishLoad() {
  int64_t queued = 0, running = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = static_cast<int64_t>(queue_.size());
    running = running_;
  }
  metrics_->SetLoad(queued, running, options_.slots);
  metrics_->SetCache(cache_.stats(), options_.state_cache_bytes);
}

}  // namespace ssmkit::server

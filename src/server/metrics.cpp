#include "server/metrics.hpp"

#include <cstdio>

namespace ssmkit::server {
namespace {

std::string Number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", x);
  return buf;
}

void Head(const std::string& name, const char* type, const std::string& help, std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Scalar(const std::string& name, const char* type, const std::string& help, double value,
            std::string* out) {
  Head(name, type, help, out);
  *out += name + " " + Number(value) + "\n";
}

// Latencies from 1 ms to 60 s, roughly x2.5 apart.
std::vector<double> SecondsBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double x) {
  size_t i = 0;
  while (i < bounds_.size() && x > bounds_[i]) ++i;
  ++buckets_[i];
  sum_ += x;
  ++count_;
}

void Histogram::Write(const std::string& name, const std::string& help, std::string* out) const {
  Head(name, "histogram", help, out);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i];
    *out +=
        name + "_bucket{le=\"" + Number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += buckets_.back();
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  *out += name + "_sum " + Number(sum_) + "\n";
  *out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_(SecondsBounds()),
      itl_(SecondsBounds()),
      decode_batch_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void Metrics::CountRequest(const std::string& endpoint, const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, outcome}];
}

void Metrics::AddTokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(seconds);
}

void Metrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(seconds);
}

void Metrics::ObserveDecodeStep(int64_t batch, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  decode_batch_.Observe(static_cast<double>(batch));
  decode_seconds_ += seconds;
  ++decode_steps_;
}

void Metrics::ObservePrefill(int64_t tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prefill_tokens_ += tokens;
  prefill_seconds_ += seconds;
}

void Metrics::SetLoad(int64_t queued, int64_t slots_busy, int64_t slots_total) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_ = queued;
  slots_busy_ = slots_busy;
  slots_total_ = slots_total;
}

void Metrics::SetCache(const PrefixCache::Stats& stats, int64_t capacity_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_ = stats;
  cache_capacity_ = capacity_bytes;
}

std::string Metrics::Text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  Head("ssmkit_requests_total", "counter",
       "HTTP generation requests by endpoint and outcome (ok, stopped_by_client, rejected, "
       "overloaded, error)",
       &out);
  for (const auto& [key, n] : requests_) {
    out += "ssmkit_requests_total{endpoint=\"" + key.first + "\",outcome=\"" + key.second + "\"} " +
           std::to_string(n) + "\n";
  }
  Scalar("ssmkit_prompt_tokens_total", "counter", "prompt tokens of finished requests",
         static_cast<double>(prompt_tokens_), &out);
  Scalar("ssmkit_generated_tokens_total", "counter", "tokens generated",
         static_cast<double>(generated_tokens_), &out);
  Scalar("ssmkit_prefill_tokens_total", "counter",
         "prompt tokens prefilled (not restored from the state cache)",
         static_cast<double>(prefill_tokens_), &out);
  Scalar("ssmkit_prefill_seconds_total", "counter", "time spent in prefill calls", prefill_seconds_,
         &out);
  Scalar("ssmkit_decode_steps_total", "counter", "batched decode steps",
         static_cast<double>(decode_steps_), &out);
  Scalar("ssmkit_decode_seconds_total", "counter", "time spent in decode steps", decode_seconds_,
         &out);
  Scalar("ssmkit_queue_depth", "gauge", "requests waiting for a slot", static_cast<double>(queued_),
         &out);
  Scalar("ssmkit_slots_busy", "gauge", "slots holding a request", static_cast<double>(slots_busy_),
         &out);
  Scalar("ssmkit_slots_total", "gauge", "slots of the session (--slots)",
         static_cast<double>(slots_total_), &out);
  ttft_.Write("ssmkit_time_to_first_token_seconds",
              "from a request's arrival to its first generated token", &out);
  itl_.Write("ssmkit_inter_token_latency_seconds", "between successive tokens of a request", &out);
  decode_batch_.Write("ssmkit_decode_batch_size", "sequences advanced by one decode step", &out);
  Scalar("ssmkit_state_cache_hits_total", "counter", "prompts that restored a cached prefix state",
         static_cast<double>(cache_.hits), &out);
  Scalar("ssmkit_state_cache_misses_total", "counter", "prompts with no cached prefix",
         static_cast<double>(cache_.misses), &out);
  Scalar("ssmkit_state_cache_reused_tokens_total", "counter",
         "prompt tokens restored from the cache instead of prefilled",
         static_cast<double>(cache_.reused_tokens), &out);
  Scalar("ssmkit_state_cache_inserts_total", "counter", "prefix states stored",
         static_cast<double>(cache_.inserts), &out);
  Scalar("ssmkit_state_cache_evictions_total", "counter",
         "prefix states evicted (least recently used)", static_cast<double>(cache_.evictions),
         &out);
  Scalar("ssmkit_state_cache_entries", "gauge", "prefix states held",
         static_cast<double>(cache_.entries), &out);
  Scalar("ssmkit_state_cache_bytes", "gauge", "bytes the prefix states hold",
         static_cast<double>(cache_.bytes), &out);
  Scalar("ssmkit_state_cache_capacity_bytes", "gauge", "--state-cache-mb",
         static_cast<double>(cache_capacity_), &out);
  return out;
}

}  // namespace ssmkit::server

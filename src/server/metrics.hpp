// The server's counters for GET /metrics, in Prometheus' text exposition format (version
// 0.0.4): requests by outcome, prompt and generated tokens, queue depth, slots in use, the
// time-to-first-token and inter-token-latency histograms, decode batch sizes and the prefix
// state cache. Thread-safe: HTTP threads and the scheduler thread both update it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/prefix_cache.hpp"

namespace ssmkit::server {

// A cumulative histogram over fixed upper bounds (seconds, or a count).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double x);
  // The `name` metric's bucket, sum and count lines.
  void Write(const std::string& name, const std::string& help, std::string* out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> buckets_;  // one per bound, then +Inf (not cumulative here)
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // outcome: "ok", "stopped_by_client", "rejected" (4xx), "overloaded", "error" (5xx).
  void CountRequest(const std::string& endpoint, const std::string& outcome);
  void AddTokens(int64_t prompt, int64_t generated);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveDecodeStep(int64_t batch, double seconds);
  void ObservePrefill(int64_t tokens, double seconds);
  void SetLoad(int64_t queued, int64_t slots_busy, int64_t slots_total);
  void SetCache(const PrefixCache::Stats& stats, int64_t capacity_bytes);

  std::string Text() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  int64_t prefill_tokens_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  int64_t decode_steps_ = 0;
  int64_t queued_ = 0, slots_busy_ = 0, slots_total_ = 0;
  PrefixCache::Stats cache_;
  int64_t cache_capacity_ = 0;
  Histogram ttft_, itl_, decode_batch_;
};

}  // namespace ssmkit::server

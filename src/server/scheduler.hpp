// Continuous batching over a Session's slots. One scheduler thread is the session's only
// caller; each turn of its loop:
//   1. admits queued requests into free slots: a slot is emptied (ResetSlot), then given the
//      state of the longest cached prefix of the prompt (RestoreSlot), if any;
//   2. drops requests whose client went away (their slots are free from this step on);
//   3. prefills one chunk of at most prefill_chunk prompt tokens, spread over the slots still
//      prefilling in the order they were admitted (one PrefillSlots call); chunks end at
//      multiples of prefill_chunk, where the state is cached, and at the prompt's end, where
//      it is cached and the first token is sampled;
//   4. advances every decoding slot by one token in one batched step (DecodeSlots), samples
//      each slot's next token with its own sampler, and hands the text to its request.
// Requests join and leave at step boundaries without disturbing the others: a slot's state
// belongs to its sequence alone, so a sequence's tokens are those it would get alone (up to
// the rounding of the batched matrix products: docs/server.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "server/metrics.hpp"
#include "server/prefix_cache.hpp"
#include "server/request_state.hpp"
#include "server/text_output.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/sampler.hpp"
#include "ssmkit/tokenizer.hpp"

namespace ssmkit::server {

struct SchedulerOptions {
  int64_t slots = 8;              // sequences in flight (the session's max_batch)
  int64_t max_queue = 64;         // requests waiting for a slot before Submit refuses
  int64_t prefill_chunk = 256;    // prompt tokens per prefill call; the cache's interval
  int64_t state_cache_bytes = 0;  // 0: no prefix state cache
  int64_t max_context = 0;        // tokens per slot for attention models (SessionOptions)
};

class Scheduler {
 public:
  // Creates the session and starts the scheduler thread. The model, tokenizer and metrics
  // must outlive the scheduler.
  static Status Create(const Model& model, const Tokenizer& tokenizer,
                       const SchedulerOptions& options, Metrics* metrics,
                       std::unique_ptr<Scheduler>* scheduler);
  ~Scheduler();  // Stop()

  enum class Admission { kAccepted, kQueueFull, kDraining };
  Admission Submit(std::shared_ptr<RequestState> request);
  // Refuses new requests from now on; those queued or running continue.
  void Drain();
  // Nothing queued or running.
  bool Idle() const;
  // Fails what is queued or running (503) and joins the thread.
  void Stop();

  int64_t slots() const { return options_.slots; }
  // The tokens a slot holds at most (attention models), or -1 (no limit of the session's).
  int64_t max_context() const { return session_->max_context(); }

 private:
  struct Slot {
    std::shared_ptr<RequestState> request;  // nullptr: free
    int64_t prefilled = 0;                  // prompt tokens in the slot's state
    bool decoding = false;
    int32_t last_token = -1;
    int64_t generated = 0;
    uint64_t admitted = 0;  // admission order
    Sampler sampler;
    std::optional<TextOutput> text;
    Clock::time_point last_token_time;
  };

  Scheduler(const Model& model, const Tokenizer& tokenizer, const SchedulerOptions& options,
            Metrics* metrics);
  void Loop();
  // Waits for work; false once stopping.
  bool WaitForWork();
  void Admit();
  void Start(int32_t slot_id, std::shared_ptr<RequestState> request);
  void DropCancelled();
  void PrefillStep();
  void DecodeStep();
  // The slot's next token, sampled from its logits row: sent, and the request finished when
  // it ends it.
  void Emit(Slot& slot, std::span<const float> logits);
  void Release(Slot& slot);
  void FailSlots(const std::vector<int32_t>& ids, const Status& status);
  void SaveToCache(int32_t slot_id, std::span<const float> logits);
  TokenLogprob Logprobs(int32_t token, int n, std::span<const float> logits);
  void PublishLoad();

  const Model& model_;
  const Tokenizer& tokenizer_;
  const SchedulerOptions options_;
  Metrics* metrics_;
  std::unique_ptr<Session> session_;
  PrefixCache cache_;
  int64_t V_ = 0, sampled_vocab_ = 0;

  std::vector<Slot> slots_;
  uint64_t admissions_ = 0;
  // Workspaces of the loop, sized at creation.
  std::vector<int32_t> step_slots_, step_tokens_;
  std::vector<std::vector<int32_t>> chunks_;
  std::vector<float> prefill_logits_, decode_logits_;  // (slots, V)
  std::vector<double> logprob_work_;                   // (V)
  std::vector<int32_t> logprob_order_;                 // (V)

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<RequestState>> queue_;  // guarded by mu_
  int64_t running_ = 0;                              // guarded by mu_
  bool draining_ = false, stopping_ = false;         // guarded by mu_
  std::thread thread_;
};

}  // namespace ssmkit::server

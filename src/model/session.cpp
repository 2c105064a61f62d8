// Session: slots of per-sequence state, the packing of a forward pass's tokens, the embedding
// and the LM head around model/forward.cpp's pass through the blocks.
// Dimension legend: n sequences of a call, T tokens (packed), Lmax the longest chunk,
// d d_model, V vocab.
#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "model/forward.hpp"
#include "model/model_impl.hpp"
#include "model/session_impl.hpp"
#include "model/views.hpp"
#include "ssmkit/linear.hpp"

namespace ssmkit {
namespace {

// What the caller passed, checked before anything is written.
Status CheckSlots(std::span<const int32_t> slots, int64_t max_batch, const char* fn) {
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n < 1 || n > max_batch) {
    return Status::InvalidArgument(std::string(fn) + ": slots: expected 1 to " +
                                   std::to_string(max_batch) +
                                   " (the session's max_batch), given " + std::to_string(n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] < 0 || slots[i] >= max_batch) {
      return Status::InvalidArgument(std::string(fn) + ": slot " + std::to_string(slots[i]) +
                                     " outside [0, " + std::to_string(max_batch) + ")");
    }
    for (int64_t j = 0; j < i; ++j) {
      if (slots[j] == slots[i]) {
        return Status::InvalidArgument(std::string(fn) + ": slot " + std::to_string(slots[i]) +
                                       " given twice");
      }
    }
  }
  return Status::Ok();
}

Status CheckLogits(std::span<float> logits, int64_t n, int64_t V) {
  if (static_cast<int64_t>(logits.size()) >= n * V) return Status::Ok();
  return Status::InvalidArgument("decode: logits: expected (B, V) = (" + std::to_string(n) + ", " +
                                 std::to_string(V) + ") floats, given " +
                                 std::to_string(logits.size()));
}

}  // namespace

const ModelConfig& Session::Impl::config() const { return model->config; }

int64_t Session::Impl::sampled_vocab() const {
  const int64_t V = config().vocab_size, stated = config().config_vocab_size;
  return stated > 0 ? std::min(V, stated) : V;
}

Status Session::Impl::CpuOnly(const char* fn) const {
  if (!gpu) return Status::Ok();
  return Status::Unsupported(std::string(fn) +
                             ": a CUDA session serves Prefill, Decode and DecodeGreedy only (the "
                             "slot calls run on the CPU)");
}

Status Session::Impl::CheckStep(std::span<const int32_t> tokens) const {
  if (batch == 0) return Status::InvalidArgument("decode: no sequences: call Prefill first");
  if (static_cast<int64_t>(tokens.size()) != batch) {
    return Status::InvalidArgument("decode: tokens: expected one per sequence (" +
                                   std::to_string(batch) + "), given " +
                                   std::to_string(tokens.size()));
  }
  return CheckTokens(tokens.data(), batch, "decode");
}

Status Session::Impl::StepOnGpu(std::span<const int32_t> tokens, std::span<float> logits,
                                std::span<int32_t> next) {
  const Status s = gpu->Decode(tokens, logits, next);
  if (!s.ok()) {
    batch = 0;  // the states may be partly advanced
    return s;
  }
  for (int64_t b = 0; b < batch; ++b) lengths[b] += 1;
  return Status::Ok();
}
const model::ModelWeights& Session::Impl::weights() const { return model->weights; }

Status Session::Impl::CheckTokens(const int32_t* ids, int64_t n, const std::string& what) const {
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= config().vocab_size) {
      return Status::InvalidArgument(what + ": token " + std::to_string(ids[t]) + " at position " +
                                     std::to_string(t) + " outside the vocabulary [0, " +
                                     std::to_string(config().vocab_size) + ")");
    }
  }
  return Status::Ok();
}

void Session::Impl::Embed(const int32_t* ids, int64_t n, float* hidden) const {
  const Tensor& e = weights().embedding;
  const int64_t d = config().d_model;
  const float m = config().multipliers.embedding;
  const bool quantized = DTypeIsQuantized(e.dtype);
  for (int64_t t = 0; t < n; ++t) {
    if (quantized) {  // a GGUF embedding: row ids[t] decoded (d is whole blocks, as bound)
      quant::DequantizeRow(e.dtype,
                           static_cast<const uint8_t*>(e.data) + ids[t] * DTypeRowBytes(e.dtype, d),
                           d, hidden + t * d);
    } else {
      RowToF32(e.data, e.dtype, ids[t] * d, d, hidden + t * d);
    }
    if (m != 1.0f) {
      for (int64_t i = 0; i < d; ++i) hidden[t * d + i] *= m;
    }
  }
}

Status Session::Impl::LmHead(const float* normed, int64_t rows, float* logits) const {
  return model::LmHead(config(), weights(), model::HostF32(normed), rows, model::HostF32(logits));
}

Status Session::Impl::Reserve(const model::SeqBatch& batch) {
  if (kv.layers() == 0) return Status::Ok();
  for (int64_t i = 0; i < batch.n; ++i) {
    SSMKIT_RETURN_IF_ERROR(kv.Reserve(batch.slots[i], batch.start[i] + batch.length(i)));
  }
  return Status::Ok();
}

void Session::Impl::Reset(int64_t slot) {
  states.Clear(slot);
  if (kv.layers() > 0) kv.Release(slot);
  lengths[slot] = 0;
}

Status Session::Impl::Run(const model::SeqBatch& batch, float* base) {
  const model::ForwardBuffers buf = model::CarveForward(batch.T, config().d_model, base);
  Embed(packed_tokens.data(), batch.T, buf.hidden.f32());
  // The slots' block-table rows and new lengths, shared by every attention block.
  const int64_t Bk = kv.blocks_per_slot();
  for (int64_t i = 0; i < batch.n && kv.layers() > 0; ++i) {
    std::copy_n(kv.table(batch.slots[i]), Bk, kv_tables.data() + i * Bk);
    kv_lens[i] = static_cast<int32_t>(batch.start[i] + batch.length(i));
  }
  const model::ForwardContext ctx{
      config(), weights(), states, kv, {kv_tables.data(), kv_lens.data()}};
  const Status s = model::RunBlocks(ctx, batch, buf);
  if (!s.ok()) {
    // A block failed half-way: the slots' states are partly advanced, so they are emptied.
    for (int64_t i = 0; i < batch.n; ++i) Reset(batch.slots[i]);
    return s;
  }
  for (int64_t i = 0; i < batch.n; ++i) lengths[batch.slots[i]] += batch.length(i);
  return Status::Ok();
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Status Session::Create(const Model& model, int64_t max_batch, std::unique_ptr<Session>* session) {
  SessionOptions options;
  options.max_batch = max_batch;
  return Create(model, options, session);
}

Status Session::Create(const Model& model, const SessionOptions& options,
                       std::unique_ptr<Session>* session) {
  const int64_t max_batch = options.max_batch;
  if (max_batch < 1) {
    return Status::InvalidArgument("session: max_batch: expected >= 1, given " +
                                   std::to_string(max_batch));
  }
  if (options.device != Device::kCpu && options.device != Device::kCuda) {
    return Status::InvalidArgument("session: device: expected cpu (0) or cuda (1), given " +
                                   std::to_string(static_cast<int>(options.device)));
  }
  if (options.max_context < 0 || options.kv_block_size < 1) {
    return Status::InvalidArgument(
        "session: max_context must be >= 0 and kv_block_size >= 1 (given " +
        std::to_string(options.max_context) + ", " + std::to_string(options.kv_block_size) + ")");
  }
  try {
    auto impl = std::make_unique<Impl>();
    impl->model = &model.impl();
    impl->options = options;
    const ModelConfig& c = model.config();
    const model::ModelWeights& w = model.impl().weights;
    impl->lengths.assign(static_cast<size_t>(max_batch), 0);
    impl->identity.resize(static_cast<size_t>(max_batch));
    for (int64_t i = 0; i < max_batch; ++i) impl->identity[i] = static_cast<int32_t>(i);
    if (options.device == Device::kCuda) {
      SSMKIT_RETURN_IF_ERROR(model::GpuDecoder::Create(model.impl(), max_batch, &impl->gpu));
      impl->options.max_context = -1;
      session->reset(new Session(std::move(impl)));
      return Status::Ok();
    }
    SSMKIT_RETURN_IF_ERROR(Sampler::Create({}, impl->sampled_vocab(), &impl->greedy));
    impl->states.Allocate(c, w.ssm_caches, max_batch);
    if (w.kv_caches > 0) {
      int64_t context = options.max_context;
      if (context == 0) {
        context = c.max_position_embeddings > 0
                      ? std::min<int64_t>(c.max_position_embeddings, 32768)
                      : 4096;
      }
      const AttentionConfig& a = c.attention;
      SSMKIT_RETURN_IF_ERROR(impl->kv.Allocate(w.kv_caches, a.num_kv_heads, a.head_dim, a.head_dim,
                                               options.kv_block_size, max_batch, context));
    }
    impl->options.max_context = w.kv_caches > 0 ? impl->kv.max_context() : -1;
    impl->kv_tables.assign(static_cast<size_t>(max_batch * impl->kv.blocks_per_slot()), -1);
    impl->kv_lens.assign(static_cast<size_t>(max_batch), 0);
    impl->ReservePacking(max_batch);
    impl->decode_buffer.Assign(
        static_cast<size_t>(model::ForwardFloats(c, w, max_batch, /*decode=*/true)));
    session->reset(new Session(std::move(impl)));
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("session: out of memory for a batch of " +
                               std::to_string(max_batch));
  }
}

void Session::Impl::ReservePacking(int64_t tokens) {
  const size_t n = static_cast<size_t>(lengths.size());
  packed_tokens.reserve(static_cast<size_t>(tokens));
  positions.reserve(static_cast<size_t>(tokens));
  offset.resize(n + 1);
  start.resize(n);
  slots.resize(n);
}

int64_t Session::batch() const { return impl_->batch; }
int64_t Session::max_batch() const { return impl_->options.max_batch; }
int64_t Session::max_context() const { return impl_->options.max_context; }
int64_t Session::vocab_size() const { return impl_->config().vocab_size; }
int64_t Session::config_vocab_size() const { return impl_->config().config_vocab_size; }

int64_t Session::slot_length(int64_t slot) const {
  if (slot < 0 || slot >= max_batch()) return 0;
  return impl_->lengths[slot];
}

Status Session::ResetSlot(int64_t slot) {
  SSMKIT_RETURN_IF_ERROR(impl_->CpuOnly("reset"));
  if (slot < 0 || slot >= max_batch()) {
    return Status::InvalidArgument("reset: slot " + std::to_string(slot) + " outside [0, " +
                                   std::to_string(max_batch()) + ")");
  }
  impl_->Reset(slot);
  return Status::Ok();
}

Status Session::Prefill(const std::vector<std::vector<int32_t>>& prompts, std::span<float> logits,
                        std::span<float> all_logits) {
  Impl& s = *impl_;
  const int64_t B = static_cast<int64_t>(prompts.size());
  if (B < 1 || B > s.options.max_batch) {
    return Status::InvalidArgument("prefill: expected 1 to " + std::to_string(s.options.max_batch) +
                                   " prompts (the session's max_batch), given " +
                                   std::to_string(B));
  }
  s.batch = 0;  // a failure below leaves no usable batch
  SSMKIT_RETURN_IF_ERROR(s.CheckChunks(prompts, logits, all_logits, "prefill", "prompt"));
  if (s.gpu) {
    if (!all_logits.empty()) {
      return Status::Unsupported(
          "prefill: all_logits: a CUDA session gives the last position's "
          "logits only");
    }
    SSMKIT_RETURN_IF_ERROR(s.gpu->Prefill(prompts, logits));
    for (int64_t b = 0; b < B; ++b) s.lengths[b] = static_cast<int64_t>(prompts[b].size());
    s.batch = B;
    return Status::Ok();
  }
  for (int64_t b = 0; b < B; ++b) s.Reset(b);
  SSMKIT_RETURN_IF_ERROR(
      s.PrefillChecked(std::span<const int32_t>(s.identity).first(B), prompts, logits, all_logits));
  s.batch = B;
  return Status::Ok();
}

Status Session::PrefillSlots(std::span<const int32_t> slots,
                             const std::vector<std::vector<int32_t>>& chunks,
                             std::span<float> logits, std::span<float> all_logits) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.CpuOnly("prefill slots"));
  SSMKIT_RETURN_IF_ERROR(CheckSlots(slots, s.options.max_batch, "prefill"));
  if (chunks.size() != slots.size()) {
    return Status::InvalidArgument("prefill: chunks: expected one per slot (" +
                                   std::to_string(slots.size()) + "), given " +
                                   std::to_string(chunks.size()));
  }
  SSMKIT_RETURN_IF_ERROR(s.CheckChunks(chunks, logits, all_logits, "prefill", "chunk"));
  return s.PrefillChecked(slots, chunks, logits, all_logits);
}

Status Session::Impl::CheckChunks(const std::vector<std::vector<int32_t>>& chunks,
                                  std::span<float> logits, std::span<float> all_logits,
                                  const char* fn, const char* what) const {
  const int64_t n = static_cast<int64_t>(chunks.size()), V = config().vocab_size;
  int64_t L = 0;
  for (int64_t b = 0; b < n; ++b) {
    const std::string name = std::string(fn) + ": " + what + " " + std::to_string(b);
    if (chunks[b].empty()) return Status::InvalidArgument(name + " is empty");
    SSMKIT_RETURN_IF_ERROR(
        CheckTokens(chunks[b].data(), static_cast<int64_t>(chunks[b].size()), name));
    L = std::max<int64_t>(L, static_cast<int64_t>(chunks[b].size()));
  }
  if (static_cast<int64_t>(logits.size()) < n * V) {
    return Status::InvalidArgument(std::string(fn) + ": logits: expected (B, V) = (" +
                                   std::to_string(n) + ", " + std::to_string(V) +
                                   ") floats, given " + std::to_string(logits.size()));
  }
  if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) < n * L * V) {
    return Status::InvalidArgument(std::string(fn) + ": all_logits: expected (B, L, V) = (" +
                                   std::to_string(n) + ", " + std::to_string(L) + ", " +
                                   std::to_string(V) + ") floats, given " +
                                   std::to_string(all_logits.size()));
  }
  return Status::Ok();
}

Status Session::Impl::PrefillChecked(std::span<const int32_t> slot_ids,
                                     const std::vector<std::vector<int32_t>>& chunks,
                                     std::span<float> logits, std::span<float> all_logits) {
  const int64_t n = static_cast<int64_t>(slot_ids.size()), d = config().d_model;
  const int64_t V = config().vocab_size;
  int64_t T = 0, L = 0;
  for (const auto& c : chunks) {
    T += static_cast<int64_t>(c.size());
    L = std::max<int64_t>(L, static_cast<int64_t>(c.size()));
  }
  model::SeqBatch batch;
  try {
    packed_tokens.resize(static_cast<size_t>(T));
    positions.resize(static_cast<size_t>(T));
    const size_t floats =
        static_cast<size_t>(model::ForwardFloats(config(), weights(), T, false) + n * d);
    prefill_buffer.Grow(floats);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("prefill: out of memory for " + std::to_string(T) + " tokens");
  }
  offset[0] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = static_cast<int64_t>(chunks[i].size());
    slots[i] = slot_ids[i];
    start[i] = lengths[slot_ids[i]];
    offset[i + 1] = offset[i] + len;
    std::copy(chunks[i].begin(), chunks[i].end(), packed_tokens.begin() + offset[i]);
    for (int64_t j = 0; j < len; ++j) positions[offset[i] + j] = static_cast<int32_t>(start[i] + j);
  }
  batch.n = n;
  batch.T = T;
  batch.slots = slots.data();
  batch.offset = offset.data();
  batch.start = start.data();
  batch.positions = positions.data();
  batch.decode = false;
  SSMKIT_RETURN_IF_ERROR(Reserve(batch));
  float* base = prefill_buffer.data();
  SSMKIT_RETURN_IF_ERROR(Run(batch, base));
  const model::ForwardBuffers buf = model::CarveForward(T, d, base);
  float* last = base + model::ForwardFloats(config(), weights(), T, false);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(buf.normed.f32() + (offset[i + 1] - 1) * d, d, last + i * d);
  SSMKIT_RETURN_IF_ERROR(LmHead(last, n, logits.data()));
  if (!all_logits.empty()) {
    std::vector<float> every;
    try {
      every.resize(static_cast<size_t>(T * V));
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("prefill: out of memory for all_logits");
    }
    SSMKIT_RETURN_IF_ERROR(LmHead(buf.normed.f32(), T, every.data()));
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(every.data() + offset[i] * V, (offset[i + 1] - offset[i]) * V,
                  all_logits.data() + i * L * V);
    }
  }
  return Status::Ok();
}

Status Session::Decode(std::span<const int32_t> tokens, std::span<float> logits) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.CheckStep(tokens));
  const int64_t B = s.batch;
  if (s.gpu) {
    SSMKIT_RETURN_IF_ERROR(CheckLogits(logits, B, s.config().vocab_size));
    return s.StepOnGpu(tokens, logits, {});
  }
  return DecodeSlots(std::span<const int32_t>(s.identity).first(B), tokens, logits);
}

Status Session::DecodeGreedy(std::span<const int32_t> tokens, std::span<int32_t> next) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.CheckStep(tokens));
  const int64_t B = s.batch, V = s.config().vocab_size;
  if (static_cast<int64_t>(next.size()) < B) {
    return Status::InvalidArgument("decode: next: expected (B) = (" + std::to_string(B) +
                                   ") ids, given " + std::to_string(next.size()));
  }
  if (s.gpu) return s.StepOnGpu(tokens, {}, next);
  if (s.greedy_logits.empty()) {
    try {
      s.greedy_logits.resize(static_cast<size_t>(s.options.max_batch * V));
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("decode: out of memory for the greedy step's logits");
    }
  }
  SSMKIT_RETURN_IF_ERROR(Decode(tokens, s.greedy_logits));
  for (int64_t b = 0; b < B; ++b) {
    next[b] =
        s.greedy.Sample(std::span<const float>(s.greedy_logits).subspan(b * V, s.sampled_vocab()));
  }
  return Status::Ok();
}

Status Session::DecodeSlots(std::span<const int32_t> slot_ids, std::span<const int32_t> tokens,
                            std::span<float> logits) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.CpuOnly("decode slots"));
  SSMKIT_RETURN_IF_ERROR(CheckSlots(slot_ids, s.options.max_batch, "decode"));
  const int64_t n = static_cast<int64_t>(slot_ids.size()), V = s.config().vocab_size;
  if (static_cast<int64_t>(tokens.size()) != n) {
    return Status::InvalidArgument("decode: tokens: expected one per slot (" + std::to_string(n) +
                                   "), given " + std::to_string(tokens.size()));
  }
  SSMKIT_RETURN_IF_ERROR(CheckLogits(logits, n, V));
  SSMKIT_RETURN_IF_ERROR(s.CheckTokens(tokens.data(), n, "decode"));
  for (int64_t i = 0; i < n; ++i) {
    if (s.lengths[slot_ids[i]] == 0) {
      return Status::InvalidArgument("decode: slot " + std::to_string(slot_ids[i]) +
                                     " holds no tokens: prefill it first");
    }
  }
  // Sized for max_batch at creation: no allocation here.
  s.packed_tokens.assign(tokens.begin(), tokens.end());
  s.positions.resize(static_cast<size_t>(n));
  s.offset[0] = 0;
  for (int64_t i = 0; i < n; ++i) {
    s.slots[i] = slot_ids[i];
    s.start[i] = s.lengths[slot_ids[i]];
    s.offset[i + 1] = i + 1;
    s.positions[i] = static_cast<int32_t>(s.start[i]);
  }
  model::SeqBatch batch;
  batch.n = n;
  batch.T = n;
  batch.slots = s.slots.data();
  batch.offset = s.offset.data();
  batch.start = s.start.data();
  batch.positions = s.positions.data();
  batch.decode = true;
  SSMKIT_RETURN_IF_ERROR(s.Reserve(batch));
  float* base = s.decode_buffer.data();
  SSMKIT_RETURN_IF_ERROR(s.Run(batch, base));
  return s.LmHead(model::CarveForward(n, s.config().d_model, base).normed.f32(), n, logits.data());
}

}  // namespace ssmkit

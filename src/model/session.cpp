// Session: the residual stream through the layers, the final norm and the LM head, for a prefill
// of a batch of prompts and for decode steps.
// Dimension legend: B batch, L longest prompt, T = B * L, d d_model, V vocab.
//
// Each layer: residual += hidden (layer 0: residual = hidden, the embedding);
// normed = RMSNorm(residual) (one fused AddRmsNorm op, f32 residual); hidden = mixer(normed).
// After the last layer the same fused op applies norm_f, and the LM head reads normed.
#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/cache.hpp"
#include "model/mamba1_block.hpp"
#include "model/mamba2_block.hpp"
#include "model/model_impl.hpp"
#include "model/views.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"

namespace ssmkit {

struct Session::Impl {
  const Model::Impl* model = nullptr;
  int64_t max_batch = 0;
  int64_t batch = 0;  // of the last prefill
  model::StateCache cache;
  std::vector<float> decode_buffer;   // sized once for max_batch
  std::vector<float> prefill_buffer;  // grown to the largest prefill
  std::vector<int32_t> tokens;        // (B, L) left-padded prompts
  std::vector<int64_t> pad;           // (B) padding positions before each prompt

  const ModelConfig& config() const { return model->config; }
  const model::ModelWeights& weights() const { return model->weights; }

  // Floats of decode_buffer: hidden, residual, normed (B, d) and the mixer's activations.
  int64_t DecodeFloats(int64_t B) const {
    const ModelConfig& c = config();
    const int64_t mixer = c.arch == ModelArch::kMamba1 ? model::Mamba1DecodeFloats(c, B)
                                                       : model::Mamba2DecodeFloats(c, B);
    return 3 * B * c.d_model + mixer;
  }

  // Floats of prefill_buffer for T tokens: hidden, residual, normed (T, d), the last rows
  // (B, d) and the mixer's activations.
  int64_t PrefillFloats(int64_t B, int64_t T) const {
    const ModelConfig& c = config();
    const int64_t mixer = c.arch == ModelArch::kMamba1 ? model::Mamba1PrefillFloats(c, T)
                                                       : model::Mamba2PrefillFloats(c, T);
    return 3 * T * c.d_model + B * c.d_model + mixer;
  }

  const Tensor& LayerNorm(int64_t i) const {
    const model::ModelWeights& w = weights();
    return config().arch == ModelArch::kMamba1 ? w.mamba1[i].norm : w.mamba2[i].norm;
  }

  void Embed(const int32_t* ids, int64_t n, float* hidden) const {
    const Tensor& e = weights().embedding;
    const int64_t d = config().d_model;
    for (int64_t t = 0; t < n; ++t) RowToF32(e.data, e.dtype, ids[t] * d, d, hidden + t * d);
  }

  Status CheckTokens(const int32_t* ids, int64_t n, const char* what) const {
    for (int64_t t = 0; t < n; ++t) {
      if (ids[t] < 0 || ids[t] >= config().vocab_size) {
        return Status::InvalidArgument(std::string(what) + ": token " + std::to_string(ids[t]) +
                                       " at position " + std::to_string(t) +
                                       " outside the vocabulary [0, " +
                                       std::to_string(config().vocab_size) + ")");
      }
    }
    return Status::Ok();
  }

  // The layers and the final norm over rows of (rows, d): hidden in, normed out.
  template <class Mixer>
  Status RunLayers(int64_t rows, float* hidden, float* residual, float* normed,
                   Mixer&& mixer) const {
    const ModelConfig& c = config();
    const int64_t d = c.d_model;
    AddRmsNormOptions options;
    options.eps = c.norm_eps;
    const Tensor h = model::Rows(hidden, rows, d, d), r = model::Rows(residual, rows, d, d);
    const Tensor n = model::Rows(normed, rows, d, d);
    for (int64_t i = 0; i < c.n_layer; ++i) {
      SSMKIT_RETURN_IF_ERROR(
          AddRmsNormForward({h, i == 0 ? Tensor{} : r, LayerNorm(i), Tensor{}}, n, r, options));
      SSMKIT_RETURN_IF_ERROR(mixer(i, normed, hidden));
    }
    return AddRmsNormForward({h, r, weights().norm_f, Tensor{}}, n, r, options);
  }
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Status Session::Create(const Model& model, int64_t max_batch, std::unique_ptr<Session>* session) {
  if (max_batch < 1) {
    return Status::InvalidArgument("session: max_batch: expected >= 1, given " +
                                   std::to_string(max_batch));
  }
  try {
    auto impl = std::make_unique<Impl>();
    impl->model = &model.impl();
    impl->max_batch = max_batch;
    impl->cache.Allocate(model.config(), max_batch);
    impl->decode_buffer.assign(static_cast<size_t>(impl->DecodeFloats(max_batch)), 0.0f);
    session->reset(new Session(std::move(impl)));
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("session: out of memory for a batch of " +
                               std::to_string(max_batch));
  }
}

int64_t Session::batch() const { return impl_->batch; }
int64_t Session::max_batch() const { return impl_->max_batch; }
int64_t Session::vocab_size() const { return impl_->config().vocab_size; }
int64_t Session::config_vocab_size() const { return impl_->config().config_vocab_size; }

Status Session::Prefill(const std::vector<std::vector<int32_t>>& prompts, std::span<float> logits,
                        std::span<float> all_logits) {
  Impl& s = *impl_;
  const ModelConfig& c = s.config();
  const model::ModelWeights& w = s.weights();
  const int64_t B = static_cast<int64_t>(prompts.size()), d = c.d_model, V = c.vocab_size;
  if (B < 1 || B > s.max_batch) {
    return Status::InvalidArgument("prefill: expected 1 to " + std::to_string(s.max_batch) +
                                   " prompts (the session's max_batch), given " +
                                   std::to_string(B));
  }
  int64_t L = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (prompts[b].empty())
      return Status::InvalidArgument("prefill: prompt " + std::to_string(b) + " is empty");
    SSMKIT_RETURN_IF_ERROR(s.CheckTokens(prompts[b].data(), static_cast<int64_t>(prompts[b].size()),
                                         ("prefill: prompt " + std::to_string(b)).c_str()));
    L = std::max<int64_t>(L, static_cast<int64_t>(prompts[b].size()));
  }
  if (static_cast<int64_t>(logits.size()) < B * V) {
    return Status::InvalidArgument("prefill: logits: expected (B, V) = (" + std::to_string(B) +
                                   ", " + std::to_string(V) + ") floats, given " +
                                   std::to_string(logits.size()));
  }
  if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) < B * L * V) {
    return Status::InvalidArgument("prefill: all_logits: expected (B, L, V) = (" +
                                   std::to_string(B) + ", " + std::to_string(L) + ", " +
                                   std::to_string(V) + ") floats, given " +
                                   std::to_string(all_logits.size()));
  }
  const int64_t T = B * L;
  try {
    s.tokens.assign(static_cast<size_t>(T), 0);
    s.pad.assign(static_cast<size_t>(B), 0);
    for (int64_t b = 0; b < B; ++b) {
      s.pad[b] = L - static_cast<int64_t>(prompts[b].size());
      std::copy(prompts[b].begin(), prompts[b].end(), s.tokens.begin() + b * L + s.pad[b]);
    }
    const size_t floats = static_cast<size_t>(s.PrefillFloats(B, T));
    if (s.prefill_buffer.size() < floats) s.prefill_buffer.resize(floats);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("prefill: out of memory for " + std::to_string(B) + " x " +
                               std::to_string(L) + " tokens");
  }
  s.batch = 0;  // a failure below leaves no usable state
  float* hidden = s.prefill_buffer.data();
  float* residual = hidden + T * d;
  float* normed = residual + T * d;
  float* last = normed + T * d;
  float* acts = last + B * d;
  s.Embed(s.tokens.data(), T, hidden);
  const int64_t* pad = s.pad.data();
  if (c.arch == ModelArch::kMamba1) {
    const model::Mamba1PrefillActs a = model::CarveMamba1Prefill(c, T, acts);
    SSMKIT_RETURN_IF_ERROR(
        s.RunLayers(T, hidden, residual, normed, [&](int64_t i, const float* in, float* out) {
          return model::Mamba1MixerPrefill(c, w.mamba1[i], B, L, pad, in, a, s.cache.conv(i, B),
                                           s.cache.ssm(i, B), out);
        }));
  } else {
    const model::Mamba2PrefillActs a = model::CarveMamba2Prefill(c, T, acts);
    SSMKIT_RETURN_IF_ERROR(
        s.RunLayers(T, hidden, residual, normed, [&](int64_t i, const float* in, float* out) {
          return model::Mamba2MixerPrefill(c, w.mamba2[i], B, L, pad, in, a, s.cache.conv(i, B),
                                           s.cache.ssm(i, B), out);
        }));
  }
  // Left padding puts every prompt's last token at position L - 1.
  for (int64_t b = 0; b < B; ++b) std::copy_n(normed + (b * L + L - 1) * d, d, last + b * d);
  SSMKIT_RETURN_IF_ERROR(LinearForward({model::Rows(last, B, d, d), w.lm_head, Tensor{}},
                                       model::Rows(logits.data(), B, V, V)));
  if (!all_logits.empty()) {
    std::vector<float> every;
    try {
      every.resize(static_cast<size_t>(T * V));
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("prefill: out of memory for all_logits");
    }
    SSMKIT_RETURN_IF_ERROR(LinearForward({model::Rows(normed, T, d, d), w.lm_head, Tensor{}},
                                         model::Rows(every.data(), T, V, V)));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = L - s.pad[b];
      std::copy_n(every.data() + (b * L + s.pad[b]) * V, n * V, all_logits.data() + b * L * V);
    }
  }
  s.batch = B;
  return Status::Ok();
}

Status Session::Decode(std::span<const int32_t> tokens, std::span<float> logits) {
  Impl& s = *impl_;
  const ModelConfig& c = s.config();
  const model::ModelWeights& w = s.weights();
  const int64_t B = s.batch, d = c.d_model, V = c.vocab_size;
  if (B == 0) return Status::InvalidArgument("decode: no sequences: call Prefill first");
  if (static_cast<int64_t>(tokens.size()) != B) {
    return Status::InvalidArgument("decode: tokens: expected one per sequence (" +
                                   std::to_string(B) + "), given " + std::to_string(tokens.size()));
  }
  if (static_cast<int64_t>(logits.size()) < B * V) {
    return Status::InvalidArgument("decode: logits: expected (B, V) = (" + std::to_string(B) +
                                   ", " + std::to_string(V) + ") floats, given " +
                                   std::to_string(logits.size()));
  }
  SSMKIT_RETURN_IF_ERROR(s.CheckTokens(tokens.data(), B, "decode"));
  float* hidden = s.decode_buffer.data();
  float* residual = hidden + B * d;
  float* normed = residual + B * d;
  float* acts = normed + B * d;
  s.Embed(tokens.data(), B, hidden);
  if (c.arch == ModelArch::kMamba1) {
    const model::Mamba1DecodeActs a = model::CarveMamba1Decode(c, B, acts);
    SSMKIT_RETURN_IF_ERROR(
        s.RunLayers(B, hidden, residual, normed, [&](int64_t i, const float* in, float* out) {
          return model::Mamba1MixerDecode(c, w.mamba1[i], B, in, a, s.cache.conv(i, B),
                                          s.cache.ssm(i, B), out);
        }));
  } else {
    const model::Mamba2DecodeActs a = model::CarveMamba2Decode(c, B, acts);
    SSMKIT_RETURN_IF_ERROR(
        s.RunLayers(B, hidden, residual, normed, [&](int64_t i, const float* in, float* out) {
          return model::Mamba2MixerDecode(c, w.mamba2[i], B, in, a, s.cache.conv(i, B),
                                          s.cache.ssm(i, B), out);
        }));
  }
  return LinearForward({model::Rows(normed, B, d, d), w.lm_head, Tensor{}},
                       model::Rows(logits.data(), B, V, V));
}

}  // namespace ssmkit

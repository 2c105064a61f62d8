// The C ABI's models and sessions: load (a directory or the built-in model), config, prefill and
// decode logits, each forwarding to include/ssmkit/model.hpp.
#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "capi/capi_handles.hpp"

using namespace ssmkit;        // NOLINT: this file only forwards to the C++ API
using namespace ssmkit::capi;  // NOLINT

namespace {

Status LoadModel(const std::string& dir, ssmkit_model** model) {
  std::unique_ptr<Model> loaded;
  SSMKIT_RETURN_IF_ERROR(Model::Load(dir, &loaded));
  auto handle = std::make_unique<ssmkit_model>();
  handle->model = std::move(loaded);
  handle->dir = dir;
  *model = handle.release();
  return Status::Ok();
}

Status CheckSession(const char* fn, const ssmkit_session* session) {
  return NotNull(fn, "session", session, "a session from ssmkit_session_create");
}

// The prompts of a prefill, copied out of the caller's arrays after checking every pointer.
Status ReadPrompts(const char* fn, const ssmkit_prefill_args& a, int64_t max_batch,
                   std::vector<std::vector<int32_t>>* prompts, int64_t* longest) {
  if (a.batch < 1 || a.batch > max_batch) {
    return Status::InvalidArgument(std::string(fn) + ": args.batch: expected 1 to " +
                                   std::to_string(max_batch) +
                                   " (the session's max_batch), given " + std::to_string(a.batch));
  }
  SSMKIT_RETURN_IF_ERROR(NotNull(fn, "args.tokens", a.tokens, "batch arrays of token ids"));
  SSMKIT_RETURN_IF_ERROR(NotNull(fn, "args.lengths", a.lengths, "batch lengths"));
  *longest = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    const std::string name = "args.tokens[" + std::to_string(b) + "]";
    if (a.lengths[b] < 1) {
      return Status::InvalidArgument(std::string(fn) + ": args.lengths[" + std::to_string(b) +
                                     "]: expected >= 1 tokens, given " +
                                     std::to_string(a.lengths[b]));
    }
    SSMKIT_RETURN_IF_ERROR(NotNull(fn, name.c_str(), a.tokens[b], "an array of token ids"));
    prompts->emplace_back(a.tokens[b], a.tokens[b] + a.lengths[b]);
    *longest = std::max(*longest, a.lengths[b]);
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

ssmkit_status ssmkit_model_load(const char* dir, ssmkit_model** model) {
  constexpr const char* kFn = "ssmkit_model_load";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "dir", dir, "a checkpoint directory"));
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "model", model, "a place for the model handle"));
    return LoadModel(dir, model);
  });
}

ssmkit_status ssmkit_model_load_default(ssmkit_model** model) {
  constexpr const char* kFn = "ssmkit_model_load_default";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "model", model, "a place for the model handle"));
    std::string dir;
    SSMKIT_RETURN_IF_ERROR(DefaultModelDir(&dir));
    return LoadModel(dir, model);
  });
}

ssmkit_status ssmkit_default_model_dir(char* dir, size_t capacity, size_t* length) {
  constexpr const char* kFn = "ssmkit_default_model_dir";
  return Guarded(kFn, [&]() -> Status {
    std::string found;
    SSMKIT_RETURN_IF_ERROR(DefaultModelDir(&found));
    return CopyString(kFn, "dir", found, dir, capacity, length);
  });
}

void ssmkit_model_free(ssmkit_model* model) { delete model; }

ssmkit_status ssmkit_model_get_config(const ssmkit_model* model, ssmkit_model_config* config) {
  constexpr const char* kFn = "ssmkit_model_get_config";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "model", model, "a model from ssmkit_model_load"));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "config", config));
    const ModelConfig& c = model->model->config();
    const bool m1 = c.arch == ModelArch::kMamba1;
    ssmkit_model_config out{};
    out.struct_size = sizeof out;
    out.arch = m1 ? SSMKIT_ARCH_MAMBA1 : SSMKIT_ARCH_MAMBA2;
    out.d_model = c.d_model;
    out.n_layer = c.n_layer;
    out.vocab_size = c.vocab_size;
    out.config_vocab_size = c.config_vocab_size;
    out.d_inner = c.d_inner;
    out.d_state = c.d_state;
    out.d_conv = c.d_conv;
    out.dt_rank = m1 ? c.dt_rank : 0;
    out.nheads = m1 ? 0 : c.nheads;
    out.headdim = m1 ? 0 : c.headdim;
    out.ngroups = m1 ? 0 : c.ngroups;
    out.bos_token_id = c.bos_token_id;
    out.eos_token_id = c.eos_token_id;
    out.pad_token_id = c.pad_token_id;
    out.parameter_count = model->model->parameter_count();
    *config = out;
    return Status::Ok();
  });
}

namespace {

ssmkit_status CreateSession(const char* fn, const ssmkit_model* model, int64_t max_batch,
                            int32_t device, ssmkit_session** session) {
  return Guarded(fn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(NotNull(fn, "model", model, "a model from ssmkit_model_load"));
    SSMKIT_RETURN_IF_ERROR(NotNull(fn, "session", session, "a place for the session handle"));
    if (device != SSMKIT_CPU && device != SSMKIT_CUDA) {
      return Status::InvalidArgument(
          std::string(fn) + ": device: expected SSMKIT_CPU (0) or SSMKIT_CUDA (1), given " +
          std::to_string(device));
    }
    auto handle = std::make_unique<ssmkit_session>();
    handle->model = model->model;
    SessionOptions options;
    options.max_batch = max_batch;
    options.device = device == SSMKIT_CUDA ? Device::kCuda : Device::kCpu;
    SSMKIT_RETURN_IF_ERROR(Session::Create(*handle->model, options, &handle->session));
    handle->prefill_logits.resize(static_cast<size_t>(max_batch * handle->session->vocab_size()));
    *session = handle.release();
    return Status::Ok();
  });
}

}  // namespace

ssmkit_status ssmkit_session_create(const ssmkit_model* model, int64_t max_batch,
                                    ssmkit_session** session) {
  return CreateSession("ssmkit_session_create", model, max_batch, SSMKIT_CPU, session);
}

ssmkit_status ssmkit_session_create_on(const ssmkit_model* model, int64_t max_batch, int32_t device,
                                       ssmkit_session** session) {
  return CreateSession("ssmkit_session_create_on", model, max_batch, device, session);
}

void ssmkit_session_free(ssmkit_session* session) { delete session; }

ssmkit_status ssmkit_session_prefill(ssmkit_session* session, const ssmkit_prefill_args* args) {
  constexpr const char* kFn = "ssmkit_session_prefill";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(CheckSession(kFn, session));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "args", args));
    Session& s = *session->session;
    std::vector<std::vector<int32_t>> prompts;
    int64_t L = 0;
    SSMKIT_RETURN_IF_ERROR(ReadPrompts(kFn, *args, s.max_batch(), &prompts, &L));
    const int64_t B = args->batch, V = s.vocab_size();
    float* logits = nullptr;
    float* all_logits = nullptr;
    SSMKIT_RETURN_IF_ERROR(DenseF32(kFn, "args.logits", args->logits, std::array<int64_t, 2>{B, V},
                                    "(B, V)", &logits));
    if (args->all_logits.data != nullptr) {
      SSMKIT_RETURN_IF_ERROR(DenseF32(kFn, "args.all_logits", args->all_logits,
                                      std::array<int64_t, 3>{B, L, V}, "(B, L, V)", &all_logits));
    }
    const std::span<float> staged(session->prefill_logits.data(), static_cast<size_t>(B * V));
    SSMKIT_RETURN_IF_ERROR(
        s.Prefill(prompts, staged,
                  all_logits ? std::span<float>(all_logits, B * L * V) : std::span<float>()));
    std::copy(staged.begin(), staged.end(), logits);
    return Status::Ok();
  });
}

ssmkit_status ssmkit_session_decode(ssmkit_session* session, const int32_t* tokens, int64_t batch,
                                    const ssmkit_tensor* logits) {
  constexpr const char* kFn = "ssmkit_session_decode";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(CheckSession(kFn, session));
    Session& s = *session->session;
    if (s.batch() == 0) {
      return Status::InvalidArgument(std::string(kFn) +
                                     ": no sequences: call ssmkit_session_prefill first");
    }
    if (batch != s.batch()) {
      return Status::InvalidArgument(std::string(kFn) + ": batch: expected " +
                                     std::to_string(s.batch()) + " (the last prefill's), given " +
                                     std::to_string(batch));
    }
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "tokens", tokens, "batch token ids"));
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "logits", logits, "a (B, V) f32 tensor"));
    const int64_t V = s.vocab_size();
    float* out = nullptr;
    SSMKIT_RETURN_IF_ERROR(
        DenseF32(kFn, "logits", *logits, std::array<int64_t, 2>{batch, V}, "(B, V)", &out));
    // Session::Decode checks the tokens before it writes: a failure leaves the logits alone.
    return s.Decode(std::span<const int32_t>(tokens, static_cast<size_t>(batch)),
                    std::span<float>(out, static_cast<size_t>(batch * V)));
  });
}

}  // extern "C"

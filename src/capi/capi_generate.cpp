// The C ABI's generation: a prompt (text or tokens) through ssmkit::Generator, each token handed
// to the caller's callback with the text it completes; the callback may stop it.
#include <optional>

#include "capi/capi_handles.hpp"
#include "ssmkit/generate.hpp"

using namespace ssmkit;        // NOLINT: this file only forwards to the C++ API
using namespace ssmkit::capi;  // NOLINT

namespace {

constexpr const char* kFn = "ssmkit_generate";

Status Prompt(const ssmkit_generate_args& a, const ModelConfig& config,
              std::vector<int32_t>* prompt) {
  if (a.prompt != nullptr) {
    SSMKIT_RETURN_IF_ERROR(
        NotNull(kFn, "args.tokenizer", a.tokenizer, "a tokenizer to encode args.prompt"));
    SSMKIT_RETURN_IF_ERROR(a.tokenizer->tokenizer->Encode(a.prompt, prompt));
    a.tokenizer->tokenizer->AddSpecialTokens(prompt);  // its template (a start token), if any
  } else {
    if (a.n_prompt_tokens < 0) {
      return Status::InvalidArgument(std::string(kFn) +
                                     ": args.n_prompt_tokens: expected >= 0, given " +
                                     std::to_string(a.n_prompt_tokens));
    }
    if (a.n_prompt_tokens > 0) {
      SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "args.prompt_tokens", a.prompt_tokens,
                                     "n_prompt_tokens token ids (or a text args.prompt)"));
    }
    prompt->assign(a.prompt_tokens, a.prompt_tokens + a.n_prompt_tokens);
  }
  return StartFromBeginningOfText(config, prompt);
}

GenerateOptions Options(const ssmkit_generate_args& a, const ModelConfig& config) {
  GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.eos_token_id = a.ignore_eos ? -1 : static_cast<int32_t>(config.eos_token_id);
  o.sampling.temperature = a.temperature;
  o.sampling.top_k = a.top_k;
  o.sampling.top_p = a.top_p == 0.0f ? 1.0f : a.top_p;  // zero-initialised: no filter
  o.sampling.seed = a.seed;
  return o;
}

}  // namespace

extern "C" {

ssmkit_status ssmkit_generate(ssmkit_session* session, const ssmkit_generate_args* args,
                              ssmkit_generate_result* result) {
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(
        NotNull(kFn, "session", session, "a session from ssmkit_session_create"));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "args", args));
    if (result != nullptr) SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "result", result));
    const ModelConfig& config = session->model->config();
    std::vector<int32_t> prompt;
    SSMKIT_RETURN_IF_ERROR(Prompt(*args, config, &prompt));
    Generator generator;
    SSMKIT_RETURN_IF_ERROR(generator.Start(*session->session, prompt, Options(*args, config)));
    std::optional<TokenTextStream> stream;
    if (args->tokenizer != nullptr)
      stream.emplace(*args->tokenizer->tokenizer, args->keep_special == 0);
    bool stopped_by_callback = false;
    std::string text;
    for (;;) {
      int32_t token = -1;
      bool done = false;
      SSMKIT_RETURN_IF_ERROR(generator.Next(&token, &done));
      if (done) break;
      if (args->on_token == nullptr) continue;
      if (stream) {
        text = stream->Push(token);
        if (generator.finished()) text += stream->Finish();  // the last token: flush what is held
      }
      if (args->on_token(args->user_data, token, stream ? text.c_str() : nullptr, text.size()) !=
          0) {
        stopped_by_callback = true;
        break;
      }
    }
    if (result != nullptr) {
      const GenerateStats& st = generator.stats();
      ssmkit_generate_result r{};
      r.struct_size = sizeof r;
      r.prompt_tokens = st.prompt_tokens;
      r.generated_tokens = st.generated_tokens;
      r.prefill_seconds = st.prefill_seconds;
      r.decode_seconds = st.decode_seconds;
      r.stopped_at_eos = st.stopped_at_eos ? 1 : 0;
      r.stopped_by_callback = stopped_by_callback ? 1 : 0;
      *result = r;
    }
    return Status::Ok();
  });
}

}  // extern "C"

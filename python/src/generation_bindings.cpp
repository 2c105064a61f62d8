// Tokenizers and token-by-token generation for Python (ssmkit/model.py wraps them): a
// _Generator prefills its prompt on a session and hands out one token per next() call, with the
// text that token completes, so that Python can stream, stop on a string or a callback, and be
// interrupted between tokens. The GIL is released while it encodes, prefills or decodes.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "model_bindings.hpp"
#include "model_handles.hpp"
#include "ssmkit/generate.hpp"

namespace ssmkit::python {
namespace {

using Ids = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;  // (n)

TokenizerHandle Wrap(std::unique_ptr<Tokenizer> t) { return TokenizerHandle{std::move(t)}; }

TokenizerHandle TokenizerFromFile(const std::string& path) {
  std::unique_ptr<Tokenizer> t;
  ThrowIfError(Tokenizer::FromFile(path, &t));
  return Wrap(std::move(t));
}

TokenizerHandle TokenizerForModel(const ModelHandle& model) {
  std::unique_ptr<Tokenizer> t;
  ThrowIfError(Tokenizer::ForModel(model.dir, model.model->config().vocab_size, &t));
  return Wrap(std::move(t));
}

std::vector<int32_t> Encode(const TokenizerHandle& self, const std::string& text) {
  std::vector<int32_t> ids;
  Status status;
  {
    nb::gil_scoped_release release;
    status = self.tokenizer->Encode(text, &ids);
  }
  ThrowIfError(status);
  return ids;
}

std::string Decode(const TokenizerHandle& self, Ids ids, bool skip_special) {
  nb::gil_scoped_release release;
  return self.tokenizer->Decode(std::span<const int32_t>(ids.data(), ids.shape(0)), skip_special);
}

nb::object TokenId(const TokenizerHandle& self, const std::string& token) {
  const int32_t id = self.tokenizer->TokenId(token);
  if (id < 0) return nb::none();
  return nb::int_(id);
}

// One generation on one session: Generator plus the text stream of its tokens.
class PyGenerator {
 public:
  struct Options {
    int64_t max_tokens;
    float temperature;
    int64_t top_k;
    float top_p;
    uint64_t seed;
    int64_t eos_token_id;  // -1: never stop at one
  };

  PyGenerator(SessionHandle session, Ids prompt, const Options& o,
              std::optional<TokenizerHandle> tokenizer, bool skip_special)
      : state_(std::move(session.state)) {
    std::vector<int32_t> ids(prompt.data(), prompt.data() + prompt.shape(0));
    ThrowIfError(StartFromBeginningOfText(state_->model->config(), &ids));
    GenerateOptions options;
    options.max_tokens = o.max_tokens;
    options.eos_token_id = static_cast<int32_t>(o.eos_token_id);
    options.sampling = SamplerOptions{o.temperature, o.top_k, o.top_p, o.seed};
    if (tokenizer) {
      tokenizer_ = std::move(tokenizer->tokenizer);
      stream_.emplace(*tokenizer_, skip_special);
    }
    RunOnSession(*state_, [&] {
      ++state_->epoch;
      epoch_ = state_->epoch;
      return generator_.Start(*state_->session, ids, options);
    });
  }

  // (token, the text it completes or None without a tokenizer, whether it is the last), or
  // None once generation has ended.
  std::optional<std::tuple<int32_t, std::optional<std::string>, bool>> Next() {
    int32_t token = -1;
    bool done = false, last = false;
    std::string text;
    RunOnSession(*state_, [&] {
      if (state_->epoch != epoch_) {
        return Status::InvalidArgument(
            "generate: the session was prefilled or decoded by another call since this generation "
            "started; start a new generation");
      }
      SSMKIT_RETURN_IF_ERROR(generator_.Next(&token, &done));
      last = generator_.finished();
      if (!done && stream_) {
        text = stream_->Push(token);
        if (last) text += stream_->Finish();  // flush a character left incomplete
      }
      return Status::Ok();
    });
    if (done) return std::nullopt;
    std::optional<std::string> piece;
    if (stream_) piece = std::move(text);
    return std::make_tuple(token, std::move(piece), last);
  }

  nb::dict Stats() {
    std::lock_guard<std::mutex> lock(state_->mu);
    const GenerateStats& s = generator_.stats();
    nb::dict d;
    d["prompt_tokens"] = s.prompt_tokens;
    d["generated_tokens"] = s.generated_tokens;
    d["prefill_seconds"] = s.prefill_seconds;
    d["decode_seconds"] = s.decode_seconds;
    d["stopped_at_eos"] = s.stopped_at_eos;
    return d;
  }

 private:
  std::shared_ptr<SessionState> state_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<TokenTextStream> stream_;
  Generator generator_;
  uint64_t epoch_ = 0;
};

}  // namespace

void RegisterGeneration(nb::module_& m) {
  nb::class_<TokenizerHandle>(m, "_Tokenizer")
      .def_static("from_file", &TokenizerFromFile, nb::arg("path"))
      .def_static("bytes", [] { return Wrap(Tokenizer::Bytes()); })
      .def_static("for_model", &TokenizerForModel, nb::arg("model"))
      .def("encode", &Encode, nb::arg("text"))
      .def("decode", &Decode, nb::arg("ids").noconvert(), nb::arg("skip_special"))
      .def("token_id", &TokenId, nb::arg("token"))
      .def_prop_ro("vocab_size", [](const TokenizerHandle& h) { return h.tokenizer->vocab_size(); })
      .def_prop_ro("name", [](const TokenizerHandle& h) { return h.tokenizer->name(); });

  nb::class_<PyGenerator>(m, "_Generator")
      .def(
          "__init__",
          [](PyGenerator* self, const SessionHandle& session, Ids prompt, int64_t max_tokens,
             float temperature, int64_t top_k, float top_p, uint64_t seed, int64_t eos_token_id,
             std::optional<TokenizerHandle> tokenizer, bool skip_special) {
            new (self) PyGenerator(session, prompt,
                                   {max_tokens, temperature, top_k, top_p, seed, eos_token_id},
                                   std::move(tokenizer), skip_special);
          },
          nb::arg("session"), nb::arg("prompt").noconvert(), nb::arg("max_tokens"),
          nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"), nb::arg("seed"),
          nb::arg("eos_token_id"), nb::arg("tokenizer").none(), nb::arg("skip_special"))
      .def("next", &PyGenerator::Next)
      .def_prop_ro("stats", &PyGenerator::Stats);
}

}  // namespace ssmkit::python

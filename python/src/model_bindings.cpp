// The inference engine's models and sessions for Python (ssmkit/model.py wraps them): load a
// checkpoint directory or the built-in model, its config, and sessions whose prefill and decode
// write logits into float32 arrays that ssmkit/model.py allocates. The GIL is released while a
// model loads or a session computes.
//
// Dimension legend: B batch, L longest prompt, V vocab (padded).
#include "model_bindings.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <map>
#include <vector>

#include "model_handles.hpp"
#include "ssmkit/perplexity.hpp"

namespace ssmkit::python {
namespace {

using IdsMatrix = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;  // (B, L)
using IdsVector = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;  // (B)
using Lengths = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;    // (B)
using Logits2 = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;            // (B, V)
using Logits3 = nb::ndarray<float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;  // (B, L, V)

std::string ShapeString(std::initializer_list<int64_t> dims) {
  std::string s = "(";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + ")";
}

template <class Array>
std::string ShapeOf(const Array& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + ")";
}

// "fn: name: expected (B, V) = (2, 304), given (2, 303)" unless `a` has exactly `want`.
template <class Array>
Status CheckShape(const char* fn, const char* name, const Array& a, const char* dims,
                  std::initializer_list<int64_t> want) {
  bool same = a.ndim() == want.size();
  size_t i = 0;
  for (int64_t d : want) same = same && static_cast<int64_t>(a.shape(i++)) == d;
  if (same) return Status::Ok();
  return Status::InvalidArgument(std::string(fn) + ": " + name + ": expected " + dims + " = " +
                                 ShapeString(want) + ", given " + ShapeOf(a));
}

ModelHandle LoadFrom(const std::string& dir) {
  std::unique_ptr<Model> model;
  Status status;
  {
    nb::gil_scoped_release release;
    status = Model::Load(dir, &model);
  }
  ThrowIfError(status);
  return ModelHandle{std::move(model), dir};
}

// _Model._from_tensors(config_json, {name: array}): Model::FromTensors over the arrays' memory
// (numpy arrays or torch tensors, through DLPack), which the returned model keeps referenced
// until it and its sessions are gone.
ModelHandle FromTensors(const std::string& config_json, nb::dict tensors) {
  ArrayArgs args("from_tensors", tensors);
  std::map<std::string, Tensor> views;
  for (auto [key, value] : tensors) {
    const std::string name = nb::cast<std::string>(key);
    views[name] = args.Input(name.c_str());
  }
  std::unique_ptr<Model> model;
  Status status;
  {
    nb::gil_scoped_release release;
    status = Model::FromTensors(config_json, views, &model);
  }
  ThrowIfError(status);
  auto* owner = new nb::object(tensors);
  std::shared_ptr<const Model> shared(model.release(), [owner](const Model* m) {
    delete m;
    nb::gil_scoped_acquire gil;
    delete owner;
  });
  return ModelHandle{std::move(shared), ""};
}

std::string DefaultDir() {
  std::string dir;
  ThrowIfError(DefaultModelDir(&dir));
  return dir;
}

nb::object TokenOrNone(int64_t id) {
  if (id < 0) return nb::none();
  return nb::int_(id);
}

nb::dict ConfigDict(const ModelConfig& c) {
  nb::dict d;
  const bool m1 = c.arch == ModelArch::kMamba1;
  d["arch"] = ModelArchName(c.arch);
  d["family"] = c.family;
  d["architecture"] = c.hf_architecture();
  nb::list blocks;
  for (const BlockSpec& b : c.block_list()) blocks.append(BlockKindName(b.kind));
  d["blocks"] = blocks;
  d["format"] = c.format;
  d["d_model"] = c.d_model;
  d["n_layer"] = c.n_layer;
  d["vocab_size"] = c.vocab_size;
  d["config_vocab_size"] = c.config_vocab_size;
  d["d_inner"] = c.d_inner;
  d["d_state"] = c.d_state;
  d["d_conv"] = c.d_conv;
  d["conv_bias"] = c.conv_bias;
  d["proj_bias"] = c.proj_bias;
  d["norm_eps"] = c.norm_eps;
  d["tie_embeddings"] = c.tie_embeddings;
  if (m1) {
    d["dt_rank"] = c.dt_rank;
  } else {
    d["nheads"] = c.nheads;
    d["headdim"] = c.headdim;
    d["ngroups"] = c.ngroups;
    d["chunk_size"] = c.chunk_size;
    d["d_per_channel"] = c.d_per_channel;
    d["dt_min"] = c.dt_min;
    d["dt_max"] = c.dt_max;
  }
  d["bos_token_id"] = TokenOrNone(c.bos_token_id);
  d["eos_token_id"] = TokenOrNone(c.eos_token_id);
  d["pad_token_id"] = TokenOrNone(c.pad_token_id);
  return d;
}

// device: "cpu" or "cuda" (the engine on the GPU: docs/cuda.md).
void CreateSession(SessionHandle* self, const ModelHandle& model, int64_t max_batch,
                   const std::string& device) {
  if (device != "cpu" && device != "cuda") {
    ThrowIfError(Status::InvalidArgument("session: device: expected 'cpu' or 'cuda', given '" +
                                         device + "'"));
  }
  auto state = std::make_shared<SessionState>();
  state->model = model.model;
  SessionOptions options;
  options.max_batch = max_batch;
  options.device = device == "cuda" ? Device::kCuda : Device::kCpu;
  Status status;
  {
    nb::gil_scoped_release release;
    status = Session::Create(*state->model, options, &state->session);
  }
  ThrowIfError(status);
  new (self) SessionHandle{std::move(state)};
}

// prompts[b] = tokens[b, :lengths[b]] (right-padded by the caller); logits (B, V) and
// all_logits (B, L, V) (optional) written.
void Prefill(SessionHandle& self, IdsMatrix tokens, Lengths lengths, Logits2 logits,
             std::optional<Logits3> all_logits) {
  constexpr const char* kFn = "prefill";
  SessionState& s = *self.state;
  const int64_t B = static_cast<int64_t>(tokens.shape(0)),
                L = static_cast<int64_t>(tokens.shape(1));
  const int64_t V = s.session->vocab_size();
  ThrowIfError(CheckShape(kFn, "lengths", lengths, "(B)", {B}));
  ThrowIfError(CheckShape(kFn, "logits", logits, "(B, V)", {B, V}));
  if (all_logits) ThrowIfError(CheckShape(kFn, "all_logits", *all_logits, "(B, L, V)", {B, L, V}));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths.data()[b];
    if (n < 1 || n > L) {
      ThrowIfError(Status::InvalidArgument(std::string(kFn) + ": lengths[" + std::to_string(b) +
                                           "]: expected 1 to " + std::to_string(L) + ", given " +
                                           std::to_string(n)));
    }
    prompts.emplace_back(tokens.data() + b * L, tokens.data() + b * L + n);
  }
  float* all = all_logits ? all_logits->data() : nullptr;
  RunOnSession(s, [&] {
    ++s.epoch;
    return s.session->Prefill(
        prompts, std::span<float>(logits.data(), static_cast<size_t>(B * V)),
        all ? std::span<float>(all, static_cast<size_t>(B * L * V)) : std::span<float>());
  });
}

void Decode(SessionHandle& self, IdsVector tokens, Logits2 logits) {
  SessionState& s = *self.state;
  const int64_t B = static_cast<int64_t>(tokens.shape(0)), V = s.session->vocab_size();
  ThrowIfError(CheckShape("decode", "logits", logits, "(B, V)", {B, V}));
  RunOnSession(s, [&] {
    ++s.epoch;
    return s.session->Decode(std::span<const int32_t>(tokens.data(), static_cast<size_t>(B)),
                             std::span<float>(logits.data(), static_cast<size_t>(B * V)));
  });
}

// include/ssmkit/perplexity.hpp on token ids (N); a dict of the result's fields.
nb::dict Perplexity(const ModelHandle& self, IdsVector tokens, int64_t context, int64_t max_chunks,
                    int64_t batch) {
  PerplexityResult r;
  Status status;
  {
    nb::gil_scoped_release release;
    status =
        ssmkit::Perplexity(*self.model, std::span<const int32_t>(tokens.data(), tokens.shape(0)),
                           PerplexityOptions{context, max_chunks, batch}, &r);
  }
  ThrowIfError(status);
  nb::dict d;
  d["perplexity"] = r.perplexity;
  d["perplexity_stderr"] = r.perplexity_stderr;
  d["mean_nll"] = r.mean_nll;
  d["nll_stderr"] = r.nll_stderr;
  d["chunks"] = r.chunks;
  d["scored_tokens"] = r.scored_tokens;
  return d;
}

int64_t Batch(SessionHandle& self) {
  std::lock_guard<std::mutex> lock(self.state->mu);
  return self.state->session->batch();
}

}  // namespace

void RegisterModel(nb::module_& m) {
  m.def("default_model_dir", &DefaultDir,
        "The directory of the built-in model ($SSMKIT_DEFAULT_MODEL, else found beside the "
        "extension or in the source tree it was built from).");

  nb::class_<ModelHandle>(m, "_Model")
      .def_static("load", &LoadFrom, nb::arg("dir"))
      .def_static("load_default", [] { return LoadFrom(DefaultDir()); })
      .def_static("_from_tensors", &FromTensors, nb::arg("config_json"), nb::arg("tensors"))
      .def_prop_ro("dir", [](const ModelHandle& h) { return h.dir; })
      .def_prop_ro("config", [](const ModelHandle& h) { return ConfigDict(h.model->config()); })
      .def_prop_ro("parameter_count",
                   [](const ModelHandle& h) { return h.model->parameter_count(); })
      .def_prop_ro("decode_weight_bytes",
                   [](const ModelHandle& h) { return h.model->decode_weight_bytes(); })
      .def_prop_ro("weight_dtype",
                   [](const ModelHandle& h) { return h.model->weight_dtype_name(); })
      .def_prop_ro("source", [](const ModelHandle& h) { return h.model->source(); })
      .def("perplexity", &Perplexity, nb::arg("tokens").noconvert(), nb::arg("context"),
           nb::arg("max_chunks"), nb::arg("batch"));

  nb::class_<SessionHandle>(m, "_Session")
      .def("__init__", &CreateSession, nb::arg("model"), nb::arg("max_batch"),
           nb::arg("device") = "cpu")
      .def("prefill", &Prefill, nb::arg("tokens").noconvert(), nb::arg("lengths").noconvert(),
           nb::arg("logits").noconvert(), nb::arg("all_logits").noconvert().none())
      .def("decode", &Decode, nb::arg("tokens").noconvert(), nb::arg("logits").noconvert())
      .def_prop_ro("batch", &Batch)
      .def_prop_ro("max_batch",
                   [](const SessionHandle& h) { return h.state->session->max_batch(); })
      .def_prop_ro("vocab_size",
                   [](const SessionHandle& h) { return h.state->session->vocab_size(); })
      .def_prop_ro("config_vocab_size",
                   [](const SessionHandle& h) { return h.state->session->config_vocab_size(); });
}

}  // namespace ssmkit::python

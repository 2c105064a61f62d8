#include "model/gguf_names.hpp"

#include <iterator>

namespace ssmkit::model {
namespace {

struct NamePair {
  const char* gguf;  // after "blk.N."
  const char* hf;    // after "backbone.layers.N."
};
constexpr NamePair kShared[] = {
    {"attn_norm.weight", "norm.weight"},
    {"ssm_in.weight", "mixer.in_proj.weight"},
    {"ssm_in.bias", "mixer.in_proj.bias"},
    {"ssm_conv1d.weight", "mixer.conv1d.weight"},
    {"ssm_conv1d.bias", "mixer.conv1d.bias"},
    {"ssm_a", "mixer.A_log"},
    {"ssm_d", "mixer.D"},
    {"ssm_out.weight", "mixer.out_proj.weight"},
    {"ssm_out.bias", "mixer.out_proj.bias"},
};
constexpr NamePair kMamba1[] = {
    {"ssm_x.weight", "mixer.x_proj.weight"},
    {"ssm_dt.weight", "mixer.dt_proj.weight"},
    {"ssm_dt.bias", "mixer.dt_proj.bias"},
};
constexpr NamePair kMamba2[] = {
    {"ssm_dt.bias", "mixer.dt_bias"},
    {"ssm_norm.weight", "mixer.norm.weight"},
};
constexpr NamePair kTop[] = {
    {"token_embd.weight", "backbone.embeddings.weight"},
    {"token_embd.weight", "backbone.embedding.weight"},  // the state-spaces format's
    {"output_norm.weight", "backbone.norm_f.weight"},
    {"output.weight", "lm_head.weight"},
};

// Per layer, in the writer's order of preference where two map to one Hugging Face name
// (falcon-h1's pre-MLP norm is written "ffn_norm", without the suffix its reader also takes).
constexpr const char* kLayerTensorNames[] = {
    "attn_norm.weight",
    "ffn_norm",
    "ffn_norm.weight",
    "ssm_in.weight",
    "ssm_in.bias",
    "ssm_conv1d.weight",
    "ssm_conv1d.bias",
    "ssm_x.weight",
    "ssm_dt.weight",
    "ssm_dt.bias",
    "ssm_a",
    "ssm_d",
    "ssm_norm.weight",
    "ssm_out.weight",
    "ssm_out.bias",
    "attn_q.weight",
    "attn_q.bias",
    "attn_k.weight",
    "attn_k.bias",
    "attn_v.weight",
    "attn_v.bias",
    "attn_output.weight",
    "attn_output.bias",
    "ffn_gate_inp.weight",
    "ffn_gate_exps.weight",
    "ffn_up_exps.weight",
    "ffn_down_exps.weight",
    "ffn_gate_shexp.weight",
    "ffn_up_shexp.weight",
    "ffn_down_shexp.weight",
    "ffn_gate.weight",
    "ffn_gate.bias",
    "ffn_up.weight",
    "ffn_up.bias",
    "ffn_down.weight",
    "ffn_down.bias",
};

// Calls f(pair) for the per-layer pairs of `arch` until it returns true.
template <class F>
bool AnyLayerPair(ModelArch arch, F&& f) {
  for (const NamePair& p : kShared) {
    if (f(p)) return true;
  }
  const NamePair* begin = arch == ModelArch::kMamba2 ? std::begin(kMamba2) : std::begin(kMamba1);
  const NamePair* end = arch == ModelArch::kMamba2 ? std::end(kMamba2) : std::end(kMamba1);
  for (const NamePair* p = begin; p != end; ++p) {
    if (f(*p)) return true;
  }
  return false;
}

// Splits "<prefix><digits>.<rest>" into layer and rest; false when it is not of that form.
bool SplitLayer(const std::string& name, const std::string& prefix, std::string* layer,
                std::string* rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  *layer = name.substr(prefix.size(), dot - prefix.size());
  *rest = name.substr(dot + 1);
  return layer->find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::string GgufToHfName(const std::string& name, ModelArch arch) {
  for (const NamePair& p : kTop) {
    if (name == p.gguf) return p.hf;
  }
  std::string layer, rest, out = name;
  if (!SplitLayer(name, "blk.", &layer, &rest)) return name;
  AnyLayerPair(arch, [&](const NamePair& p) {
    if (rest != p.gguf) return false;
    out = "backbone.layers." + layer + "." + p.hf;
    return true;
  });
  return out;
}

std::span<const char* const> GgufLayerTensorNames() { return kLayerTensorNames; }

bool IsGgufMatrixName(const std::string& name) {
  // llama-quantize's rule (tensor_allows_quantization): a tensor named "...weight" that is not
  // a norm, the conv (small, read by the conv kernel) or the MoE router (ffn_gate_inp: the
  // routing reads it in a float type only).
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  const size_t n = name.size();
  return n >= 6 && name.compare(n - 6, 6, "weight") == 0 && !has("_norm.weight") &&
         !has("ssm_conv1d") && !has("ffn_gate_inp");
}

}  // namespace ssmkit::model

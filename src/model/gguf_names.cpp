#include "model/gguf_names.hpp"

#include <iterator>

namespace ssmkit::model {
namespace {

struct NamePair {
  const char* gguf;  // after "blk.N."
  const char* hf;    // after the mixer's prefix ("backbone.layers.N.mixer.", ...)
};
// The selective-state-space mixer's tensors, Mamba-1 and Mamba-2 alike, then each one's own.
constexpr NamePair kSharedMixer[] = {
    {"ssm_in.weight", "in_proj.weight"},
    {"ssm_in.bias", "in_proj.bias"},
    {"ssm_conv1d.weight", "conv1d.weight"},
    {"ssm_conv1d.bias", "conv1d.bias"},
    {"ssm_a", "A_log"},
    {"ssm_d", "D"},
    {"ssm_out.weight", "out_proj.weight"},
    {"ssm_out.bias", "out_proj.bias"},
};
constexpr NamePair kMamba1Mixer[] = {
    {"ssm_x.weight", "x_proj.weight"},
    {"ssm_dt.weight", "dt_proj.weight"},
    {"ssm_dt.bias", "dt_proj.bias"},
    // Jamba's RMSNorms on dt_in, B and C.
    {"ssm_dt_norm.weight", "dt_layernorm.weight"},
    {"ssm_b_norm.weight", "b_layernorm.weight"},
    {"ssm_c_norm.weight", "c_layernorm.weight"},
};
constexpr NamePair kMamba2Mixer[] = {
    {"ssm_dt.bias", "dt_bias"},
    {"ssm_norm.weight", "norm.weight"},
};
// The block's norm, after "backbone.layers.N." (MambaForCausalLM's).
constexpr NamePair kLayerNorm = {"attn_norm.weight", "norm.weight"};
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
    "ssm_dt_norm.weight",
    "ssm_b_norm.weight",
    "ssm_c_norm.weight",
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
    "exp_probs_b.bias",
    "ffn_gate_exps.weight",
    "ffn_up_exps.weight",
    "ffn_down_exps.weight",
    "ffn_gate_shexp.weight",
    "ffn_up_shexp.weight",
    "ffn_up_shexp.bias",
    "ffn_down_shexp.weight",
    "ffn_down_shexp.bias",
    "ffn_latent_down.weight",
    "ffn_latent_down.bias",
    "ffn_latent_up.weight",
    "ffn_latent_up.bias",
    "ffn_gate.weight",
    "ffn_gate.bias",
    "ffn_up.weight",
    "ffn_up.bias",
    "ffn_down.weight",
    "ffn_down.bias",
};

// Calls f(pair) for the mixer pairs of `arch` until it returns true.
template <class F>
bool AnyMixerPair(ModelArch arch, F&& f) {
  for (const NamePair& p : kSharedMixer) {
    if (f(p)) return true;
  }
  const bool m2 = arch == ModelArch::kMamba2;
  const NamePair* begin = m2 ? std::begin(kMamba2Mixer) : std::begin(kMamba1Mixer);
  const NamePair* end = m2 ? std::end(kMamba2Mixer) : std::end(kMamba1Mixer);
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

const char* GgufMixerName(const std::string& rest, ModelArch arch) {
  const char* hf = nullptr;
  AnyMixerPair(arch, [&](const NamePair& p) {
    if (rest == p.gguf) hf = p.hf;
    return hf != nullptr;
  });
  return hf;
}

std::string GgufToHfName(const std::string& name, ModelArch arch) {
  for (const NamePair& p : kTop) {
    if (name == p.gguf) return p.hf;
  }
  std::string layer, rest;
  if (!SplitLayer(name, "blk.", &layer, &rest)) return name;
  const std::string prefix = "backbone.layers." + layer + ".";
  if (rest == kLayerNorm.gguf) return prefix + kLayerNorm.hf;
  const char* hf = GgufMixerName(rest, arch);
  return hf == nullptr ? name : prefix + "mixer." + hf;
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

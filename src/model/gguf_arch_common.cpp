// What the GGUF architectures share: typed metadata keys, the sizes every model states, the
// Mamba-2 mixer's and attention's keys and tensor names, and the table of architectures.
#include <iterator>
#include <string>

#include "model/gguf_arch.hpp"
#include "model/gguf_names.hpp"

namespace ssmkit::model {
namespace {

const GgufArch kArchs[] = {
    {"mamba", ReadMambaGgufConfig, MapMambaGguf},
    {"mamba2", ReadMambaGgufConfig, MapMambaGguf},
    {"granitehybrid", ReadGraniteHybridGgufConfig, MapGraniteHybridGguf},
    {"falcon-h1", ReadFalconH1GgufConfig, MapFalconH1Gguf},
    {"nemotron_h", ReadNemotronHGgufConfig, MapNemotronHGguf},
    {"nemotron_h_moe", ReadNemotronHMoeGgufConfig, MapNemotronHGguf},
    {"jamba", ReadJambaGgufConfig, MapJambaGguf},
};

constexpr GgufNamePair kAttention[] = {
    {"attn_q.weight", "q_proj.weight"},      {"attn_q.bias", "q_proj.bias"},
    {"attn_k.weight", "k_proj.weight"},      {"attn_k.bias", "k_proj.bias"},
    {"attn_v.weight", "v_proj.weight"},      {"attn_v.bias", "v_proj.bias"},
    {"attn_output.weight", "o_proj.weight"}, {"attn_output.bias", "o_proj.bias"},
};

// The first layer holding "blk.N.<rest>", or -1.
int64_t FirstLayerWith(const GgufFile& f, const std::string& rest) {
  std::string r;
  for (const GgufTensor& t : f.tensors()) {
    const int64_t layer = SplitGgufLayer(t.name, &r);
    if (layer >= 0 && r == rest) return layer;
  }
  return -1;
}

// The conv and projection biases, from the tensors (no key records them).
void ReadGgufMixerBiases(const GgufFile& f, ModelConfig* c) {
  c->conv_bias = AnyLayerTensor(f, "ssm_conv1d.bias");
  c->proj_bias = AnyLayerTensor(f, "ssm_in.bias");
  c->out_proj_bias = AnyLayerTensor(f, "ssm_out.bias") ? 1 : 0;
}

}  // namespace

const GgufArch* FindGgufArch(const std::string& arch) {
  for (const GgufArch& a : kArchs) {
    if (arch == a.name) return &a;
  }
  return nullptr;
}

GgufNameFor FindGgufName(const GgufArch& a, const std::string& hf, const ModelConfig& c) {
  // The layer: the number after the first "layers." (model.layers.N., backbone.layers.N.).
  int64_t layer = -1;
  const size_t at = hf.find("layers.");
  if (at != std::string::npos) {
    const size_t digits = at + 7, dot = hf.find('.', digits);
    const std::string n = hf.substr(digits, dot == std::string::npos ? 0 : dot - digits);
    if (!n.empty() && n.size() <= 9 && n.find_first_not_of("0123456789") == std::string::npos)
      layer = std::stoll(n);
  }
  GgufNameFor out;
  auto try_name = [&](const std::string& rest) {
    const GgufTensorName mapped = a.map(rest, layer, c);
    if (mapped.hf != hf) return false;
    out.gguf = layer < 0 ? rest : "blk." + std::to_string(layer) + "." + rest;
    out.permute_heads = mapped.unpermute_heads;
    return true;
  };
  if (layer < 0) {
    for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight"}) {
      if (try_name(name)) break;
    }
    return out;
  }
  for (const char* rest : GgufLayerTensorNames()) {
    if (try_name(rest)) break;
  }
  return out;
}

std::string GgufArchList() {
  std::string s;
  for (const GgufArch& a : kArchs) s += (s.empty() ? "'" : ", '") + std::string(a.name) + "'";
  return s;
}

Status GgufKeys::Wrong(const std::string& key, const std::string& expected,
                       const std::string& given) const {
  return Status::InvalidArgument(f_.label() + ": metadata key '" + Key(key) + "' is " + given +
                                 ", expected " + expected);
}

Status GgufKeys::Int(const std::string& key, int64_t* v) const {
  return f_.GetInteger(Key(key), v);
}

Status GgufKeys::OptInt(const std::string& key, int64_t* v) const {
  return Has(key) ? Int(key, v) : Status::Ok();
}

Status GgufKeys::OptDouble(const std::string& key, double* v) const {
  return Has(key) ? f_.GetReal(Key(key), v) : Status::Ok();
}

Status GgufKeys::OptFloat(const std::string& key, float* v) const {
  double d = *v;
  SSMKIT_RETURN_IF_ERROR(OptDouble(key, &d));
  *v = static_cast<float>(d);
  return Status::Ok();
}

Status GgufKeys::OptBool(const std::string& key, bool* v) const {
  return Has(key) ? f_.GetBool(Key(key), v) : Status::Ok();
}

Status GgufKeys::PerLayer(const std::string& key, int64_t n_layer, std::vector<int64_t>* v) const {
  const GgufValue* value = f_.Find(Key(key));
  if (value != nullptr && value->type == GgufType::kArray) {
    const std::vector<int64_t>* list = nullptr;
    SSMKIT_RETURN_IF_ERROR(f_.GetIntegers(Key(key), &list));
    if (static_cast<int64_t>(list->size()) != n_layer) {
      return Wrong(key, "block_count = " + std::to_string(n_layer) + " entries",
                   std::to_string(list->size()) + " entries");
    }
    *v = *list;
  } else {
    int64_t one = 0;
    SSMKIT_RETURN_IF_ERROR(Int(key, &one));
    v->assign(static_cast<size_t>(n_layer), one);
  }
  for (int64_t x : *v) {
    if (x < 0) return Wrong(key, "non-negative counts", std::to_string(x));
  }
  return Status::Ok();
}

Status GgufKeys::NonZero(const std::string& key, const std::vector<int64_t>& per_layer,
                         const std::string& what, int64_t* v) const {
  *v = 0;
  for (int64_t x : per_layer) {
    if (x == 0) continue;
    if (*v != 0 && x != *v) {
      return Wrong(key, "the same " + what, std::to_string(*v) + " and " + std::to_string(x));
    }
    *v = x;
  }
  return Status::Ok();
}

Status ReadGgufCommon(const GgufKeys& k, ModelConfig* c) {
  const GgufFile& f = k.file();
  c->format = "gguf";  // tensors under the Hugging Face names (model/gguf_model.cpp)
  SSMKIT_RETURN_IF_ERROR(k.Int("embedding_length", &c->d_model));
  SSMKIT_RETURN_IF_ERROR(k.Int("block_count", &c->n_layer));
  if (c->n_layer < 1 || c->n_layer > (int64_t{1} << 20)) {
    return k.Wrong("block_count", "1 to 2^20 layers", std::to_string(c->n_layer));
  }
  // The RMSNorm epsilon; nemotron_h's converter writes it as layer_norm_epsilon (the config's
  // key name), which stands for the same RMSNorm's.
  std::string eps_key = "attention.layer_norm_rms_epsilon";
  if (!k.Has(eps_key) && k.Has("attention.layer_norm_epsilon")) {
    eps_key = "attention.layer_norm_epsilon";
  }
  double eps = 0.0;
  SSMKIT_RETURN_IF_ERROR(f.GetReal(k.Key(eps_key), &eps));
  c->norm_eps = static_cast<float>(eps);
  const GgufTensor* embedding = f.FindTensor("token_embd.weight");
  if (embedding == nullptr || embedding->shape.size() != 2) {
    return Status::InvalidArgument(f.label() + ": no 2-D tensor 'token_embd.weight'");
  }
  c->vocab_size = c->config_vocab_size = embedding->shape[0];
  c->tie_embeddings = f.FindTensor("output.weight") == nullptr;
  int64_t id = 0;
  if (f.GetInteger("tokenizer.ggml.bos_token_id", &id).ok()) c->bos_token_id = id;
  if (f.GetInteger("tokenizer.ggml.eos_token_id", &id).ok()) c->eos_token_id = id;
  if (f.GetInteger("tokenizer.ggml.padding_token_id", &id).ok()) c->pad_token_id = id;
  return Status::Ok();
}

Status ReadGgufMamba2(const GgufKeys& k, ModelConfig* c) {
  c->arch = ModelArch::kMamba2;
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.inner_size", &c->d_inner));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.state_size", &c->d_state));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.conv_kernel", &c->d_conv));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.time_step_rank", &c->nheads));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.group_count", &c->ngroups));
  if (c->nheads < 1 || c->d_inner % c->nheads != 0) {
    return k.Wrong("ssm.time_step_rank",
                   "a head count dividing ssm.inner_size " + std::to_string(c->d_inner),
                   std::to_string(c->nheads));
  }
  c->headdim = c->d_inner / c->nheads;
  ReadGgufMixerBiases(k.file(), c);
  return Status::Ok();
}

Status ReadGgufMamba1(const GgufKeys& k, ModelConfig* c) {
  c->arch = ModelArch::kMamba1;
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.inner_size", &c->d_inner));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.state_size", &c->d_state));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.conv_kernel", &c->d_conv));
  SSMKIT_RETURN_IF_ERROR(k.Int("ssm.time_step_rank", &c->dt_rank));
  ReadGgufMixerBiases(k.file(), c);
  return Status::Ok();
}

Status ReadGgufAttention(const GgufKeys& k, const std::vector<int64_t>& kv_heads, bool rope,
                         ModelConfig* c) {
  AttentionConfig& a = c->attention;
  SSMKIT_RETURN_IF_ERROR(k.Int("attention.head_count", &a.num_heads));
  SSMKIT_RETURN_IF_ERROR(k.NonZero("attention.head_count_kv", kv_heads,
                                   "count on every attention layer", &a.num_kv_heads));
  if (a.num_heads < 1 || c->d_model % a.num_heads != 0) {
    return k.Wrong("attention.head_count",
                   "a head count dividing embedding_length " + std::to_string(c->d_model),
                   std::to_string(a.num_heads));
  }
  a.head_dim = c->d_model / a.num_heads;
  SSMKIT_RETURN_IF_ERROR(k.OptInt("attention.key_length", &a.head_dim));
  const GgufFile& f = k.file();
  a.qkv_bias = AnyLayerTensor(f, "attn_q.bias");
  a.o_bias = AnyLayerTensor(f, "attn_output.bias");
  a.rotary_dim = 0;
  if (rope) {
    a.rotary_dim = a.head_dim;
    SSMKIT_RETURN_IF_ERROR(k.OptInt("rope.dimension_count", &a.rotary_dim));
    if (a.rotary_dim < 2 || a.rotary_dim > a.head_dim || a.rotary_dim % 2 != 0) {
      return k.Wrong("rope.dimension_count",
                     "an even count in [2, head dim " + std::to_string(a.head_dim) + "]",
                     std::to_string(a.rotary_dim));
    }
    a.rope_theta = 10000.0;
    SSMKIT_RETURN_IF_ERROR(k.OptDouble("rope.freq_base", &a.rope_theta));
  }
  return Status::Ok();
}

int64_t SplitGgufLayer(const std::string& name, std::string* rest) {
  *rest = name;
  if (name.compare(0, 4, "blk.") != 0) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot > 4 + 9) return -1;
  const std::string layer = name.substr(4, dot - 4);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return -1;
  *rest = name.substr(dot + 1);
  return std::stoll(layer);
}

bool AnyLayerTensor(const GgufFile& f, const std::string& rest) {
  return FirstLayerWith(f, rest) >= 0;
}

std::vector<bool> LayersWithTensor(const GgufFile& f, int64_t n_layer, const std::string& rest) {
  std::vector<bool> has(static_cast<size_t>(n_layer));
  std::string r;
  for (const GgufTensor& t : f.tensors()) {
    const int64_t layer = SplitGgufLayer(t.name, &r);
    if (layer >= 0 && layer < n_layer && r == rest) has[static_cast<size_t>(layer)] = true;
  }
  return has;
}

const char* LookupGgufName(std::span<const GgufNamePair> pairs, const std::string& name) {
  for (const GgufNamePair& p : pairs) {
    if (name == p.gguf) return p.hf;
  }
  return nullptr;
}

std::string HfLayerPrefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

GgufTensorName MapGgufOutsideLayers(const std::string& name, const char* embedding,
                                    const char* final_norm) {
  GgufTensorName out;
  if (name == "token_embd.weight") out.hf = embedding;
  if (name == "output_norm.weight") out.hf = final_norm;
  if (name == "output.weight") out.hf = "lm_head.weight";
  return out;
}

GgufTensorName MapGgufMixer(const std::string& rest, const std::string& mixer,
                            const std::string& attention, bool unpermute, const ModelConfig& c) {
  GgufTensorName out;
  if (const char* hf = GgufMixerName(rest, c.arch)) {
    out.hf = mixer + hf;
  } else if (const char* hf = LookupGgufName(kAttention, rest)) {
    out.hf = attention + hf;
    if (unpermute && (rest == "attn_q.weight" || rest == "attn_q.bias")) {
      out.unpermute_heads = c.attention.num_heads;
    } else if (unpermute && (rest == "attn_k.weight" || rest == "attn_k.bias")) {
      out.unpermute_heads = c.attention.num_kv_heads;
    }
  }
  return out;
}

}  // namespace ssmkit::model

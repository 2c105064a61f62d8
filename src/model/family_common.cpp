// What the hybrid families' config readers share, and the table of families.
#include <cmath>
#include <string>

#include "model/families.hpp"
#include "ssmkit/mlp.hpp"

namespace ssmkit::model {
namespace {

const Family kFamilies[] = {
    {"granitemoehybrid", "GraniteMoeHybridForCausalLM", ParseGraniteMoeHybrid,
     PlanGraniteMoeHybrid},
    {"bamba", "BambaForCausalLM", ParseBamba, PlanBamba},
    {"nemotron_h", "NemotronHForCausalLM", ParseNemotronH, PlanNemotronH},
    {"falcon_h1", "FalconH1ForCausalLM", ParseFalconH1, PlanFalconH1},
    {"jamba", "JambaForCausalLM", ParseJamba, PlanJamba},
    {"zamba2", "Zamba2ForCausalLM", ParseZamba2, PlanZamba2},
};

}  // namespace

const Family* FindFamily(const std::string& model_type) {
  for (const Family& f : kFamilies) {
    if (model_type == f.model_type) return &f;
  }
  return nullptr;
}

const Family* FindFamilyByArchitecture(const std::string& architecture) {
  for (const Family& f : kFamilies) {
    if (architecture == f.architecture) return &f;
  }
  return nullptr;
}

std::string FamilyList() {
  std::string s;
  for (const Family& f : kFamilies) {
    s += (s.empty() ? "" : ", ") + std::string("\"") + f.model_type + "\" (" + f.architecture + ")";
  }
  return s;
}

Status ReadCommon(const Reader& r, const CommonDefaults& d, ModelConfig* c) {
  c->format = "hf";
  c->d_model = d.hidden_size;
  c->n_layer = d.num_hidden_layers;
  c->vocab_size = d.vocab_size;
  c->tie_embeddings = d.tie_word_embeddings;
  c->max_position_embeddings = d.max_position_embeddings;
  c->norm_eps = d.eps;
  c->bos_token_id = 1;
  c->eos_token_id = 2;
  c->pad_token_id = d.pad_token_id;
  SSMKIT_RETURN_IF_ERROR(r.Int("hidden_size", &c->d_model));
  SSMKIT_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c->n_layer));
  SSMKIT_RETURN_IF_ERROR(r.Int("vocab_size", &c->vocab_size));
  c->config_vocab_size = c->vocab_size;
  SSMKIT_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c->tie_embeddings));
  SSMKIT_RETURN_IF_ERROR(r.Int("max_position_embeddings", &c->max_position_embeddings));
  SSMKIT_RETURN_IF_ERROR(r.Float(d.eps_key, &c->norm_eps));
  // A key present as null means None: no such token.
  for (auto [key, id] :
       {std::pair{"bos_token_id", &c->bos_token_id}, std::pair{"eos_token_id", &c->eos_token_id},
        std::pair{"pad_token_id", &c->pad_token_id}}) {
    if (r.json().contains(key) && r.json().at(key).is_null()) *id = -1;
    SSMKIT_RETURN_IF_ERROR(r.TokenId(key, id));
  }
  return Status::Ok();
}

Status ReadAttention(const Reader& r, int64_t heads_default, int64_t kv_default, ModelConfig* c) {
  AttentionConfig& a = c->attention;
  a.num_heads = heads_default;
  SSMKIT_RETURN_IF_ERROR(r.Int("num_attention_heads", &a.num_heads));
  a.num_kv_heads = kv_default < 0 ? a.num_heads : kv_default;
  SSMKIT_RETURN_IF_ERROR(r.Int("num_key_value_heads", &a.num_kv_heads));
  if (a.num_heads < 1) return r.Wrong("num_attention_heads", "an integer >= 1");
  a.head_dim = c->d_model / a.num_heads;
  SSMKIT_RETURN_IF_ERROR(r.Int("head_dim", &a.head_dim));
  SSMKIT_RETURN_IF_ERROR(r.Bool("attention_bias", &a.qkv_bias));
  a.o_bias = a.qkv_bias;
  return Status::Ok();
}

Status ReadRope(const Reader& r, bool use_partial, double partial_default, ModelConfig* c) {
  AttentionConfig& a = c->attention;
  const Json empty = Json::object();
  const Json* rope = &empty;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (r.Has(key)) {
      if (!r.json().at(key).is_object()) return r.Wrong(key, "an object");
      rope = &r.json().at(key);
      break;
    }
  }
  // Parameters nested per layer type: the attention layers' entry.
  if (rope->contains("full_attention") && rope->at("full_attention").is_object())
    rope = &rope->at("full_attention");
  const Reader rr(*rope, r.file(), "rope_parameters.");
  std::string type = "default";
  SSMKIT_RETURN_IF_ERROR(rr.String("type", &type));
  SSMKIT_RETURN_IF_ERROR(rr.String("rope_type", &type));
  if (type != "default") {
    return Status::Unsupported(r.file() + ": rope type \"" + type +
                               "\": only \"default\" rotary embeddings are supported");
  }
  a.rope_theta = 10000.0;
  SSMKIT_RETURN_IF_ERROR(r.Double("rope_theta", &a.rope_theta));
  SSMKIT_RETURN_IF_ERROR(rr.Double("rope_theta", &a.rope_theta));
  double partial = 1.0;
  if (use_partial) {
    if (partial_default > 0.0) {
      partial = partial_default;
    } else {
      SSMKIT_RETURN_IF_ERROR(r.Double("partial_rotary_factor", &partial));
    }
    SSMKIT_RETURN_IF_ERROR(rr.Double("partial_rotary_factor", &partial));
  }
  if (!(partial > 0.0 && partial <= 1.0))
    return Status::InvalidArgument(r.file() + ": partial_rotary_factor must be in (0, 1]");
  a.rotary_dim = static_cast<int64_t>(static_cast<double>(a.head_dim) * partial);
  return Status::Ok();
}

const Mamba2Keys kMambaPrefixedKeys = {"mamba_n_heads",    "mamba_d_head",    "mamba_n_groups",
                                       "mamba_d_state",    "mamba_d_conv",    "mamba_expand",
                                       "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias"};
const Mamba2Defaults kMambaPrefixedDefaults = {128, 1, 256, 4, 2, 256, true, false};

void PlanDecoderLayers(Planner& p, ModelWeights* w) {
  const ModelConfig& c = p.config();
  const int64_t d = c.d_model, E = c.ffn.num_experts, F = c.ffn.intermediate;
  p.Matrix({"model.embed_tokens.weight"}, {c.vocab_size, d}, &w->embedding);
  for (Block& b : w->blocks) {
    const std::string l = "model.layers." + std::to_string(b.spec.layer) + ".";
    const BlockKind k = b.spec.kind;
    if (k != BlockKind::kMlp && k != BlockKind::kMoe) {
      p.Vector({l + "input_layernorm.weight"}, {d}, &b.norm);
      if (k == BlockKind::kMamba1) p.Mamba1(l + "mamba.", &b.mamba1);
      if (k == BlockKind::kMamba2 || k == BlockKind::kParallelHybrid)
        p.Mamba2(l + "mamba.", &b.mamba2);
      if (k == BlockKind::kAttention || k == BlockKind::kParallelHybrid)
        p.Attention(l + "self_attn.", &b.attention);
      continue;
    }
    p.Vector({l + "pre_ff_layernorm.weight"}, {d}, &b.norm);
    const std::string m = l + "feed_forward.";
    if (k == BlockKind::kMlp) {
      p.Mlp(m, F, true, &b.ffn.mlp);
      continue;
    }
    p.Matrix({m + "router.weight"}, {E, d}, &b.ffn.router);
    if (p.Has(m + "experts.up_proj")) {  // a GGUF file's: gate and up stacked apart
      p.StackedExperts(m + "experts.", &b.ffn);
      continue;
    }
    if (p.Has(m + "experts.gate_up_proj")) {  // transformers 5's fused spelling
      p.Matrix({m + "experts.gate_up_proj"}, {E, 2 * F, d}, &b.ffn.experts_gate_up);
      p.Matrix({m + "experts.down_proj"}, {E, d, F}, &b.ffn.experts_down);
      p.SplitExperts(&b.ffn);
      continue;
    }
    b.ffn.experts.assign(static_cast<size_t>(E), MlpWeights{});
    for (int64_t e = 0; e < E; ++e)
      p.Mlp(m + "experts." + std::to_string(e) + ".", F, true, &b.ffn.experts[e]);
  }
  p.Vector({"model.final_layernorm.weight"}, {d}, &w->norm_f);
}

Status ReadMamba2(const Reader& r, const Mamba2Keys& k, const Mamba2Defaults& d, ModelConfig* c) {
  c->arch = ModelArch::kMamba2;
  c->nheads = d.heads;
  c->ngroups = d.groups;
  c->d_state = d.state;
  c->d_conv = d.conv;
  c->chunk_size = d.chunk;
  c->conv_bias = d.conv_bias;
  c->proj_bias = d.proj_bias;
  int64_t expand = d.expand;
  SSMKIT_RETURN_IF_ERROR(r.Int(k.heads, &c->nheads));
  SSMKIT_RETURN_IF_ERROR(r.Int(k.groups, &c->ngroups));
  SSMKIT_RETURN_IF_ERROR(r.Int(k.state, &c->d_state));
  SSMKIT_RETURN_IF_ERROR(r.Int(k.conv, &c->d_conv));
  if (k.expand != nullptr) SSMKIT_RETURN_IF_ERROR(r.Int(k.expand, &expand));
  SSMKIT_RETURN_IF_ERROR(r.Int(k.chunk, &c->chunk_size));
  if (k.conv_bias != nullptr) SSMKIT_RETURN_IF_ERROR(r.Bool(k.conv_bias, &c->conv_bias));
  SSMKIT_RETURN_IF_ERROR(r.Bool(k.proj_bias, &c->proj_bias));
  if (c->d_inner == 0) {
    SSMKIT_RETURN_IF_ERROR(r.Expanded(k.expand != nullptr ? k.expand : "expand",
                                      static_cast<double>(expand), c->d_model, &c->d_inner));
  }
  if (c->nheads < 1) return r.Wrong(k.heads, "an integer >= 1");
  const bool auto_head = k.head_dim == nullptr || !r.Has(k.head_dim) ||
                         (r.json().at(k.head_dim).is_string() && r.json().at(k.head_dim) == "auto");
  if (auto_head) {
    c->headdim = c->d_inner / c->nheads;
  } else {
    SSMKIT_RETURN_IF_ERROR(r.Int(k.head_dim, &c->headdim));
  }
  return r.FloatPair("time_step_limit", &c->dt_min, &c->dt_max);
}

Status ReadActivation(const Reader& r, const char* key, const char* fallback, std::string* act) {
  *act = fallback;
  SSMKIT_RETURN_IF_ERROR(r.String(key, act));
  MlpActivation parsed;
  const Status s = MlpActivationFromName(*act, &parsed);
  if (!s.ok()) return Status::Unsupported(r.file() + ": \"" + key + "\": " + s.message());
  return Status::Ok();
}

}  // namespace ssmkit::model

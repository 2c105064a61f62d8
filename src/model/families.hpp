// The Hugging Face model families beyond pure Mamba (model/config.cpp reads those): each reads
// its config.json the way its transformers configuration class does (defaults, renamed keys,
// the spellings save_pretrained and the published hub files use) into a ModelConfig with its
// block list, and names its tensors. One file per family: model/family_<model_type>.cpp.
#pragma once

#include <string>

#include "model/config_reader.hpp"
#include "model/tensor_planner.hpp"
#include "model/weights.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit::model {

struct Family {
  const char* model_type;    // config.json's "model_type"
  const char* architecture;  // transformers' class, config.json's "architectures"
  Status (*parse)(const Reader& r, ModelConfig* c);
  // Every tensor of weights->blocks (already sized from the block list), the embedding,
  // the final norm; the LM head is added by the caller.
  void (*plan)(Planner& p, ModelWeights* w);
};

// nullptr for an unknown model_type.
const Family* FindFamily(const std::string& model_type);
// The family whose architecture is `architecture`, or nullptr.
const Family* FindFamilyByArchitecture(const std::string& architecture);
// "granitemoehybrid (GraniteMoeHybridForCausalLM), bamba (...), ...", for messages.
std::string FamilyList();

// Each family's entry points.
Status ParseGraniteMoeHybrid(const Reader& r, ModelConfig* c);
void PlanGraniteMoeHybrid(Planner& p, ModelWeights* w);
Status ParseBamba(const Reader& r, ModelConfig* c);
void PlanBamba(Planner& p, ModelWeights* w);
Status ParseNemotronH(const Reader& r, ModelConfig* c);
void PlanNemotronH(Planner& p, ModelWeights* w);
Status ParseFalconH1(const Reader& r, ModelConfig* c);
void PlanFalconH1(Planner& p, ModelWeights* w);
Status ParseJamba(const Reader& r, ModelConfig* c);
void PlanJamba(Planner& p, ModelWeights* w);
Status ParseZamba2(const Reader& r, ModelConfig* c);
void PlanZamba2(Planner& p, ModelWeights* w);

// Helpers the family readers share (model/family_common.cpp).

// The keys every family has, with the class's defaults given: hidden_size, num_hidden_layers,
// vocab_size, tie_word_embeddings, max_position_embeddings, the special tokens (default bos 1,
// eos 2, pad `pad`), and the norm epsilon under `eps_key`.
struct CommonDefaults {
  int64_t hidden_size, num_hidden_layers, vocab_size;
  bool tie_word_embeddings;
  int64_t max_position_embeddings;
  const char* eps_key;
  float eps;
  int64_t pad_token_id;  // -1: None
};
Status ReadCommon(const Reader& r, const CommonDefaults& d, ModelConfig* c);

// num_attention_heads, num_key_value_heads (kv_default < 0: the heads), head_dim (key "head_dim"
// when present, else hidden / heads), attention_bias into c->attention.
Status ReadAttention(const Reader& r, int64_t heads_default, int64_t kv_default, ModelConfig* c);

// The rotary embedding as transformers standardises it: rope_parameters (or the older
// rope_scaling) with rope_type "default" only, rope_theta there or at the top level (default
// 10000), partial_rotary_factor there or at the top level (or `partial_default` when
// `forced_partial` says the class hard-codes it, as Bamba does); rotary_dim =
// int(head_dim * factor) when `use_partial`, else head_dim.
Status ReadRope(const Reader& r, bool use_partial, double partial_default, ModelConfig* c);

// A Mamba-2 mixer's config under the given keys (a family passes its own spellings).
struct Mamba2Keys {
  const char* heads;
  const char* head_dim;  // may hold "auto"; nullptr: always d_inner / heads
  const char* groups;
  const char* state;
  const char* conv;
  const char* expand;
  const char* chunk;
  const char* conv_bias;  // nullptr: the default, always
  const char* proj_bias;
};
struct Mamba2Defaults {
  int64_t heads, groups, state, conv, expand, chunk;
  bool conv_bias, proj_bias;
};
// The "mamba_"-prefixed keys GraniteMoeHybrid, Bamba and Falcon-H1 share, with their classes'
// defaults.
extern const Mamba2Keys kMambaPrefixedKeys;
extern const Mamba2Defaults kMambaPrefixedDefaults;
// d_inner must be set (or 0: expand * hidden); head_dim "auto" (or absent) is d_inner / heads.
Status ReadMamba2(const Reader& r, const Mamba2Keys& k, const Mamba2Defaults& d, ModelConfig* c);

// The tensors of transformers' decoder-layer naming that Bamba, Falcon-H1 and Jamba share:
// model.embed_tokens, per layer "input_layernorm" before the mixer ("mamba." and / or
// "self_attn.") and "pre_ff_layernorm" before "feed_forward." (an MLP, or a router and
// per-expert or fused experts), model.final_layernorm.
void PlanDecoderLayers(Planner& p, ModelWeights* w);

// hidden_act / mlp_hidden_act: a name include/ssmkit/mlp.hpp knows.
Status ReadActivation(const Reader& r, const char* key, const char* fallback, std::string* act);

}  // namespace ssmkit::model

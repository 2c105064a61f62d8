#include "model/config.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/round_up.hpp"
#include "model/config_reader.hpp"
#include "model/families.hpp"

namespace ssmkit::model {
namespace {

Status SpecialTokens(const Reader& r, ModelConfig* c) {
  SSMKIT_RETURN_IF_ERROR(r.TokenId("bos_token_id", &c->bos_token_id));
  SSMKIT_RETURN_IF_ERROR(r.TokenId("eos_token_id", &c->eos_token_id));
  return r.TokenId("pad_token_id", &c->pad_token_id);
}

// "auto" or an integer.
Status DtRank(const Reader& r, const Json& j, const char* key, int64_t d_model, int64_t* rank) {
  *rank = (d_model + 15) / 16;  // ceil(d_model / 16), both libraries' "auto"
  if (!r.Has(key)) return Status::Ok();
  if (j.at(key).is_string() && j.at(key).get<std::string>() == "auto") return Status::Ok();
  return r.Int(key, rank);
}

Status ParseHf(const Json& j, const std::string& file, const std::string& model_type,
               ModelConfig* c) {
  const Reader r(j, file);
  c->format = "hf";
  c->family = model_type;
  c->arch = model_type == "mamba2" ? ModelArch::kMamba2 : ModelArch::kMamba1;
  std::string act = "silu";
  SSMKIT_RETURN_IF_ERROR(r.String("hidden_act", &act));
  if (act != "silu") return r.Wrong("hidden_act", "\"silu\"", j.at("hidden_act"));
  SSMKIT_RETURN_IF_ERROR(r.Int("hidden_size", &c->d_model, true));
  SSMKIT_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c->n_layer, true));
  SSMKIT_RETURN_IF_ERROR(r.Int("vocab_size", &c->vocab_size, true));
  c->config_vocab_size = c->vocab_size;
  SSMKIT_RETURN_IF_ERROR(r.Int("state_size", &c->d_state, true));
  float expand = 2.0f;
  SSMKIT_RETURN_IF_ERROR(r.Float("expand", &expand));
  SSMKIT_RETURN_IF_ERROR(r.Expanded("expand", expand, c->d_model, &c->d_inner));
  SSMKIT_RETURN_IF_ERROR(r.Int("intermediate_size", &c->d_inner));
  SSMKIT_RETURN_IF_ERROR(r.Int("conv_kernel", &c->d_conv));
  SSMKIT_RETURN_IF_ERROR(r.Bool("use_bias", &c->proj_bias));
  SSMKIT_RETURN_IF_ERROR(r.Bool("use_conv_bias", &c->conv_bias));
  SSMKIT_RETURN_IF_ERROR(r.Float("layer_norm_epsilon", &c->norm_eps));
  // transformers' defaults: MambaConfig ties the LM head, Mamba2Config does not.
  c->tie_embeddings = c->arch == ModelArch::kMamba1;
  SSMKIT_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c->tie_embeddings));
  SSMKIT_RETURN_IF_ERROR(SpecialTokens(r, c));
  if (c->arch == ModelArch::kMamba1) return DtRank(r, j, "time_step_rank", c->d_model, &c->dt_rank);
  SSMKIT_RETURN_IF_ERROR(r.Int("num_heads", &c->nheads, true));
  SSMKIT_RETURN_IF_ERROR(r.Int("head_dim", &c->headdim, true));
  SSMKIT_RETURN_IF_ERROR(r.Int("n_groups", &c->ngroups));
  SSMKIT_RETURN_IF_ERROR(r.Int("chunk_size", &c->chunk_size));
  SSMKIT_RETURN_IF_ERROR(r.FloatPair("time_step_limit", &c->dt_min, &c->dt_max));
  bool rms_norm = true;
  SSMKIT_RETURN_IF_ERROR(r.Bool("rms_norm", &rms_norm));
  if (!rms_norm) return r.Wrong("rms_norm", "true (the gated RMSNorm)", j.at("rms_norm"));
  return Status::Ok();
}

Status ParseStateSpaces(const Json& j, const std::string& file, ModelConfig* c) {
  const Reader r(j, file);
  c->format = "state-spaces";
  SSMKIT_RETURN_IF_ERROR(r.Int("d_model", &c->d_model, true));
  SSMKIT_RETURN_IF_ERROR(r.Int("n_layer", &c->n_layer, true));
  SSMKIT_RETURN_IF_ERROR(r.Int("vocab_size", &c->config_vocab_size, true));
  int64_t pad_multiple = 8, d_intermediate = 0;
  SSMKIT_RETURN_IF_ERROR(r.Int("pad_vocab_size_multiple", &pad_multiple));
  if (pad_multiple < 1)
    return r.Wrong("pad_vocab_size_multiple", "an integer >= 1", j.at("pad_vocab_size_multiple"));
  c->vocab_size = RoundUp(c->config_vocab_size, pad_multiple);
  SSMKIT_RETURN_IF_ERROR(r.Bool("tie_embeddings", &c->tie_embeddings));
  SSMKIT_RETURN_IF_ERROR(r.Int("d_intermediate", &d_intermediate));
  if (d_intermediate != 0) {
    return Status::Unsupported(file + ": \"d_intermediate\" = " + std::to_string(d_intermediate) +
                               ": MLP layers between the Mamba blocks are not supported");
  }
  if (r.Has("attn_layer_idx") &&
      !(j.at("attn_layer_idx").is_array() && j.at("attn_layer_idx").empty())) {
    return Status::Unsupported(file + ": \"attn_layer_idx\": attention layers are not supported");
  }
  bool rms_norm = true;
  SSMKIT_RETURN_IF_ERROR(r.Bool("rms_norm", &rms_norm));
  if (!rms_norm)
    return r.Wrong("rms_norm", "true (LayerNorm models are not supported)", j.at("rms_norm"));
  SSMKIT_RETURN_IF_ERROR(r.Float("norm_epsilon", &c->norm_eps));
  SSMKIT_RETURN_IF_ERROR(SpecialTokens(r, c));
  const Json empty = Json::object();
  const Json& ssm = r.Has("ssm_cfg") ? j.at("ssm_cfg") : empty;
  if (!ssm.is_object()) return r.Wrong("ssm_cfg", "an object", ssm);
  const Reader s(ssm, file, "ssm_cfg.");
  std::string layer = "Mamba1";
  SSMKIT_RETURN_IF_ERROR(s.String("layer", &layer));
  if (layer != "Mamba1" && layer != "Mamba2")
    return s.Wrong("layer", "\"Mamba1\" or \"Mamba2\"", ssm.at("layer"));
  c->arch = layer == "Mamba2" ? ModelArch::kMamba2 : ModelArch::kMamba1;
  c->family = layer == "Mamba2" ? "mamba2" : "mamba";
  c->d_state = c->arch == ModelArch::kMamba2 ? 128 : 16;  // mamba_ssm's defaults
  SSMKIT_RETURN_IF_ERROR(s.Int("d_state", &c->d_state));
  SSMKIT_RETURN_IF_ERROR(s.Int("d_conv", &c->d_conv));
  float expand = 2.0f;
  SSMKIT_RETURN_IF_ERROR(s.Float("expand", &expand));
  SSMKIT_RETURN_IF_ERROR(s.Expanded("expand", expand, c->d_model, &c->d_inner));
  SSMKIT_RETURN_IF_ERROR(s.Bool("conv_bias", &c->conv_bias));
  SSMKIT_RETURN_IF_ERROR(s.Bool("bias", &c->proj_bias));
  if (c->arch == ModelArch::kMamba1) return DtRank(s, ssm, "dt_rank", c->d_model, &c->dt_rank);
  c->headdim = 64;
  SSMKIT_RETURN_IF_ERROR(s.Int("headdim", &c->headdim));
  SSMKIT_RETURN_IF_ERROR(s.Int("ngroups", &c->ngroups));
  SSMKIT_RETURN_IF_ERROR(s.Int("chunk_size", &c->chunk_size));
  SSMKIT_RETURN_IF_ERROR(s.FloatPair("dt_limit", &c->dt_min, &c->dt_max));
  SSMKIT_RETURN_IF_ERROR(s.Bool("D_has_hdim", &c->d_per_channel));
  int64_t d_ssm = c->d_inner;
  SSMKIT_RETURN_IF_ERROR(s.Int("d_ssm", &d_ssm));
  if (d_ssm != c->d_inner) {
    return Status::Unsupported(file + ": \"ssm_cfg.d_ssm\" = " + std::to_string(d_ssm) +
                               " differs from d_inner = " + std::to_string(c->d_inner) +
                               ": the gated MLP part of in_proj is not supported");
  }
  bool rmsnorm = true, norm_before_gate = false;
  SSMKIT_RETURN_IF_ERROR(s.Bool("rmsnorm", &rmsnorm));
  SSMKIT_RETURN_IF_ERROR(s.Bool("norm_before_gate", &norm_before_gate));
  if (!rmsnorm) return s.Wrong("rmsnorm", "true", ssm.at("rmsnorm"));
  if (norm_before_gate)
    return s.Wrong("norm_before_gate", "false (the pretrained models' setting)",
                   ssm.at("norm_before_gate"));
  if (c->headdim > 0) c->nheads = c->d_inner / c->headdim;
  return Status::Ok();
}

Status ParseConfigJson(const std::string& text, const std::string& file, ModelConfig* config) {
  const Json j = Json::parse(QuoteNonFiniteTokens(text), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(file + ": not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument(file + ": expected a JSON object");
  ModelConfig c;
  if (j.contains("d_model") && j.contains("n_layer")) {
    SSMKIT_RETURN_IF_ERROR(ParseStateSpaces(j, file, &c));
  } else {
    const Reader r(j, file);
    std::string model_type;
    SSMKIT_RETURN_IF_ERROR(r.String("model_type", &model_type));
    if (model_type.empty() && j.contains("architectures") && j.at("architectures").is_array() &&
        !j.at("architectures").empty() && j.at("architectures")[0].is_string()) {
      const std::string a = j.at("architectures")[0].get<std::string>();
      const Family* f = FindFamilyByArchitecture(a);
      model_type = a == "MambaForCausalLM"    ? "mamba"
                   : a == "Mamba2ForCausalLM" ? "mamba2"
                   : f != nullptr             ? f->model_type
                                              : a;
    }
    if (const Family* f = FindFamily(model_type); f != nullptr) {
      c.family = model_type;
      SSMKIT_RETURN_IF_ERROR(f->parse(r, &c));
    } else if (model_type == "mamba" || model_type == "mamba2") {
      SSMKIT_RETURN_IF_ERROR(ParseHf(j, file, model_type, &c));
    } else {
      return Status::Unsupported(
          file + ": model_type \"" + model_type +
          "\": expected \"mamba\" or \"mamba2\" (MambaForCausalLM, Mamba2ForCausalLM), " +
          FamilyList() + ", or a state-spaces config with d_model and n_layer");
    }
  }
  const Status valid = c.Validate();
  if (!valid.ok()) return Status(valid.code(), file + ": " + valid.message());
  *config = c;
  return Status::Ok();
}

}  // namespace

Status ParseModelConfig(const std::string& text, const std::string& file, ModelConfig* config) {
  try {
    return ParseConfigJson(text, file, config);
  } catch (const nlohmann::json::exception& e) {  // a key of an unexpected JSON type
    return Status::InvalidArgument(file + ": malformed config: " + e.what());
  }
}

}  // namespace ssmkit::model

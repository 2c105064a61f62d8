#include "train/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "core/safetensors.hpp"

namespace ssmkit::train {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Status IoError(const std::string& path, const std::string& what) {
  return Status::InvalidArgument(path + ": " + what);
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return IoError(tmp, "cannot open for writing");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) return IoError(tmp, "write failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return IoError(path, "cannot rename " + tmp + " into place: " + ec.message());
  return Status::Ok();
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  Json header = Json::object();
  int64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    const int64_t bytes = Numel(e.shape) * DTypeSize(e.dtype);
    header[e.name] = {{"dtype", SafetensorsDTypeName(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t head_len = head.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((head_len >> (8 * i)) & 0xff);
  file += head;
  file.reserve(file.size() + static_cast<size_t>(offset));
  for (const SafetensorsEntry& e : entries) {
    const int64_t n = Numel(e.shape);
    if (e.dtype == DType::kBF16) {
      const float* src = static_cast<const float*>(e.data);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = F32ToBf16(src[i]);
        file.append(reinterpret_cast<const char*>(&v), 2);
      }
    } else {
      file.append(static_cast<const char*>(e.data), static_cast<size_t>(n * DTypeSize(e.dtype)));
    }
  }
  return WriteFileAtomically(path, file);
}

namespace {

// The shortest decimal that reads back as the same float (1e-05, not 9.99999974e-06).
double ShortestDecimal(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.7g", v);
  return std::strtod(text, nullptr);
}

// GraniteMoeHybridConfig's keys for the trainer's hybrid (dense: the shared MLP only), as
// transformers 5 writes them, with the hub files' layer_types spelling ("mamba" /
// "attention", which transformers and our reader both take).
std::string GraniteConfigJson(const ModelConfig& c) {
  const AttentionConfig& a = c.attention;
  const Multipliers& m = c.multipliers;
  Json j;
  j["architectures"] = {"GraniteMoeHybridForCausalLM"};
  j["model_type"] = "granitemoehybrid";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.d_model;
  j["num_hidden_layers"] = c.n_layer;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = ShortestDecimal(c.norm_eps);
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["pad_token_id"] = std::max<int64_t>(0, c.pad_token_id);
  j["bos_token_id"] = std::max<int64_t>(0, c.bos_token_id);
  j["eos_token_id"] = std::max<int64_t>(0, c.eos_token_id);
  j["hidden_act"] = c.ffn.activation;
  j["shared_intermediate_size"] = c.ffn.intermediate;
  j["intermediate_size"] = c.ffn.intermediate;  // the experts' width: unused without experts
  j["num_local_experts"] = 0;
  j["num_experts_per_tok"] = 0;
  j["output_router_logits"] = false;
  j["num_attention_heads"] = a.num_heads;
  j["num_key_value_heads"] = a.num_kv_heads;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["attention_multiplier"] =
      ShortestDecimal(a.scale > 0.0f ? a.scale : 1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  j["position_embedding_type"] = a.rotary_dim > 0 ? "rope" : "nope";
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", a.rope_theta}};
  j["embedding_multiplier"] = ShortestDecimal(m.embedding);
  j["residual_multiplier"] = ShortestDecimal(m.residual);
  j["logits_scaling"] = ShortestDecimal(1.0 / static_cast<double>(m.logits));
  Json types = Json::array();
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind == BlockKind::kMamba2) types.push_back("mamba");
    if (b.kind == BlockKind::kAttention) types.push_back("attention");
  }
  j["layer_types"] = types;
  j["mamba_n_heads"] = c.nheads;
  j["mamba_d_head"] = c.headdim;
  j["mamba_n_groups"] = c.ngroups;
  j["mamba_d_state"] = c.d_state;
  j["mamba_d_conv"] = c.d_conv;
  j["mamba_expand"] = c.d_inner / c.d_model;
  j["mamba_chunk_size"] = c.chunk_size;
  j["mamba_conv_bias"] = c.conv_bias;
  j["mamba_proj_bias"] = c.proj_bias;
  if (c.dt_min != 0.0f || std::isfinite(c.dt_max)) j["time_step_limit"] = {c.dt_min, c.dt_max};
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["dtype"] = "float32";
  return j.dump(2) + "\n";
}

}  // namespace

std::string HfConfigJson(const ModelConfig& c) {
  if (!c.is_pure_mamba()) return GraniteConfigJson(c);
  const bool m2 = c.arch == ModelArch::kMamba2;
  Json j;
  j["architectures"] = {m2 ? "Mamba2ForCausalLM" : "MambaForCausalLM"};
  j["model_type"] = m2 ? "mamba2" : "mamba";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.d_model;
  j["state_size"] = c.d_state;
  j["num_hidden_layers"] = c.n_layer;
  j["layer_norm_epsilon"] = ShortestDecimal(c.norm_eps);
  // Byte-level models have no special tokens; transformers' defaults (0) name the NUL byte,
  // which text never contains.
  j["pad_token_id"] = std::max<int64_t>(0, c.pad_token_id);
  j["bos_token_id"] = std::max<int64_t>(0, c.bos_token_id);
  j["eos_token_id"] = std::max<int64_t>(0, c.eos_token_id);
  j["expand"] = c.d_inner / c.d_model;
  j["conv_kernel"] = c.d_conv;
  j["use_bias"] = c.proj_bias;
  j["use_conv_bias"] = c.conv_bias;
  j["hidden_act"] = "silu";
  j["initializer_range"] = 0.1;
  j["residual_in_fp32"] = true;
  j["time_step_min"] = 0.001;
  j["time_step_max"] = 0.1;
  j["time_step_floor"] = 1e-4;
  j["rescale_prenorm_residual"] = false;
  j["use_cache"] = true;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["torch_dtype"] = "float32";
  if (!m2) {
    j["time_step_rank"] = c.dt_rank;
    j["time_step_scale"] = 1.0;
    j["time_step_init_scheme"] = "random";
  } else {
    j["num_heads"] = c.nheads;
    j["head_dim"] = c.headdim;
    j["n_groups"] = c.ngroups;
    j["chunk_size"] = c.chunk_size;
    j["rms_norm"] = true;
    j["norm_before_gate"] = false;
    if (c.dt_min != 0.0f || std::isfinite(c.dt_max)) j["time_step_limit"] = {c.dt_min, c.dt_max};
  }
  return j.dump(2) + "\n";
}

Status SaveModel(const TrainModel& model, const std::string& dir, DType dtype) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(dir, "cannot create the directory: " + ec.message());
  std::vector<SafetensorsEntry> entries;
  for (const ParamInfo& p : model.table().params()) {
    entries.push_back({p.name, p.shape, model.params().data() + p.offset, dtype});
  }
  SSMKIT_RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / "model.safetensors").string(), entries));
  return WriteFileAtomically((fs::path(dir) / "config.json").string(),
                             HfConfigJson(model.config()));
}

namespace {

// Copies tensor `name` of the checkpoint (any float dtype) into dst, checking its shape.
Status ReadTensor(const SafetensorsCheckpoint& ck, const std::string& name,
                  const std::vector<int64_t>& shape, float* dst) {
  const SafetensorsTensor* t = ck.Find(name);
  if (t == nullptr) return Status::InvalidArgument(ck.description() + ": missing tensor " + name);
  if (!t->float_dtype) {
    return Status::InvalidArgument(ck.description() + ": " + name +
                                   ": expected F32, BF16 or F16, given " + t->dtype_name);
  }
  if (t->shape != shape) {
    std::string want = "(";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    return Status::InvalidArgument(ck.description() + ": " + name + ": expected shape " + want +
                                   "), given " + t->shape_string());
  }
  RowToF32(t->data, t->dtype, 0, t->numel(), dst);
  return Status::Ok();
}

}  // namespace

Status LoadModelParams(const std::string& dir, TrainModel* model) {
  SafetensorsCheckpoint ck;
  SSMKIT_RETURN_IF_ERROR(SafetensorsCheckpoint::OpenDirectory(dir, &ck));
  const ParamTable& table = model->table();
  std::map<std::string, bool> expected;
  for (const ParamInfo& p : table.params()) {
    SSMKIT_RETURN_IF_ERROR(ReadTensor(ck, p.name, p.shape, model->params().data() + p.offset));
    expected[p.name] = true;
  }
  for (const auto& [name, t] : ck.tensors()) {
    if (expected.count(name)) continue;
    // A tied head written anyway (mamba_ssm does) must be the embedding's twin.
    if (name == "lm_head.weight" && model->config().tie_embeddings) {
      const ParamInfo& e = table.params()[0];
      std::vector<float> head(static_cast<size_t>(e.numel));
      SSMKIT_RETURN_IF_ERROR(ReadTensor(ck, name, e.shape, head.data()));
      continue;
    }
    return Status::InvalidArgument(ck.description() + ": unexpected tensor " + name);
  }
  return Status::Ok();
}

Status SaveOptimizer(const ParamTable& table, AdamW& optimizer, const std::string& path) {
  std::vector<SafetensorsEntry> entries;
  const int64_t step = optimizer.step();
  entries.push_back({"step", {1}, &step, DType::kI64});
  for (const ParamInfo& p : table.params()) {
    entries.push_back(
        {"exp_avg." + p.name, p.shape, optimizer.exp_avg().data() + p.offset, DType::kF32});
    entries.push_back(
        {"exp_avg_sq." + p.name, p.shape, optimizer.exp_avg_sq().data() + p.offset, DType::kF32});
  }
  return WriteSafetensors(path, entries);
}

Status LoadOptimizer(const ParamTable& table, const std::string& path, AdamW* optimizer) {
  SafetensorsCheckpoint ck;
  SSMKIT_RETURN_IF_ERROR(SafetensorsCheckpoint::OpenFile(path, &ck));
  const SafetensorsTensor* step = ck.Find("step");
  if (step == nullptr || step->dtype_name != "I64" || step->numel() != 1) {
    return Status::InvalidArgument(path + ": expected the I64 tensor \"step\" of one value");
  }
  int64_t value = 0;
  std::memcpy(&value, step->data, sizeof value);
  for (const ParamInfo& p : table.params()) {
    SSMKIT_RETURN_IF_ERROR(
        ReadTensor(ck, "exp_avg." + p.name, p.shape, optimizer->exp_avg().data() + p.offset));
    SSMKIT_RETURN_IF_ERROR(
        ReadTensor(ck, "exp_avg_sq." + p.name, p.shape, optimizer->exp_avg_sq().data() + p.offset));
  }
  optimizer->set_step(value);
  return Status::Ok();
}

}  // namespace ssmkit::train

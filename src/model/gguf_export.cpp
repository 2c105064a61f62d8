#include "model/gguf_export.hpp"

#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/dtype.hpp"
#include "core/gguf.hpp"
#include "core/gguf_writer.hpp"
#include "core/mapped_file.hpp"
#include "core/quant.hpp"
#include "model/checkpoint_source.hpp"
#include "model/gguf_model.hpp"
#include "model/gguf_names.hpp"
#include "ssmkit/quant.hpp"

namespace ssmkit::model {
namespace {

using Json = nlohmann::json;

// llama.cpp's llama_ftype of a file whose matrices are all `type` (general.file_type).
uint32_t FileType(DType type) {
  switch (type) {
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_K:
      return 14;  // Q4_K_S: every matrix q4_K
    case DType::kQ5_K:
      return 16;  // Q5_K_S
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
    default:
      return 0;  // ALL_F32
  }
}

// `values` (f32, `shape`) encoded as `dtype`.
Status Encode(const std::vector<float>& values, const std::vector<int64_t>& shape, DType dtype,
              std::string* bytes) {
  const int64_t cols = shape.back(), rows = static_cast<int64_t>(values.size()) / cols;
  bytes->assign(static_cast<size_t>(rows * DTypeRowBytes(dtype, cols)), '\0');
  if (DTypeIsQuantized(dtype)) {
    return QuantizeWeight(Tensor::Contiguous(values.data(), DType::kF32, {rows, cols}),
                          Tensor::Contiguous(bytes->data(), dtype, {rows, cols}));
  }
  for (size_t i = 0; i < values.size(); ++i)
    StoreFromF32(bytes->data(), dtype, static_cast<int64_t>(i), values[i]);
  return Status::Ok();
}

// A tensor of the source as f32 values.
std::vector<float> Values(const WeightTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  quant::DequantizeRow(t.dtype, t.data, t.numel(), v.data());  // every float and block type
  return v;
}

void AddModelKeys(const ModelConfig& c, const std::string& name, DType type, GgufWriter* w) {
  const std::string a = c.arch == ModelArch::kMamba2 ? "mamba2" : "mamba";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w->AddString("general.architecture", a);
  w->AddString("general.type", "model");
  w->AddString("general.name", name);
  w->AddU32("general.file_type", FileType(type));
  w->AddU32("general.quantization_version", 2);
  w->AddU32(a + ".context_length", 1u << 20);  // the converter's: a recurrent model has no limit
  w->AddU32(a + ".embedding_length", u32(c.d_model));
  w->AddU32(a + ".feed_forward_length", 0);
  w->AddU32(a + ".attention.head_count", 0);
  w->AddU32(a + ".block_count", u32(c.n_layer));
  w->AddU32(a + ".ssm.conv_kernel", u32(c.d_conv));
  w->AddU32(a + ".ssm.inner_size", u32(c.d_inner));
  w->AddU32(a + ".ssm.state_size", u32(c.d_state));
  w->AddU32(a + ".ssm.time_step_rank", u32(c.arch == ModelArch::kMamba2 ? c.nheads : c.dt_rank));
  if (c.arch == ModelArch::kMamba2) w->AddU32(a + ".ssm.group_count", u32(c.ngroups));
  w->AddF32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  if (c.arch == ModelArch::kMamba1) w->AddBool(a + ".ssm.dt_b_c_rms", false);
}

// tokenizer.json (a byte-level BPE) as tokenizer.ggml.* keys, the way llama.cpp's converter
// writes them: every id below the model's vocab rows ("[PADi]", unused, where the tokenizer has
// none), added tokens as control (special) or user-defined, the merges as "a b".
Status AddTokenizerFromJson(const std::string& path, const ModelConfig& c, GgufWriter* w) {
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    return Status::Unsupported(path + ": " + what +
                               ": cannot be written as a llama.cpp GGUF "
                               "tokenizer (docs/gguf.md)");
  };
  if (root.is_discarded() || !root.is_object()) return bad("not a JSON object");
  const Json& model = root.value("model", Json());
  if (!model.is_object() || model.value("type", "") != "BPE" ||
      !model.value("vocab", Json()).is_object()) {
    return bad("not a BPE model with a vocab");
  }
  const Json& pre = root.value("pre_tokenizer", Json());
  const bool gpt2 = pre.is_object() && pre.value("type", "") == "ByteLevel" &&
                    !pre.value("add_prefix_space", false) && pre.value("use_regex", true);
  if (!gpt2) return bad("a pre-tokenizer other than GPT-2's ByteLevel");
  const int64_t rows = c.vocab_size;
  std::vector<std::string> tokens(static_cast<size_t>(rows));
  std::vector<int32_t> types(static_cast<size_t>(rows), 5);  // unused
  std::vector<bool> seen(static_cast<size_t>(rows), false);
  auto put = [&](const std::string& token, int64_t id, int32_t type) -> Status {
    if (id < 0 || id >= rows) {
      return bad("token '" + token + "' has id " + std::to_string(id) + " outside the model's " +
                 std::to_string(rows) + " rows");
    }
    tokens[static_cast<size_t>(id)] = token;
    types[static_cast<size_t>(id)] = type;
    seen[static_cast<size_t>(id)] = true;
    return Status::Ok();
  };
  for (const auto& [token, id] : model.at("vocab").items()) {
    if (!id.is_number_integer()) return bad("vocab id of '" + token + "'");
    SSMKIT_RETURN_IF_ERROR(put(token, id.get<int64_t>(), 1));
  }
  for (const Json& a : root.value("added_tokens", Json::array())) {
    if (!a.is_object() || !a.value("id", Json()).is_number_integer() ||
        !a.value("content", Json()).is_string()) {
      return bad("an added token without an integer id and a content");
    }
    SSMKIT_RETURN_IF_ERROR(put(a.at("content").get<std::string>(), a.at("id").get<int64_t>(),
                               a.value("special", false) ? 3 : 4));
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (!seen[static_cast<size_t>(i)])
      tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
  }
  std::vector<std::string> merges;
  for (const Json& m : model.value("merges", Json::array())) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return bad("a merge that is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  w->AddString("tokenizer.ggml.model", "gpt2");
  w->AddString("tokenizer.ggml.pre", "gpt-2");
  w->AddStrings("tokenizer.ggml.tokens", tokens);
  w->AddI32s("tokenizer.ggml.token_type", types);
  w->AddStrings("tokenizer.ggml.merges", merges);
  return Status::Ok();
}

Status AddTokenizer(const std::string& input, const ModelConfig& c, GgufWriter* w) {
  if (IsGgufFile(input)) {  // its tokenizer keys, as they are
    GgufFile f;
    SSMKIT_RETURN_IF_ERROR(GgufFile::Open(input, &f));
    for (const auto& [key, value] : f.metadata()) {
      if (key.compare(0, 10, "tokenizer.") == 0) w->AddValue(key, value);
    }
    return Status::Ok();
  }
  const std::filesystem::path json = std::filesystem::path(input) / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::exists(json, ec))
    SSMKIT_RETURN_IF_ERROR(AddTokenizerFromJson(json, c, w));
  else
    w->AddString("tokenizer.ggml.model", "no_vocab");  // a byte-level model
  auto id = [&](const char* key, int64_t v) {
    if (v >= 0) w->AddU32(std::string("tokenizer.ggml.") + key, static_cast<uint32_t>(v));
  };
  id("bos_token_id", c.bos_token_id);
  id("eos_token_id", c.eos_token_id);
  id("padding_token_id", c.pad_token_id);
  return Status::Ok();
}

// One tensor of the source under its GGUF name, layout and type.
Status AddTensor(const ModelConfig& c, const std::string& gguf_name, const WeightTensor& t,
                 DType type, GgufWriter* w, QuantizeReport* report) {
  std::vector<float> values = Values(t);
  std::vector<int64_t> shape = t.shape;
  const bool mamba2 = c.arch == ModelArch::kMamba2;
  const std::string rest = gguf_name.compare(0, 4, "blk.") == 0
                               ? gguf_name.substr(gguf_name.find('.', 4) + 1)
                               : gguf_name;
  if (rest == "ssm_a") {
    for (float& v : values) v = -std::exp(v);  // A_log -> A, as the converter stores it
  }
  if (rest == "ssm_conv1d.weight") shape = {shape[0], shape.back()};
  if (mamba2 && (rest == "ssm_a" || rest == "ssm_d")) {
    if (static_cast<int64_t>(values.size()) != c.nheads) {
      return Status::Unsupported(t.file + ": tensor '" + t.name + "' " + t.shape_string() +
                                 ": llama.cpp's mamba2 takes one value per head");
    }
    shape = {c.nheads, 1};
  }
  if (mamba2 && rest == "ssm_norm.weight") shape = {c.ngroups, c.d_inner / c.ngroups};
  const bool matrix = IsGgufMatrixName(gguf_name) && shape.size() == 2;
  const DType dtype = matrix ? quant::MatrixTypeFor(type, shape.back()) : DType::kF32;
  if (matrix) (dtype == type ? report->quantized : report->fallback) += 1;
  std::string bytes;
  SSMKIT_RETURN_IF_ERROR(Encode(values, shape, dtype, &bytes));
  report->bytes_in += t.numel() / t.shape.back() * DTypeRowBytes(t.dtype, t.shape.back());
  w->AddTensor(gguf_name, GgmlTypeId(dtype), shape, std::move(bytes));
  report->tensors += 1;
  return Status::Ok();
}

}  // namespace

Status QuantizeToGguf(const std::string& input, DType type, const std::string& output,
                      QuantizeReport* report) {
  if (type == DType::kI32 || type == DType::kI64) {
    return Status::InvalidArgument(
        std::string("quantize: type ") + DTypeName(type) +
        ", expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k");
  }
  ModelConfig c;
  std::unique_ptr<WeightSource> source;
  SSMKIT_RETURN_IF_ERROR(OpenCheckpoint(input, &c, &source));
  if (!c.is_pure_mamba() || !c.blocks.empty() || c.dt_bc_norms || c.d_per_channel) {
    return Status::Unsupported(input + ": " + c.hf_architecture() +
                               ": quantize writes plain Mamba-1 and Mamba-2 models (llama.cpp's "
                               "mamba and mamba2 architectures)");
  }
  GgufWriter w;
  AddModelKeys(c, std::filesystem::path(input).filename().string(), type, &w);
  SSMKIT_RETURN_IF_ERROR(AddTokenizer(input, c, &w));
  *report = {};
  for (const auto& [name, t] : source->tensors()) {
    if (name == "lm_head.weight" && c.tie_embeddings) continue;  // the embedding, as llama.cpp
    std::string gguf_name = HfToGgufName(name, c.arch);
    if (gguf_name.empty()) {
      return Status::Unsupported(t.file + ": tensor '" + name + "' has no GGUF name");
    }
    SSMKIT_RETURN_IF_ERROR(AddTensor(c, gguf_name, t, type, &w, report));
  }
  SSMKIT_RETURN_IF_ERROR(w.Write(output));
  std::error_code ec;
  report->bytes_out = static_cast<int64_t>(std::filesystem::file_size(output, ec));
  return Status::Ok();
}

}  // namespace ssmkit::model

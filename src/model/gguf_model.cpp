#include "model/gguf_model.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/dtype.hpp"
#include "core/gguf.hpp"
#include "model/gguf_names.hpp"

namespace ssmkit::model {
namespace {

class GgufWeightSource final : public WeightSource {
 public:
  Status Init(GgufFile file, const ModelConfig& config);

  const std::map<std::string, WeightTensor>& tensors() const override { return tensors_; }
  std::string description() const override { return file_.label(); }

 private:
  // An f32 copy this source owns (A_log, dequantized vectors).
  float* Own(int64_t n) {
    owned_.emplace_back(static_cast<size_t>(n));
    return owned_.back().data();
  }
  Status Add(const GgufTensor& t, const ModelConfig& config);

  GgufFile file_;
  std::map<std::string, WeightTensor> tensors_;
  std::vector<std::vector<float>> owned_;
};

Status GgufWeightSource::Add(const GgufTensor& t, const ModelConfig& config) {
  WeightTensor w;
  w.name = GgufToHfName(t.name, config.arch);
  w.file = file_.label() + " ('" + t.name + "')";
  w.dtype_name = GgmlTypeName(t.ggml_type);
  w.shape = t.shape;
  w.data = t.data;
  if (!t.supported) {  // the binder names it: "dtype q4_1, expected ..."
    tensors_.emplace(w.name, std::move(w));
    return Status::Ok();
  }
  w.dtype = t.dtype;
  w.float_dtype = !DTypeIsQuantized(t.dtype);
  w.quantized = DTypeIsQuantized(t.dtype);
  const int64_t n = Numel(t.shape);
  if (w.quantized && !IsGgufMatrixName(t.name)) {
    return Status::Unsupported(file_.label() + ": tensor '" + t.name + "' is " + w.dtype_name +
                               ": only matrices may be quantized");
  }
  const bool mamba2 = config.arch == ModelArch::kMamba2;
  const std::string& rest = t.name.size() > 4 ? t.name.substr(t.name.find('.', 4) + 1) : t.name;
  if (t.name.compare(0, 4, "blk.") == 0) {
    if (rest == "ssm_conv1d.weight" && t.shape.size() == 2) {
      w.shape = {t.shape[0], 1, t.shape[1]};
    } else if (mamba2 && (rest == "ssm_a" || rest == "ssm_d") && t.shape.size() == 2 &&
               t.shape[1] == 1) {
      w.shape = {t.shape[0]};
    } else if (mamba2 && rest == "ssm_norm.weight" && t.shape.size() == 2) {
      w.shape = {t.shape[0] * t.shape[1]};
    }
    if (rest == "ssm_a") {
      // A = -exp(A_log) as stored; the binder wants A_log.
      float* a_log = Own(n);
      for (int64_t i = 0; i < n; ++i) {
        const float a = LoadAsF32(w.data, w.dtype, i);
        if (!(a < 0.0f)) {
          return Status::InvalidArgument(file_.label() + ": tensor '" + t.name + "': element " +
                                         std::to_string(i) + " is " + std::to_string(a) +
                                         ", expected A = -exp(A_log) < 0");
        }
        a_log[i] = std::log(-a);
      }
      w.data = a_log;
      w.dtype = DType::kF32;
      w.dtype_name = "F32";
    }
  }
  if (!tensors_.emplace(w.name, std::move(w)).second) {
    return Status::InvalidArgument(file_.label() + ": tensor '" + t.name +
                                   "' maps to a name another tensor has");
  }
  return Status::Ok();
}

Status GgufWeightSource::Init(GgufFile file, const ModelConfig& config) {
  file_ = std::move(file);
  for (const GgufTensor& t : file_.tensors()) SSMKIT_RETURN_IF_ERROR(Add(t, config));
  return Status::Ok();
}

// The config of a "mamba" or "mamba2" file: llama.cpp's metadata keys, the sizes the tensors
// imply where the keys do not say (vocabulary, biases, a tied LM head).
Status ReadConfig(const GgufFile& f, ModelConfig* config) {
  std::string arch;
  SSMKIT_RETURN_IF_ERROR(f.GetString("general.architecture", &arch));
  if (arch != "mamba" && arch != "mamba2") {
    return Status::Unsupported(f.label() + ": general.architecture '" + arch +
                               "': this version reads 'mamba' and 'mamba2' GGUF files");
  }
  ModelConfig c;
  c.arch = arch == "mamba2" ? ModelArch::kMamba2 : ModelArch::kMamba1;
  c.family = arch;
  c.format = "gguf";  // tensors under the Hugging Face names (GgufWeightSource)
  auto integer = [&](const std::string& key, int64_t* v) {
    return f.GetInteger(arch + "." + key, v);
  };
  SSMKIT_RETURN_IF_ERROR(integer("embedding_length", &c.d_model));
  SSMKIT_RETURN_IF_ERROR(integer("block_count", &c.n_layer));
  SSMKIT_RETURN_IF_ERROR(integer("ssm.inner_size", &c.d_inner));
  SSMKIT_RETURN_IF_ERROR(integer("ssm.state_size", &c.d_state));
  SSMKIT_RETURN_IF_ERROR(integer("ssm.conv_kernel", &c.d_conv));
  int64_t rank = 0;
  SSMKIT_RETURN_IF_ERROR(integer("ssm.time_step_rank", &rank));
  double eps = 0.0;
  SSMKIT_RETURN_IF_ERROR(f.GetReal(arch + ".attention.layer_norm_rms_epsilon", &eps));
  c.norm_eps = static_cast<float>(eps);
  if (c.arch == ModelArch::kMamba1) {
    c.dt_rank = rank;
    bool dt_b_c_rms = false;
    if (f.Find(arch + ".ssm.dt_b_c_rms")) {
      SSMKIT_RETURN_IF_ERROR(f.GetBool(arch + ".ssm.dt_b_c_rms", &dt_b_c_rms));
    }
    if (dt_b_c_rms) {
      return Status::Unsupported(f.label() + ": " + arch +
                                 ".ssm.dt_b_c_rms (Falcon-Mamba's weightless norms on dt, B "
                                 "and C) is not supported yet");
    }
  } else {
    c.nheads = rank;
    SSMKIT_RETURN_IF_ERROR(integer("ssm.group_count", &c.ngroups));
    if (c.nheads < 1 || c.d_inner % c.nheads != 0) {
      return Status::InvalidArgument(f.label() + ": " + arch + ".ssm.time_step_rank (heads) " +
                                     std::to_string(c.nheads) + " must divide " + arch +
                                     ".ssm.inner_size " + std::to_string(c.d_inner));
    }
    c.headdim = c.d_inner / c.nheads;
  }
  const GgufTensor* embedding = f.FindTensor("token_embd.weight");
  if (embedding == nullptr || embedding->shape.size() != 2) {
    return Status::InvalidArgument(f.label() + ": no 2-D tensor 'token_embd.weight'");
  }
  c.vocab_size = c.config_vocab_size = embedding->shape[0];
  c.tie_embeddings = f.FindTensor("output.weight") == nullptr;
  c.conv_bias = f.FindTensor("blk.0.ssm_conv1d.bias") != nullptr;
  c.proj_bias = f.FindTensor("blk.0.ssm_in.bias") != nullptr;
  c.out_proj_bias = f.FindTensor("blk.0.ssm_out.bias") != nullptr ? 1 : 0;
  int64_t id = 0;
  if (f.GetInteger("tokenizer.ggml.bos_token_id", &id).ok()) c.bos_token_id = id;
  if (f.GetInteger("tokenizer.ggml.eos_token_id", &id).ok()) c.eos_token_id = id;
  if (f.GetInteger("tokenizer.ggml.padding_token_id", &id).ok()) c.pad_token_id = id;
  if (const Status s = c.Validate(); !s.ok()) {
    return Status(s.code(), f.label() + ": " + s.message());
  }
  *config = std::move(c);
  return Status::Ok();
}

}  // namespace

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

Status OpenGgufModel(const std::string& path, ModelConfig* config,
                     std::unique_ptr<WeightSource>* source) {
  GgufFile file;
  SSMKIT_RETURN_IF_ERROR(GgufFile::Open(path, &file));
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR(ReadConfig(file, &c));
  auto s = std::make_unique<GgufWeightSource>();
  SSMKIT_RETURN_IF_ERROR(s->Init(std::move(file), c));
  *config = std::move(c);
  *source = std::move(s);
  return Status::Ok();
}

}  // namespace ssmkit::model

#include "model/gguf_model.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/dtype.hpp"
#include "core/gguf.hpp"
#include "model/gguf_arch.hpp"
#include "model/gguf_names.hpp"

namespace ssmkit::model {
namespace {

class GgufWeightSource final : public WeightSource {
 public:
  Status Init(GgufFile file, const ModelConfig& config, const GgufArch& arch);

  const std::map<std::string, WeightTensor>& tensors() const override { return tensors_; }
  std::string description() const override { return file_.label(); }

 private:
  // Bytes this source owns (A_log, un-permuted rows), 8-byte aligned.
  void* Own(int64_t bytes) {
    owned_.emplace_back(static_cast<size_t>((bytes + 7) / 8));
    return owned_.back().data();
  }
  Status Add(const GgufTensor& t, const ModelConfig& config, const GgufArch& arch);
  Status NegExpToLog(const GgufTensor& t, WeightTensor* w);
  Status Unpermute(const GgufTensor& t, int64_t heads, WeightTensor* w);

  GgufFile file_;
  std::map<std::string, WeightTensor> tensors_;
  std::vector<std::vector<uint64_t>> owned_;
};

// ssm_a holds A = -exp(A_log); the binder wants A_log.
Status GgufWeightSource::NegExpToLog(const GgufTensor& t, WeightTensor* w) {
  const int64_t n = Numel(t.shape);
  float* a_log = static_cast<float*>(Own(n * 4));
  for (int64_t i = 0; i < n; ++i) {
    const float a = LoadAsF32(w->data, w->dtype, i);
    if (!(a < 0.0f)) {
      return Status::InvalidArgument(file_.label() + ": tensor '" + t.name + "': element " +
                                     std::to_string(i) + " is " + std::to_string(a) +
                                     ", expected A = -exp(A_log) < 0");
    }
    a_log[i] = std::log(-a);
  }
  w->data = a_log;
  w->dtype = DType::kF32;
  w->dtype_name = "F32";
  return Status::Ok();
}

// The converter interleaved each head's rows: stored row h E + 2 j + s is row h E + s E / 2 + j
// of the checkpoint (E the head dim, j < E / 2, s in {0, 1}). Rows are copied back in place
// order, whole (a quantized row is whole blocks), so any type works.
Status GgufWeightSource::Unpermute(const GgufTensor& t, int64_t heads, WeightTensor* w) {
  const int64_t rows = t.shape[0];
  if (heads < 1 || rows % (2 * heads) != 0 || t.shape.size() > 2) {
    return Status::InvalidArgument(file_.label() + ": tensor '" + t.name + "' " +
                                   ShapeString(t.shape) + ": expected " + std::to_string(heads) +
                                   " heads of an even number of rows each");
  }
  const int64_t E = rows / heads, half = E / 2;
  const int64_t row_bytes = t.nbytes / rows;
  const auto* src = static_cast<const uint8_t*>(w->data);
  auto* dst = static_cast<uint8_t*>(Own(t.nbytes));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t s = 0; s < 2; ++s) {
        std::memcpy(dst + (h * E + s * half + j) * row_bytes, src + (h * E + 2 * j + s) * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
    }
  }
  w->data = dst;
  return Status::Ok();
}

Status GgufWeightSource::Add(const GgufTensor& t, const ModelConfig& config, const GgufArch& arch) {
  std::string rest;
  const int64_t layer = SplitGgufLayer(t.name, &rest);
  const GgufTensorName mapped = arch.map(rest, layer, config);
  WeightTensor w;
  w.name = mapped.hf.empty() ? t.name : mapped.hf;  // unknown: the binder names it
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
  if (w.quantized && !IsGgufMatrixName(t.name)) {
    return Status::Unsupported(file_.label() + ": tensor '" + t.name + "' is " + w.dtype_name +
                               ": only matrices may be quantized");
  }
  const bool mamba2 = config.arch == ModelArch::kMamba2;
  if (layer >= 0) {
    if (rest == "ssm_conv1d.weight" && t.shape.size() == 2) {
      w.shape = {t.shape[0], 1, t.shape[1]};
    } else if (mamba2 && (rest == "ssm_a" || rest == "ssm_d") && t.shape.size() == 2 &&
               t.shape[1] == 1) {
      w.shape = {t.shape[0]};
    } else if (mamba2 && rest == "ssm_norm.weight" && t.shape.size() == 2) {
      w.shape = {t.shape[0] * t.shape[1]};
    }
    if (rest == "ssm_a") SSMKIT_RETURN_IF_ERROR(NegExpToLog(t, &w));
    if (mapped.unpermute_heads != 0) {
      SSMKIT_RETURN_IF_ERROR(Unpermute(t, mapped.unpermute_heads, &w));
    }
  }
  if (!tensors_.emplace(w.name, std::move(w)).second) {
    return Status::InvalidArgument(file_.label() + ": tensor '" + t.name +
                                   "' maps to a name another tensor has");
  }
  return Status::Ok();
}

Status GgufWeightSource::Init(GgufFile file, const ModelConfig& config, const GgufArch& arch) {
  file_ = std::move(file);
  for (const GgufTensor& t : file_.tensors()) SSMKIT_RETURN_IF_ERROR(Add(t, config, arch));
  return Status::Ok();
}

// The architecture's reader, and the checks every config gets.
Status ReadConfig(const GgufFile& f, const GgufArch** arch, ModelConfig* config) {
  std::string name;
  SSMKIT_RETURN_IF_ERROR(f.GetString("general.architecture", &name));
  *arch = FindGgufArch(name);
  if (*arch == nullptr) {
    return Status::Unsupported(f.label() + ": general.architecture '" + name +
                               "': this version reads " + GgufArchList() + " GGUF files");
  }
  ModelConfig c;
  SSMKIT_RETURN_IF_ERROR((*arch)->read_config(f, &c));
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
  const GgufArch* arch = nullptr;
  SSMKIT_RETURN_IF_ERROR(ReadConfig(file, &arch, &c));
  auto s = std::make_unique<GgufWeightSource>();
  SSMKIT_RETURN_IF_ERROR(s->Init(std::move(file), c, *arch));
  *config = std::move(c);
  *source = std::move(s);
  return Status::Ok();
}

}  // namespace ssmkit::model

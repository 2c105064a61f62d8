// `ssmkit quantize` (model/gguf_export.hpp): the checkpoint's family picks its exporter
// (model/gguf_export_arch.hpp), which writes the metadata and spells each tensor as the GGUF
// reader of its architecture knows it; this file names the tensors by inverting that reader's
// name map, lays them out as llama.cpp's converter does (per-expert tensors stacked, Q / K rows
// interleaved for rope, A as -exp(A_log), the conv weight squeezed, Mamba-2's A, D and norm
// reshaped), picks each one's type as llama-quantize does (model/gguf_tensor_types.hpp), and
// writes the file.
#include "model/gguf_export.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "core/gguf.hpp"
#include "core/gguf_writer.hpp"
#include "core/mapped_file.hpp"
#include "core/quant.hpp"
#include "model/checkpoint_source.hpp"
#include "model/gguf_arch.hpp"
#include "model/gguf_export_arch.hpp"
#include "model/gguf_model.hpp"
#include "model/gguf_names.hpp"
#include "model/gguf_tensor_types.hpp"
#include "ssmkit/quant.hpp"

namespace ssmkit::model {
namespace {

using SizeList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

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

// A tensor of the source as f32 values, under its name.
ExportTensor Values(const std::string& name, const WeightTensor& t) {
  ExportTensor out{name, t.shape, std::vector<float>(static_cast<size_t>(t.numel()))};
  quant::DequantizeRow(t.dtype, t.data, t.numel(), out.values.data());  // every float and block
  return out;
}

// The converter's row order for llama.cpp's rope, the inverse of the reader's
// (model/gguf_model.cpp): stored row h E + 2 j + s is row h E + s E / 2 + j of the checkpoint.
Status PermuteRows(int64_t heads, const WeightTensor& source, ExportTensor* t) {
  const int64_t rows = t->shape[0];
  if (rows % (2 * heads) != 0) {
    return Status::InvalidArgument(source.file + ": tensor '" + source.name + "' " +
                                   source.shape_string() + ": expected " + std::to_string(heads) +
                                   " heads of an even number of rows each");
  }
  const int64_t cols = static_cast<int64_t>(t->values.size()) / rows, E = rows / heads;
  std::vector<float> out(t->values.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < E / 2; ++j) {
      for (int64_t s = 0; s < 2; ++s) {
        const float* src = t->values.data() + (h * E + s * (E / 2) + j) * cols;
        std::copy(src, src + cols, out.begin() + (h * E + 2 * j + s) * cols);
      }
    }
  }
  t->values = std::move(out);
  return Status::Ok();
}

// The Mamba mixer's tensors as llama.cpp's converters store them (`rest`: the name after
// "blk.N.").
Status MambaLayout(const std::string& rest, const ModelConfig& c, const WeightTensor& source,
                   ExportTensor* t) {
  const bool mamba2 = c.arch == ModelArch::kMamba2;
  if (rest == "ssm_a") {
    for (float& v : t->values) v = -std::exp(v);  // A_log -> A
  }
  if (rest == "ssm_conv1d.weight") t->shape = {t->shape[0], t->shape.back()};
  if (mamba2 && (rest == "ssm_a" || rest == "ssm_d")) {
    if (static_cast<int64_t>(t->values.size()) != c.nheads) {
      return Status::Unsupported(source.file + ": tensor '" + source.name + "' " +
                                 source.shape_string() +
                                 ": llama.cpp's Mamba-2 layers take one value per head");
    }
    t->shape = {c.nheads, 1};
  }
  if (mamba2 && rest == "ssm_norm.weight") t->shape = {c.ngroups, c.d_inner / c.ngroups};
  return Status::Ok();
}

// One tensor, its layout done, in the type chosen for it (ChooseTensorTypes): a matrix in it
// when its rows are whole blocks of it, else in llama-quantize's fallback; f32 for the rest.
Status AddTensor(const ExportTensor& t, DType chosen, GgufWriter* w, QuantizeReport* report,
                 SizeList* sizes) {
  const bool matrix = IsGgufMatrixName(t.name) && t.shape.size() >= 2;
  const DType dtype = matrix ? quant::MatrixTypeFor(chosen, t.shape.back()) : DType::kF32;
  if (matrix) {
    (dtype == chosen ? report->quantized : report->fallback) += 1;
    report->matrix_types[dtype] += 1;
  }
  std::string bytes;
  SSMKIT_RETURN_IF_ERROR(Encode(t.values, t.shape, dtype, &bytes));
  w->AddTensor(t.name, GgmlTypeId(dtype), t.shape, std::move(bytes));
  sizes->emplace_back(t.name, t.shape);
  report->tensors += 1;
  return Status::Ok();
}

// A GGUF input's metadata as it is, but for the keys about its own encoding.
Status CopyGgufKeys(const std::string& input, QuantizeType type, GgufWriter* w) {
  GgufFile f;
  SSMKIT_RETURN_IF_ERROR(GgufFile::Open(input, &f));
  for (const auto& [key, value] : f.metadata()) {
    const bool own = key == "general.file_type" || key == "general.quantization_version" ||
                     key == "general.alignment" || key.compare(0, 9, "quantize.") == 0 ||
                     key.compare(0, 6, "split.") == 0;
    if (!own) w->AddValue(key, value);
  }
  w->AddU32("general.file_type", GgufFileType(type));
  return Status::Ok();
}

// A checkpoint directory's metadata: the exporter's keys and the tokenizer.
Status AddDirectoryKeys(const std::string& input, const ModelConfig& c, const GgufExporter& e,
                        QuantizeType type, GgufWriter* w) {
  const std::string path = (std::filesystem::path(input) / "config.json").string();
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(path, &text));
  const Json json = Json::parse(QuoteNonFiniteTokens(text), nullptr, false);
  if (json.is_discarded() || !json.is_object())
    return Status::InvalidArgument(path + ": not a JSON object");
  const Reader r(json, path);
  const std::filesystem::path dir = std::filesystem::path(input).lexically_normal();
  const std::string name = (dir.has_filename() ? dir : dir.parent_path()).filename().string();
  e.add_keys({c, r, name, type}, w);
  return AddTokenizerKeys(input, c, e.sentencepiece, w);
}

// The source tensor `t` (`name`) as the tensors of the file it becomes: respelled, an expert's
// held in `stacks` until its stack is complete, named as the reader of the architecture names
// them, laid out as the converter writes them.
Status FileTensors(const std::string& name, const WeightTensor& t, const ModelConfig& c,
                   const GgufExporter& e, const GgufArch& arch, ExpertStacks* stacks,
                   std::vector<ExportTensor>* out) {
  out->clear();
  std::vector<ExportTensor> respelled;
  if (e.respell != nullptr) {
    e.respell(Values(name, t), c, &respelled);
  } else {
    respelled.push_back(Values(name, t));
  }
  for (ExportTensor& piece : respelled) SSMKIT_RETURN_IF_ERROR(stacks->Add(std::move(piece), out));
  for (ExportTensor& piece : *out) {
    const GgufNameFor g = FindGgufName(arch, piece.name, c);
    if (g.gguf.empty()) {
      return Status::Unsupported(t.file + ": tensor '" + piece.name + "' has no " + e.arch +
                                 " GGUF name");
    }
    piece.name = g.gguf;
    if (g.permute_heads > 0) SSMKIT_RETURN_IF_ERROR(PermuteRows(g.permute_heads, t, &piece));
    std::string rest;
    SplitGgufLayer(g.gguf, &rest);
    if (e.fold != nullptr) e.fold(rest, c, &piece);
    SSMKIT_RETURN_IF_ERROR(MambaLayout(rest, c, t, &piece));
  }
  return Status::Ok();
}

// The source's tensors, but the LM head tied to the embedding (llama.cpp's files omit it).
std::vector<std::pair<std::string, const WeightTensor*>> SourceTensors(const WeightSource& source,
                                                                       const ModelConfig& c) {
  std::vector<std::pair<std::string, const WeightTensor*>> out;
  for (const auto& [name, t] : source.tensors()) {
    if (!(name == "lm_head.weight" && c.tie_embeddings)) out.emplace_back(name, &t);
  }
  return out;
}

// The type chosen for each tensor of the file, in the order written. A mix's choice counts
// tensors over the whole file (which attn_v this one is), so the file's tensors are named
// first, in a pass of their own over the source; a plain type needs no such pass.
Status ChooseTypes(const std::string& input, const WeightSource& source, const ModelConfig& c,
                   const GgufExporter& e, const GgufArch& arch, QuantizeType type,
                   const GgufWriter& w, std::vector<DType>* types) {
  types->clear();
  if (type.mix == QuantMix::kNone) return Status::Ok();
  SizeList tensors;
  std::vector<ExportTensor> pieces;
  ExpertStacks stacks(c.ffn.num_experts, input);
  for (const auto& [name, t] : SourceTensors(source, c)) {
    SSMKIT_RETURN_IF_ERROR(FileTensors(name, *t, c, e, arch, &stacks, &pieces));
    for (const ExportTensor& piece : pieces) tensors.emplace_back(piece.name, piece.shape);
  }
  SSMKIT_RETURN_IF_ERROR(stacks.CheckComplete());
  // What llama.cpp reads of the file's metadata: the block count and the number of experts.
  int64_t n_layer = 0, n_expert = 0;
  const std::string prefix = std::string(e.arch) + ".";
  if (!w.FindInteger(prefix + "block_count", &n_layer)) n_layer = c.n_layer;
  w.FindInteger(prefix + "expert_count", &n_expert);
  *types = ChooseTensorTypes(type, tensors, n_layer, n_expert);
  return Status::Ok();
}

}  // namespace

Status QuantizeToGguf(const std::string& input, QuantizeType type, const std::string& output,
                      QuantizeReport* report) {
  if (type.matrices == DType::kI32 || type.matrices == DType::kI64) {
    return Status::InvalidArgument(std::string("quantize: type ") + DTypeName(type.matrices) +
                                   ", expected " + kQuantizeTypes);
  }
  ModelConfig c;
  std::unique_ptr<WeightSource> source;
  SSMKIT_RETURN_IF_ERROR(OpenCheckpoint(input, &c, &source));
  const GgufExporter* e = FindGgufExporter(c);
  if (e == nullptr) {
    return Status::Unsupported(input + ": " + c.hf_architecture() + ": quantize writes " +
                               GgufExporterList() +
                               " only: the llama.cpp architectures this version reads that "
                               "llama.cpp's converter writes");
  }
  SSMKIT_RETURN_IF_ERROR(e->check(c, input));
  const GgufArch& arch = *FindGgufArch(e->arch);
  const bool gguf_input = IsGgufFile(input);
  GgufWriter w;
  if (gguf_input) {
    SSMKIT_RETURN_IF_ERROR(CopyGgufKeys(input, type, &w));
  } else {
    SSMKIT_RETURN_IF_ERROR(AddDirectoryKeys(input, c, *e, type, &w));
  }
  std::vector<DType> chosen;
  SSMKIT_RETURN_IF_ERROR(ChooseTypes(input, *source, c, *e, arch, type, w, &chosen));
  *report = {};
  SizeList sizes;
  std::vector<ExportTensor> pieces;
  ExpertStacks stacks(c.ffn.num_experts, input);
  for (const auto& [name, t] : SourceTensors(*source, c)) {
    report->bytes_in += t->numel() / t->shape.back() * DTypeRowBytes(t->dtype, t->shape.back());
    SSMKIT_RETURN_IF_ERROR(FileTensors(name, *t, c, *e, arch, &stacks, &pieces));
    for (const ExportTensor& piece : pieces) {
      const DType want = type.mix == QuantMix::kNone ? type.matrices : chosen[sizes.size()];
      SSMKIT_RETURN_IF_ERROR(AddTensor(piece, want, &w, report, &sizes));
    }
  }
  SSMKIT_RETURN_IF_ERROR(stacks.CheckComplete());
  if (!gguf_input) w.AddString("general.size_label", GgufSizeLabel(sizes));
  w.AddU32("general.quantization_version", 2);
  SSMKIT_RETURN_IF_ERROR(w.Write(output));
  std::error_code ec;
  report->bytes_out = static_cast<int64_t>(std::filesystem::file_size(output, ec));
  return Status::Ok();
}

}  // namespace ssmkit::model

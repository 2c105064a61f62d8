// What `ssmkit quantize` (model/gguf_export.cpp) needs per GGUF architecture, the writer's side
// of model/gguf_arch.hpp: whether it can write a model, the metadata llama.cpp's converter
// writes for a checkpoint directory, and how a checkpoint's tensors become the ones the
// architecture's reader knows (fused tensors split, other spellings renamed, multipliers folded
// in), whose GGUF names are then found by inverting the reader's name map (FindGgufName). One
// file per architecture, model/gguf_export_<arch>.cpp; the helpers they share below
// (model/gguf_export_common.cpp), the tokenizer in model/gguf_export_tokenizer.cpp.
//
// The metadata follows the converter (convert_hf_to_gguf.py and its conversion/<family>.py)
// key for key. Where the converter's value would give llama.cpp (and this library's reader) a
// model other than the checkpoint's, the model's own value is written instead; each file says
// where (docs/gguf.md, "Writing").
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/gguf_writer.hpp"
#include "model/config_reader.hpp"
#include "model/gguf_tensor_types.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

// A checkpoint directory's model: its config as the engine reads it, and its config.json as
// the converter reads it (keys the engine has no use for, spelled as the file spells them).
struct ExportInput {
  const ModelConfig& config;
  const Reader& json;
  std::string name;   // general.name
  QuantizeType type;  // the requested type (general.file_type)
};

// A tensor on its way into the file: its name (the reader's Hugging Face name, then the GGUF
// name), shape outermost first, values as f32.
struct ExportTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct GgufExporter {
  const char* arch;  // general.architecture; its reader is FindGgufArch(arch)
  // Ok, or why this model cannot be written as `arch` (a feature the file cannot state).
  Status (*check)(const ModelConfig& c, const std::string& input);
  // The general.* and {arch}.* keys of a checkpoint directory (the tokenizer is added after).
  void (*add_keys)(const ExportInput& in, GgufWriter* w);
  // The checkpoint's tensor `t` as the tensors the reader knows (names the reader maps): fused
  // tensors split, other spellings renamed. nullptr: every tensor as it is.
  void (*respell)(ExportTensor t, const ModelConfig& c, std::vector<ExportTensor>* out);
  // Multipliers the converter folds into the tensor `gguf_rest` (its name after "blk.N.").
  // nullptr: none.
  void (*fold)(const std::string& gguf_rest, const ModelConfig& c, ExportTensor* t);
  // The converter writes the tokenizer.json as a SentencePiece ("llama") vocabulary, not a
  // byte-level BPE ("gpt2").
  bool sentencepiece = false;
};

// The exporter of the model's family, or nullptr when none writes it.
const GgufExporter* FindGgufExporter(const ModelConfig& c);
// "MambaForCausalLM (mamba), ..." for messages.
std::string GgufExporterList();

// The architectures (model/gguf_export_*.cpp).
extern const GgufExporter kMambaExporter, kMamba2Exporter, kGraniteHybridExporter,
    kFalconH1Exporter, kNemotronHExporter, kNemotronHMoeExporter, kJambaExporter;

// tokenizer.ggml.* of a checkpoint directory (model/gguf_export_tokenizer.cpp): its
// tokenizer.json as llama.cpp's converter writes a byte-level BPE, or a SentencePiece vocabulary
// when `sentencepiece`, one token per row of the model's vocabulary; "no_vocab" without a
// tokenizer.json; the special token ids of the config.
Status AddTokenizerKeys(const std::string& dir, const ModelConfig& c, bool sentencepiece,
                        GgufWriter* w);

// Helpers the exporters share (model/gguf_export_common.cpp).

// Whether some block of the model is an MoE one.
bool HasMoeBlocks(const ModelConfig& c);
// general.architecture, type, name, file_type (the converter's first keys).
void AddGeneralKeys(const ExportInput& in, const char* arch, GgufWriter* w);
// Ok when the feed-forward activation is silu, the only one llama.cpp's `arch` runs; else
// Unsupported, naming the checkpoint's hidden_act.
Status CheckSiluActivation(const ModelConfig& c, const std::string& input, const char* arch);
// "{arch}.ssm.*": a Mamba-2 mixer's sizes as llama.cpp names them (time_step_rank: the heads).
void AddMamba2Keys(const ModelConfig& c, const std::string& arch, GgufWriter* w);
// attention.head_count_kv as the hybrids' converters write it: one entry per layer, the
// key-value heads on attention layers and 0 on the others.
void AddPerLayerKvHeads(const ModelConfig& c, const std::string& arch, GgufWriter* w);
// The rope theta config.json states (rope_parameters.rope_theta or rope_theta, as the
// converter reads them); false when it states none.
bool ConfigRopeTheta(const Reader& json, float* theta);
// A float key of config.json, or `fallback` when absent.
float ConfigFloat(const Reader& json, const char* key, float fallback);
// general.size_label as the converter derives it from the tensors written: "42K", "4x69K".
std::string GgufSizeLabel(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors);
// A fused (2F, ...) gate/up tensor of the reader's spelling split along its second-to-last
// axis into `first` and `second` (F rows each), appended to `out`.
void SplitHalves(const ExportTensor& t, const std::string& first, const std::string& second,
                 std::vector<ExportTensor>* out);
// Every element of `t` times `s`, in f32 as the converter's torch code multiplies.
void Scale(ExportTensor* t, float s);

// The converter's stacking of per-expert tensors: "<p>experts.<e>.<w>.weight" (E of them, in
// any order) become one "<p>experts.<w>" (E, rows, cols), the reader's stacked name.
class ExpertStacks {
 public:
  ExpertStacks(int64_t experts, std::string input) : experts_(experts), input_(std::move(input)) {}
  // A tensor that is not one expert's is appended to `out` as it is; an expert's is kept, and
  // the stack it completes appended.
  Status Add(ExportTensor t, std::vector<ExportTensor>* out);
  // Ok, or the first stack still missing experts, named.
  Status CheckComplete() const;

 private:
  struct Stack {
    std::vector<int64_t> shape;              // one expert's
    std::vector<std::vector<float>> values;  // per expert; empty: not seen yet
    int64_t seen = 0;
  };
  int64_t experts_;
  std::string input_;                    // for messages
  std::map<std::string, Stack> stacks_;  // by the stacked name
};

}  // namespace ssmkit::model

// What the GGUF loader (model/gguf_model.cpp) needs to know per `general.architecture`: how its
// metadata becomes a ModelConfig, which Hugging Face name each tensor stands for, and which of
// the converter's changes to undo. One file per architecture (model/gguf_arch_<arch>.cpp), as
// the Hugging Face families have theirs (model/family_*.cpp); the helpers they share below
// (model/gguf_arch_common.cpp).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/gguf.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit::model {

// A tensor's Hugging Face name and the row permutation llama.cpp's converter applied to it.
struct GgufTensorName {
  std::string hf;  // empty: a name the architecture does not know (the binder reports it)
  // attn_q / attn_k of the converters derived from Llama's: each head's rows were interleaved
  // ([0, E/2) with [E/2, E)) for llama.cpp's rope; the rows are put back (heads: the count).
  int64_t unpermute_heads = 0;
};

struct GgufArch {
  const char* name;  // general.architecture
  Status (*read_config)(const GgufFile& f, ModelConfig* c);
  // `rest` is the name after "blk.N." (layer >= 0) or the whole name (layer -1).
  GgufTensorName (*map)(const std::string& rest, int64_t layer, const ModelConfig& c);
};

// nullptr for an architecture this version does not read.
const GgufArch* FindGgufArch(const std::string& arch);
// "'mamba', 'mamba2', 'granitehybrid', ...", for messages.
std::string GgufArchList();

// The inverse of a.map, for the writer (`ssmkit quantize`): the GGUF name of the tensor the
// reader calls `hf` ("blk.N.<rest>", or a name outside the layers), found among the names
// GGUF files use (model/gguf_names.hpp), and the rows the converter interleaved in it
// (GgufTensorName::unpermute_heads); an empty name when no GGUF tensor maps to `hf`.
struct GgufNameFor {
  std::string gguf;
  int64_t permute_heads = 0;
};
GgufNameFor FindGgufName(const GgufArch& a, const std::string& hf, const ModelConfig& c);

// The architectures (model/gguf_arch_*.cpp).
Status ReadMambaGgufConfig(const GgufFile& f, ModelConfig* c);
GgufTensorName MapMambaGguf(const std::string& rest, int64_t layer, const ModelConfig& c);
Status ReadGraniteHybridGgufConfig(const GgufFile& f, ModelConfig* c);
GgufTensorName MapGraniteHybridGguf(const std::string& rest, int64_t layer, const ModelConfig& c);
Status ReadFalconH1GgufConfig(const GgufFile& f, ModelConfig* c);
GgufTensorName MapFalconH1Gguf(const std::string& rest, int64_t layer, const ModelConfig& c);
Status ReadNemotronHGgufConfig(const GgufFile& f, ModelConfig* c);
Status ReadNemotronHMoeGgufConfig(const GgufFile& f, ModelConfig* c);
// Both nemotron_h architectures' names (model/gguf_arch_nemotron_h.cpp).
GgufTensorName MapNemotronHGguf(const std::string& rest, int64_t layer, const ModelConfig& c);
Status ReadJambaGgufConfig(const GgufFile& f, ModelConfig* c);
GgufTensorName MapJambaGguf(const std::string& rest, int64_t layer, const ModelConfig& c);

// Helpers the architectures share (model/gguf_arch_common.cpp).

// Typed access to the "<arch>.<key>" metadata with errors naming the file and the key.
class GgufKeys {
 public:
  GgufKeys(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  const GgufFile& file() const { return f_; }
  const std::string& arch() const { return arch_; }
  std::string Key(const std::string& key) const { return arch_ + "." + key; }
  bool Has(const std::string& key) const { return f_.Find(Key(key)) != nullptr; }

  Status Int(const std::string& key, int64_t* v) const;  // required
  // Optional: `v` is left as it is when the key is absent.
  Status OptInt(const std::string& key, int64_t* v) const;
  Status OptFloat(const std::string& key, float* v) const;
  Status OptDouble(const std::string& key, double* v) const;
  Status OptBool(const std::string& key, bool* v) const;
  // A per-layer integer: an array of one entry per layer, or one value for every layer.
  Status PerLayer(const std::string& key, int64_t n_layer, std::vector<int64_t>* v) const;
  // The non-zero entries of a per-layer list read from `key`, which must agree ("the same
  // <what>"); 0 when there are none.
  Status NonZero(const std::string& key, const std::vector<int64_t>& per_layer,
                 const std::string& what, int64_t* v) const;
  // "<file>: metadata key '<arch>.<key>' is <given>, expected <expected>".
  Status Wrong(const std::string& key, const std::string& expected, const std::string& given) const;

 private:
  const GgufFile& f_;
  std::string arch_;
};

// d_model, n_layer, the RMSNorm epsilon, and what the tensors and the tokenizer keys say: the
// vocabulary (token_embd's rows), a tied LM head (no output.weight), the special tokens.
Status ReadGgufCommon(const GgufKeys& k, ModelConfig* c);
// A Mamba-2 mixer's sizes: ssm.inner_size (D), state_size (N), conv_kernel (K),
// time_step_rank (heads H), group_count (G); the conv and projection biases from the tensors
// of the first Mamba layer.
Status ReadGgufMamba2(const GgufKeys& k, ModelConfig* c);
// A Mamba-1 mixer's sizes: ssm.inner_size (D), state_size (N), conv_kernel (K),
// time_step_rank (R); the biases as for Mamba-2.
Status ReadGgufMamba1(const GgufKeys& k, ModelConfig* c);
// Attention: head_count, head_count_kv (`kv_heads`: the per-layer list's non-zero entries,
// which must agree), key_length (default d / heads), rope.freq_base, rope.dimension_count when
// `rope`; biases from the tensors of the first attention layer.
Status ReadGgufAttention(const GgufKeys& k, const std::vector<int64_t>& kv_heads, bool rope,
                         ModelConfig* c);
// "blk.N.<rest>" -> N (at most 9 digits) and rest; any other name -> -1 and the whole name.
int64_t SplitGgufLayer(const std::string& name, std::string* rest);
// True when some "blk.N.<rest>" tensor exists.
bool AnyLayerTensor(const GgufFile& f, const std::string& rest);
// has[i]: "blk.i.<rest>" exists, for i < n_layer (what says a layer's kind where the metadata
// does not: Jamba's MoE layers, nemotron_h_moe's MLP layers).
std::vector<bool> LayersWithTensor(const GgufFile& f, int64_t n_layer, const std::string& rest);

// The per-layer names every architecture shares: the mixer's ssm_* tensors (Mamba-1 or Mamba-2
// as c.arch says, model/gguf_names.cpp) under `mixer` ("model.layers.N.mamba."), attention's
// attn_q/k/v/output under `attention` ("...self_attn."), with Q and K un-permuted when
// `unpermute`. Empty hf when `rest` is neither.
GgufTensorName MapGgufMixer(const std::string& rest, const std::string& mixer,
                            const std::string& attention, bool unpermute, const ModelConfig& c);
// One tensor's name in GGUF and in Hugging Face checkpoints (after a prefix each).
struct GgufNamePair {
  const char* gguf;
  const char* hf;
};
// The hf of the pair whose gguf is `name`, or nullptr.
const char* LookupGgufName(std::span<const GgufNamePair> pairs, const std::string& name);
// "model.layers.<layer>."
std::string HfLayerPrefix(int64_t layer);
// The tensors outside the layers: token_embd.weight and output_norm.weight as the family's
// `embedding` and `final_norm`, output.weight as lm_head.weight; empty hf for any other name.
GgufTensorName MapGgufOutsideLayers(const std::string& name, const char* embedding,
                                    const char* final_norm);

}  // namespace ssmkit::model

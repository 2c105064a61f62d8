// Which type each tensor of a file `ssmkit quantize` writes gets: one type for every matrix, or
// one of llama-quantize's K-quant mixes (Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S), which keep most
// matrices in a default type and give some more bits by their kind and place in the model.
//
// The mixes choose as llama-quantize does without an importance matrix, tensor overrides or
// --pure (llama.cpp's src/llama-quant.cpp, llama_tensor_get_type): by the tensor's GGUF name, its
// layer, and counts over the whole file, never by architecture (for the architectures this
// library writes; llama.cpp's only architecture and model-size cases are Falcon-1 and Llama
// 70B). Every choice then falls back as a plain type does when the rows are not whole blocks
// (quant::MatrixTypeFor).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

enum class QuantMix { kNone, kQ4_K_S, kQ4_K_M, kQ5_K_S, kQ5_K_M };

// What `ssmkit quantize --type` names.
struct QuantizeType {
  DType matrices = DType::kF32;  // the type of every matrix; for a mix, its default type
  QuantMix mix = QuantMix::kNone;
};

// The names QuantizeTypeFromName knows, for messages and help.
inline constexpr const char* kQuantizeTypes =
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, or a llama-quantize mix: "
    "q4_k_m, q4_k_s, q5_k_m, q5_k_s";

// "q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", or a plain type's DTypeName ("q8_0", "bf16", ...);
// false for any other name and for i32 / i64.
bool QuantizeTypeFromName(const std::string& name, QuantizeType* type);

// llama.cpp's llama_ftype of a file in `type` (general.file_type): a plain K-quant names the
// _S file type of its mix (q4_k 14 as Q4_K_S, q5_k 16 as Q5_K_S), as llama-quantize --pure does.
uint32_t GgufFileType(QuantizeType type);

// The model-wide counts llama-quantize's choice reads.
struct MixCounts {
  int64_t n_layer = 0;      // {arch}.block_count
  int64_t n_expert = 0;     // {arch}.expert_count, 0 when the file states none
  int64_t n_attn_v = 0;     // tensors of the attn_v kind (below) in the file
  bool tied_output = true;  // no output.weight: the embedding is also the LM head
};

// llama-quantize's choice, before the fallback, for the matrix `name` (a GGUF name, rows of
// `cols`) in a file of `mix` (not kNone) whose default type is `base`. `kind_index`: the
// tensor's position, counting from 0, among the file's tensors of its kind in llama-quantize's
// order (by layer, then by name): the attn_v kind (names containing attn_v.weight,
// attn_qkv.weight or attn_kv_b.weight) and the ffn_down kind (names containing ffn_down); other
// tensors ignore it. For ffn_down in a model of more than one expert the layer in the name is
// used instead, as llama-quantize does.
DType MixedMatrixType(QuantMix mix, DType base, const std::string& name, int64_t cols,
                      int64_t kind_index, const MixCounts& counts);

// The type of each of a file's tensors (name, shape outermost first; any order) before the
// fallback, in the order given: for a matrix (IsGgufMatrixName, 2 or more dims) its type in
// `type`, f32 for the rest. `n_layer`, `n_expert`: the file's {arch}.block_count and
// {arch}.expert_count.
std::vector<DType> ChooseTensorTypes(
    QuantizeType type, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
    int64_t n_layer, int64_t n_expert);

}  // namespace ssmkit::model

// `ssmkit quantize`: a checkpoint (a Hugging Face directory or a GGUF file) written as a GGUF
// file that llama.cpp loads, its matrices in one type or in one of llama-quantize's K-quant
// mixes (docs/gguf.md, "Writing"): Mamba-1 and Mamba-2 (llama.cpp's mamba, mamba2),
// GraniteMoeHybrid and Bamba (granitehybrid), Falcon-H1 (falcon-h1), Nemotron-H without and
// with MoE layers (nemotron_h, nemotron_h_moe) and Jamba (jamba), laid out as llama.cpp's
// converter writes them (model/gguf_export_arch.hpp): its metadata (a GGUF input's as it is),
// the tokenizer (a byte-level BPE, Jamba's a SentencePiece vocabulary), the tensors under GGUF's
// names and layouts (per-expert tensors stacked).
//
// Which tensors get `type`: the matrices (embedding, projections, experts, LM head), in the
// plain type, or for a K-quant mix (q4_k_m, q4_k_s, q5_k_m, q5_k_s) in the type llama-quantize
// picks for each (model/gguf_tensor_types.hpp); a matrix whose rows are not a whole number of
// its type's blocks falls back as llama-quantize's do (q4_k to q5_0, q5_k to q5_1, q6_k to q8_0
// when they are a multiple of 32), else to f16. Vectors (norms, conv, A, D, biases) and the MoE
// router stay f32, as llama.cpp keeps them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/gguf_tensor_types.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

struct QuantizeReport {
  int64_t tensors = 0;
  int64_t quantized = 0;  // matrices written in the type chosen for them
  int64_t fallback = 0;   // matrices written in its fallback (rows not whole blocks)
  std::map<DType, int64_t> matrix_types;  // matrices written in each type
  int64_t bytes_in = 0;                   // the input's tensor bytes
  int64_t bytes_out = 0;                  // the output file's size
};

// type: one of kQuantizeTypes (QuantizeTypeFromName).
Status QuantizeToGguf(const std::string& input, QuantizeType type, const std::string& output,
                      QuantizeReport* report);

}  // namespace ssmkit::model

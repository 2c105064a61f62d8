// `ssmkit quantize`: a checkpoint (a Hugging Face directory or a GGUF file) written as a GGUF
// file that llama.cpp loads, its matrices in one type (docs/gguf.md, "Writing"): Mamba-1 and
// Mamba-2 (llama.cpp's mamba, mamba2), GraniteMoeHybrid and Bamba (granitehybrid), Falcon-H1
// (falcon-h1), Nemotron-H without and with MoE layers (nemotron_h, nemotron_h_moe) and Jamba
// (jamba), laid out as llama.cpp's converter writes them (model/gguf_export_arch.hpp): its
// metadata (a GGUF input's as it is), the tokenizer (a byte-level BPE, Jamba's a SentencePiece
// vocabulary), the tensors under GGUF's names and layouts (per-expert tensors stacked).
//
// Which tensors get `type`: the matrices (embedding, projections, experts, LM head) whose rows
// are a whole number of the type's blocks; a matrix whose rows are not falls back as
// llama-quantize's do (q4_k to q5_0, q5_k to q5_1, q6_k to q8_0 when they are a multiple of 32),
// else to f16. Vectors (norms, conv, A, D, biases) and the MoE router stay f32, as llama.cpp
// keeps them.
#pragma once

#include <string>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::model {

struct QuantizeReport {
  int64_t tensors = 0;
  int64_t quantized = 0;  // matrices written as the requested type
  int64_t fallback = 0;   // matrices written as another type (rows not whole blocks)
  int64_t bytes_in = 0;   // the input's tensor bytes
  int64_t bytes_out = 0;  // the output file's size
};

// type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k.
Status QuantizeToGguf(const std::string& input, DType type, const std::string& output,
                      QuantizeReport* report);

}  // namespace ssmkit::model

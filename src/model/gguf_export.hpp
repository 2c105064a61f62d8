// `ssmkit quantize`: a Mamba-1 or Mamba-2 checkpoint (a Hugging Face directory or a GGUF file)
// written as a GGUF file that llama.cpp loads, its matrices in one type (docs/gguf.md,
// "Writing"): the metadata llama.cpp's converter writes, the tokenizer (from tokenizer.json, or
// the input GGUF's tokenizer.ggml.* keys as they are), and the tensors under GGUF's names and
// layouts (A as -exp(A_log), the conv weight squeezed, Mamba-2's A, D and norm reshaped).
//
// Which tensors get `type`: the matrices (embedding, projections, LM head) whose rows are a
// whole number of the type's blocks; a matrix whose rows are not falls back to q8_0 when they
// are a multiple of 32, else f16 (llama-quantize falls back too, to types this library does not
// read). Vectors (norms, conv, A, D, biases) stay f32, as llama.cpp keeps them.
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

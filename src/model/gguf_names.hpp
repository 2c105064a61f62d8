// Tensor names in GGUF files (llama.cpp's MODEL_TENSOR names for the MAMBA and MAMBA2
// architectures) and the Hugging Face names the engine binds, both ways: the loader
// (gguf_model.cpp) reads one, `ssmkit quantize` (gguf_export.cpp) writes the other. The
// hybrid architectures' readers (gguf_arch_*.cpp) share the mixer's names.
#pragma once

#include <string>

#include "ssmkit/model.hpp"

namespace ssmkit::model {

// "blk.3.ssm_in.weight" -> "backbone.layers.3.mixer.in_proj.weight", "token_embd.weight" ->
// "backbone.embeddings.weight", ...; a name it does not know is returned as it is.
std::string GgufToHfName(const std::string& gguf_name, ModelArch arch);
// The inverse; "" for a name with no GGUF counterpart.
std::string HfToGgufName(const std::string& hf_name, ModelArch arch);
// A Mamba-1 (`arch` kMamba1) or Mamba-2 mixer's tensor: "ssm_x.weight" (after "blk.N.") ->
// "x_proj.weight" (after the mixer's prefix); nullptr for a name that is not the mixer's.
const char* GgufMixerName(const std::string& rest, ModelArch arch);

// The tensors the engine reads as matrices (linear layers, the embedding, the experts): those
// a file may hold quantized.
bool IsGgufMatrixName(const std::string& gguf_name);

}  // namespace ssmkit::model

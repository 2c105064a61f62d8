// Tensor names in GGUF files: the per-layer names llama.cpp's converter writes for the
// architectures this version reads, which of them are matrices, and the MAMBA / MAMBA2 names
// mapped to the Hugging Face ones the engine binds (model/gguf_arch_mamba.cpp; the hybrids map
// theirs in their own model/gguf_arch_<arch>.cpp and share the mixer's names, GgufMixerName).
#pragma once

#include <span>
#include <string>

#include "ssmkit/model.hpp"

namespace ssmkit::model {

// "blk.3.ssm_in.weight" -> "backbone.layers.3.mixer.in_proj.weight", "token_embd.weight" ->
// "backbone.embeddings.weight", ...; a name it does not know is returned as it is.
std::string GgufToHfName(const std::string& gguf_name, ModelArch arch);
// A Mamba-1 (`arch` kMamba1) or Mamba-2 mixer's tensor: "ssm_x.weight" (after "blk.N.") ->
// "x_proj.weight" (after the mixer's prefix); nullptr for a name that is not the mixer's.
const char* GgufMixerName(const std::string& rest, ModelArch arch);

// Every name after "blk.N." that a file of these architectures holds, in the order the writer
// tries them when it inverts a name map (model/gguf_arch_common.cpp, FindGgufName).
std::span<const char* const> GgufLayerTensorNames();

// The tensors the engine reads as matrices (linear layers, the embedding, the experts): those
// a file may hold quantized.
bool IsGgufMatrixName(const std::string& gguf_name);

}  // namespace ssmkit::model

// A checkpoint by path, whatever its format: a Hugging Face or state-spaces directory
// (config.json + safetensors) or a GGUF file. Model::Load and `ssmkit quantize` read through it.
#pragma once

#include <memory>
#include <string>

#include "model/weight_source.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

Status OpenCheckpoint(const std::string& path, ModelConfig* config,
                      std::unique_ptr<WeightSource>* source);

}  // namespace ssmkit::model

// What a Model holds: its config, the mapped checkpoint its weight views point into, and the
// weights. Shared by lm.cpp (loading) and session.cpp (running).
#pragma once

#include <string>

#include "core/safetensors.hpp"
#include "model/weights.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit {

struct Model::Impl {
  ModelConfig config;
  SafetensorsCheckpoint checkpoint;  // empty for random weights
  model::ModelWeights weights;
  std::string source;
};

}  // namespace ssmkit

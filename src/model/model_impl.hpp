// What a Model holds: its config, the weight source its views point into, and the weights.
// Shared by lm.cpp (loading) and session.cpp (running).
#pragma once

#include <memory>
#include <string>

#include "model/weight_source.hpp"
#include "model/weights.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit {

struct Model::Impl {
  ModelConfig config;
  std::unique_ptr<model::WeightSource> source;  // null for random weights
  model::ModelWeights weights;
  std::string source_name;
};

}  // namespace ssmkit

// What a Model holds: its config, the weight source its views point into, and the weights.
// Shared by lm.cpp (loading) and session.cpp (running).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "model/device_weights.hpp"
#include "model/weight_source.hpp"
#include "model/weights.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit {

struct Model::Impl {
  ModelConfig config;
  std::unique_ptr<model::WeightSource> source;  // null for random weights
  model::ModelWeights weights;
  std::string source_name;
  // The weights on the GPU: uploaded by the model's first CUDA session, kept for the next ones
  // (model/gpu_decoder.cpp); the mutex guards the upload.
  mutable std::mutex device_mutex;
  mutable std::unique_ptr<model::DeviceWeights> device_weights;
};

}  // namespace ssmkit

#include "model/checkpoint_source.hpp"

#include <filesystem>

#include "core/mapped_file.hpp"
#include "model/config.hpp"
#include "model/gguf_model.hpp"

namespace ssmkit::model {

Status OpenCheckpoint(const std::string& path, ModelConfig* config,
                      std::unique_ptr<WeightSource>* source) {
  if (IsGgufFile(path)) return OpenGgufModel(path, config, source);
  const std::string config_path = (std::filesystem::path(path) / "config.json").string();
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(config_path, &text));
  SSMKIT_RETURN_IF_ERROR(ParseModelConfig(text, config_path, config));
  return SafetensorsWeightSource::Open(path, source);
}

}  // namespace ssmkit::model

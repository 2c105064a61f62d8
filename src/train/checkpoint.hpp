// Checkpoints in Hugging Face's format, which transformers and our engine both load:
//   DIR/config.json          MambaConfig / Mamba2Config fields (model_type "mamba" | "mamba2"),
//                            or a hybrid's GraniteMoeHybridConfig ("granitemoehybrid")
//   DIR/model.safetensors    every ParamTable tensor under its transformers name (f32 or bf16;
//                            a tied LM head is not written, as save_pretrained does)
// and, for resuming, the trainer's own files beside them:
//   DIR/optimizer.safetensors   AdamW's exp_avg.<name> and exp_avg_sq.<name> (f32), and the
//                               optimizer step as the I64 tensor "step"
//   DIR/trainer_state.json      the step, the options the run was started with, the data
//                               file's size and fingerprint
// Each file is written to FILE.tmp and renamed into place, the state file last, so an
// interrupted save leaves the previous checkpoint readable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ssmkit/model.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"
#include "train/lm.hpp"
#include "train/optimizer.hpp"

namespace ssmkit::train {

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // f32 values, or int64 when dtype is kI64
  DType dtype = DType::kF32;   // stored dtype: kF32, kBF16 (rounded from f32) or kI64
};

// Writes a safetensors file (header entries sorted by name, data in the order given, the
// header padded to 8 bytes, __metadata__ {"format": "pt"} as transformers requires).
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries);

// config.json text for `config` in transformers' format.
std::string HfConfigJson(const ModelConfig& config);

// Writes config.json and model.safetensors; dtype kF32 or kBF16.
Status SaveModel(const TrainModel& model, const std::string& dir, DType dtype);

// Reads a checkpoint directory's model.safetensors into the model's parameters (f32, bf16 or
// f16 widened to f32). Every ParamTable tensor must be present with its shape; a tied
// lm_head.weight, if present, must equal the embedding's shape; any other tensor is an error.
Status LoadModelParams(const std::string& dir, TrainModel* model);

Status SaveOptimizer(const ParamTable& table, AdamW& optimizer, const std::string& path);
Status LoadOptimizer(const ParamTable& table, const std::string& path, AdamW* optimizer);

// Writes `text` to path.tmp, then renames it to path.
Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace ssmkit::train

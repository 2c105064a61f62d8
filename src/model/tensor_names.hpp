// Which tensors a model's config calls for: their names in the checkpoint (per family, with the
// other spellings some checkpoints use), shapes, and where each bound view goes in
// ModelWeights. Consumed by BindWeights (a checkpoint) and RandomWeights.
// Dimension legend as in model/weights.hpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/weight_source.hpp"
#include "model/weights.hpp"

namespace ssmkit::model {

enum class SlotKind {
  kMatrix,  // kept as a view in the checkpoint's dtype
  kVector,  // copied to f32
  kNegExp,  // copied to f32 as -exp(v): A from A_log (the view of A_log is kept too)
};

// One expected tensor.
struct TensorSlot {
  std::vector<std::string> names;  // the accepted spellings; the first is named in messages
  std::vector<int64_t> shape;
  SlotKind kind = SlotKind::kMatrix;
  Tensor* target = nullptr;
  Tensor* raw = nullptr;  // kNegExp: receives the stored A_log view
  // A shape the model uses instead of the stored one (conv weights (C, 1, K) -> (C, K)).
  std::vector<int64_t> view_shape = {};
};

struct TensorPlan {
  std::vector<TensorSlot> slots;
  // Tensors a checkpoint may hold beside the slots and that are unused (Zamba2's tied copies of
  // its shared blocks, transformers ties them to the first): names starting with these.
  std::vector<std::string> ignored_prefixes;
  // Run once every slot is bound: views into fused tensors (gate/up halves, experts).
  std::vector<std::function<Status()>> finish;
};

// Sizes weights->blocks from config.block_list() and fills `plan` with pointers into it.
// `source` (may be null: random weights) decides between spellings where the layout differs
// (e.g. per-expert tensors or one fused 3-D tensor).
Status PlanTensors(const ModelConfig& config, const WeightSource* source, ModelWeights* weights,
                   TensorPlan* plan);

}  // namespace ssmkit::model

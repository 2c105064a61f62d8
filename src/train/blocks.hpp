// The trainer's blocks behind the one TrainBlock interface: each kind's forward / backward
// functions (mamba1_block, mamba2_block, attention_block, mlp_block) with that layer's saved
// activations, and the backward workspaces every block of a kind shares.
#pragma once

#include <memory>

#include "train/attention_block.hpp"
#include "train/block.hpp"
#include "train/mamba1_block.hpp"
#include "train/mamba2_block.hpp"
#include "train/mlp_block.hpp"

namespace ssmkit::train {

struct BlockScratch {  // one per model: blocks run one at a time
  Mamba1Scratch mamba1;
  Mamba2Scratch mamba2;
  AttentionScratch attention;
  MlpScratch mlp;
};

// A block of `kind` reading `scratch` (which must outlive it); nullptr for a kind the trainer
// has no block for (ParamTable::Build refuses such configs first).
std::unique_ptr<TrainBlock> MakeTrainBlock(BlockKind kind, BlockScratch* scratch);

}  // namespace ssmkit::train

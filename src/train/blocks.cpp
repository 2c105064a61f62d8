#include "train/blocks.hpp"

namespace ssmkit::train {
namespace {

// A block kind's two free functions and the layer's saved activations, as a TrainBlock.
template <class Saved, class Scratch,
          Status (*kForward)(const BlockArgs&, const float*, Saved*, Scratch*, float*),
          Status (*kBackward)(const BlockArgs&, const float*, const Saved&, const float*, Scratch*,
                              float*)>
class FunctionBlock final : public TrainBlock {
 public:
  explicit FunctionBlock(Scratch* scratch) : scratch_(scratch) {}
  Status Forward(const BlockArgs& args, const float* normed, float* out) override {
    return kForward(args, normed, &saved_, scratch_, out);
  }
  Status Backward(const BlockArgs& args, const float* normed, const float* dout,
                  float* dnormed) override {
    return kBackward(args, normed, saved_, dout, scratch_, dnormed);
  }

 private:
  Saved saved_;
  Scratch* scratch_;
};

}  // namespace

std::unique_ptr<TrainBlock> MakeTrainBlock(BlockKind kind, BlockScratch* s) {
  switch (kind) {
    case BlockKind::kMamba1:
      return std::make_unique<
          FunctionBlock<Mamba1Saved, Mamba1Scratch, Mamba1Forward, Mamba1Backward>>(&s->mamba1);
    case BlockKind::kMamba2:
      return std::make_unique<
          FunctionBlock<Mamba2Saved, Mamba2Scratch, Mamba2Forward, Mamba2Backward>>(&s->mamba2);
    case BlockKind::kAttention:
      return std::make_unique<FunctionBlock<AttentionSaved, AttentionScratch, AttentionBlockForward,
                                            AttentionBlockBackward>>(&s->attention);
    case BlockKind::kMlp:
      return std::make_unique<
          FunctionBlock<MlpSaved, MlpScratch, MlpBlockForward, MlpBlockBackward>>(&s->mlp);
    default:
      return nullptr;
  }
}

}  // namespace ssmkit::train

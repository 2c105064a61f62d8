#include "model/tensor_names.hpp"

#include <string>

#include "model/families.hpp"
#include "model/tensor_planner.hpp"

namespace ssmkit::model {
namespace {

// MambaForCausalLM / Mamba2ForCausalLM and the state-spaces format.
void PlanPureMamba(const ModelConfig& c, Planner* p, ModelWeights* w) {
  const int64_t d = c.d_model, V = c.vocab_size;
  const std::string root = "backbone.";
  p->Matrix({c.format == "state-spaces" ? root + "embedding.weight" : root + "embeddings.weight"},
            {V, d}, &w->embedding);
  for (Block& b : w->blocks) {
    const std::string l = root + "layers." + std::to_string(b.spec.layer) + ".";
    p->Vector({l + "norm.weight"}, {d}, &b.norm);
    if (b.spec.kind == BlockKind::kMamba1) {
      p->Mamba1(l + "mixer.", &b.mamba1);
    } else {
      p->Mamba2(l + "mixer.", &b.mamba2);
    }
  }
  p->Vector({root + "norm_f.weight"}, {d}, &w->norm_f);
}

}  // namespace

Status PlanTensors(const ModelConfig& config, const WeightSource* source, ModelWeights* weights,
                   TensorPlan* plan) {
  const std::vector<BlockSpec> specs = config.block_list();
  weights->blocks.assign(specs.size(), Block{});
  weights->ssm_caches = weights->kv_caches = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    Block& b = weights->blocks[i];
    b.spec = specs[i];
    const BlockKind k = b.spec.kind;
    if (k == BlockKind::kMamba1 || k == BlockKind::kMamba2 || k == BlockKind::kParallelHybrid)
      b.ssm_cache = weights->ssm_caches++;
    if (k == BlockKind::kAttention || k == BlockKind::kParallelHybrid ||
        k == BlockKind::kSharedTransformer)
      b.kv_cache = weights->kv_caches++;
  }
  Planner p(config, source, plan);
  if (const Family* family = FindFamily(config.family); family != nullptr) {
    family->plan(p, weights);
  } else if (config.is_pure_mamba()) {
    PlanPureMamba(config, &p, weights);
  } else {
    return Status::Unsupported("a hybrid model config with family \"" + config.family +
                               "\": expected one of " + FamilyList());
  }
  const bool lm_head_stored = p.Has("lm_head.weight");
  if (!config.tie_embeddings || lm_head_stored)
    p.Matrix({"lm_head.weight"}, {config.vocab_size, config.d_model}, &weights->lm_head);
  return Status::Ok();
}

}  // namespace ssmkit::model

// ModelConfig's derived sizes, its block list and its validation.
#include <cmath>
#include <string>
#include <vector>

#include "model/families.hpp"
#include "ssmkit/mlp.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit {

const char* ModelArchName(ModelArch arch) {
  return arch == ModelArch::kMamba2 ? "mamba2" : "mamba1";
}

const char* BlockKindName(BlockKind kind) {
  switch (kind) {
    case BlockKind::kMamba1:
      return "mamba1";
    case BlockKind::kMamba2:
      return "mamba2";
    case BlockKind::kAttention:
      return "attention";
    case BlockKind::kMlp:
      return "mlp";
    case BlockKind::kMoe:
      return "moe";
    case BlockKind::kParallelHybrid:
      return "attention+mamba2";
    case BlockKind::kSharedTransformer:
      return "shared-transformer";
  }
  return "unknown";
}

namespace {

BlockKind MixerKind(ModelArch arch) {
  return arch == ModelArch::kMamba2 ? BlockKind::kMamba2 : BlockKind::kMamba1;
}

bool HasAttention(BlockKind k) {
  return k == BlockKind::kAttention || k == BlockKind::kParallelHybrid ||
         k == BlockKind::kSharedTransformer;
}

Status ValidateAttention(const AttentionConfig& a) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("model config: attention: " + what);
  };
  if (a.num_heads < 1 || a.num_kv_heads < 1 || a.num_heads % a.num_kv_heads != 0) {
    return bad("the key/value heads " + std::to_string(a.num_kv_heads) +
               " must divide the query heads " + std::to_string(a.num_heads) + " (both >= 1)");
  }
  if (a.head_dim < 1) return bad("head_dim " + std::to_string(a.head_dim) + " must be >= 1");
  if (a.input_dim < 0) return bad("input_dim must be >= 0");
  if (a.rotary_dim < 0 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim) {
    return bad("rotary dims " + std::to_string(a.rotary_dim) + " must be even and <= head_dim " +
               std::to_string(a.head_dim));
  }
  if (!std::isfinite(a.scale) || a.scale < 0.0f) return bad("the softmax scale must be >= 0");
  if (a.rotary_dim > 0 && !(a.rope_theta > 0.0)) return bad("rope_theta must be > 0");
  if (a.window < 0) return bad("the sliding window must be >= 0");
  return Status::Ok();
}

Status ValidateFeedForward(const ModelConfig& c, bool mlp, bool moe) {
  const FeedForwardConfig& f = c.ffn;
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("model config: " + what);
  };
  MlpActivation act;
  SSMKIT_RETURN_IF_ERROR(MlpActivationFromName(f.activation, &act));
  if (mlp && f.intermediate < 1)
    return bad("MLP intermediate size " + std::to_string(f.intermediate) + " must be >= 1");
  if (!f.gated && c.multipliers.mlp_gate != 1.0f) return bad("a gate multiplier on an ungated MLP");
  if (!moe) return Status::Ok();
  if (f.num_experts < 1 || f.top_k < 1 || f.top_k > f.num_experts) {
    return bad("MoE: experts per token " + std::to_string(f.top_k) + " must be in [1, " +
               std::to_string(f.num_experts) + "] (the experts)");
  }
  if (f.moe_intermediate < 1 || f.shared_intermediate < 0)
    return bad("MoE: the experts' intermediate size must be >= 1");
  if (f.latent < 0)
    return bad("MoE: the latent size " + std::to_string(f.latent) + " must be >= 0");
  return Status::Ok();
}

// The blocks' own constraints (the Mamba sizes are checked by Validate).
Status ValidateBlocks(const ModelConfig& c) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("model config: " + what);
  };
  const std::vector<BlockSpec> blocks = c.block_list();
  bool attention = false, mlp = false, moe = false;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockKind k = blocks[i].kind;
    const bool mamba = k == BlockKind::kMamba1 || k == BlockKind::kMamba2;
    if ((mamba && k != MixerKind(c.arch)) ||
        (k == BlockKind::kParallelHybrid && c.arch != ModelArch::kMamba2)) {
      return bad("block " + std::to_string(i) + " is " + BlockKindName(k) +
                 " but the model's SSM mixers are " + ModelArchName(c.arch));
    }
    if (blocks[i].layer < 0 || blocks[i].layer >= c.n_layer) {
      return bad("block " + std::to_string(i) + " names layer " + std::to_string(blocks[i].layer) +
                 " outside [0, " + std::to_string(c.n_layer) + ")");
    }
    if (k == BlockKind::kSharedTransformer) {
      // Its output feeds the next block's normalised input: a Mamba block must follow.
      if (i + 1 == blocks.size() || blocks[i + 1].kind != MixerKind(c.arch))
        return bad("a shared transformer block must be followed by a Mamba block");
      if (c.num_shared_blocks < 1 || c.adapter_rank < 1)
        return bad("shared blocks need num_shared_blocks >= 1 and adapter_rank >= 1");
    }
    attention |= HasAttention(k);
    mlp |= k == BlockKind::kMlp || k == BlockKind::kSharedTransformer;
    moe |= k == BlockKind::kMoe;
  }
  if (attention) SSMKIT_RETURN_IF_ERROR(ValidateAttention(c.attention));
  if (mlp || moe) SSMKIT_RETURN_IF_ERROR(ValidateFeedForward(c, mlp, moe));
  const Multipliers& m = c.multipliers;
  for (float v :
       {m.embedding, m.residual, m.logits, m.attention_in, m.attention_out, m.ssm_in, m.ssm_out,
        m.key, m.mlp_gate, m.mlp_down, m.ssm_z, m.ssm_x, m.ssm_b, m.ssm_c, m.ssm_dt}) {
    if (!std::isfinite(v)) return bad("a multiplier is not finite");
  }
  if (c.gated_norm_eps < 0.0f || !std::isfinite(c.gated_norm_eps))
    return bad("the gated norm's epsilon must be >= 0");
  return Status::Ok();
}

}  // namespace

std::vector<BlockSpec> ModelConfig::block_list() const {
  if (!blocks.empty()) return blocks;
  std::vector<BlockSpec> list;
  for (int64_t i = 0; i < n_layer; ++i) list.push_back({MixerKind(arch), i});
  return list;
}

std::string ModelConfig::hf_architecture() const {
  if (const model::Family* f = model::FindFamily(family); f != nullptr) return f->architecture;
  return arch == ModelArch::kMamba2 ? "Mamba2ForCausalLM" : "MambaForCausalLM";
}

bool ModelConfig::is_pure_mamba() const {
  for (const BlockSpec& b : blocks) {
    if (b.kind != MixerKind(arch)) return false;
  }
  return true;
}

int64_t ModelConfig::conv_dim() const {
  return arch == ModelArch::kMamba2 ? d_inner + 2 * ngroups * d_state : d_inner;
}

int64_t ModelConfig::in_proj_dim() const {
  return arch == ModelArch::kMamba2 ? 2 * d_inner + 2 * ngroups * d_state + nheads : 2 * d_inner;
}

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("model config: " + what);
  };
  if (d_model < 1 || n_layer < 1 || vocab_size < 1 || d_inner < 1 || d_state < 1) {
    return bad("d_model, n_layer, vocab_size, d_inner and d_state must be >= 1 (given " +
               std::to_string(d_model) + ", " + std::to_string(n_layer) + ", " +
               std::to_string(vocab_size) + ", " + std::to_string(d_inner) + ", " +
               std::to_string(d_state) + ")");
  }
  if (config_vocab_size < 1 || config_vocab_size > vocab_size) {
    return bad("the stated vocab size " + std::to_string(config_vocab_size) + " must be in [1, " +
               std::to_string(vocab_size) + "]");
  }
  if (d_conv < 2 || d_conv > 8)
    return bad("conv width " + std::to_string(d_conv) + " outside [2, 8]");
  if (d_state > 256) return bad("state size " + std::to_string(d_state) + " above 256");
  if (!(norm_eps > 0.0f) || !std::isfinite(norm_eps)) return bad("the norm epsilon must be > 0");
  if (arch == ModelArch::kMamba1) {
    if (dt_rank < 1) return bad("dt_rank " + std::to_string(dt_rank) + " must be >= 1");
    return ValidateBlocks(*this);
  }
  if (nheads < 1 || headdim < 1 || nheads * headdim != d_inner) {
    return bad("heads H = " + std::to_string(nheads) + " times head dim P = " +
               std::to_string(headdim) + " must equal d_inner = " + std::to_string(d_inner));
  }
  if (ngroups < 1 || nheads % ngroups != 0) {
    return bad("n_groups " + std::to_string(ngroups) + " must divide the heads " +
               std::to_string(nheads));
  }
  if (chunk_size < 1) return bad("chunk_size must be >= 1");
  if (!(dt_min <= dt_max)) return bad("time_step_limit must be [min, max] with min <= max");
  return ValidateBlocks(*this);
}

}  // namespace ssmkit

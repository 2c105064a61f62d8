// The hybrid families' config.json readers, the way transformers' configuration classes read
// them: defaults, the spellings published hub files and save_pretrained use for the same
// thing, renamed keys, hard-coded values; and a clear error for each form not supported.
// (The fixtures of scripts/hybrid_fixtures.py check each family end to end against
// transformers: model_parity_test.cpp.)
#include <string>

#include "block_letters.hpp"
#include "model/config.hpp"
#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

Status Parse(const std::string& json, ModelConfig* c) {
  return model::ParseModelConfig(json, "config.json", c);
}

ModelConfig ParseOk(const std::string& json) {
  ModelConfig c;
  const Status s = Parse(json, &c);
  EXPECT_TRUE(s.ok()) << s.message();
  return c;
}

std::string Letters(const ModelConfig& c) { return BlockLetters(c.block_list()); }

const std::string kGranite = R"({"model_type": "granitemoehybrid", "hidden_size": 64,
  "num_hidden_layers": 3, "vocab_size": 100, "num_attention_heads": 4,
  "mamba_n_heads": 4, "mamba_d_state": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
  "intermediate_size": 32, "shared_intermediate_size": 48)";

TEST(HybridConfig, GraniteLayerTypesInBothSpellings) {
  const ModelConfig hub =
      ParseOk(kGranite + R"(, "layer_types": ["mamba", "attention", "mamba"]})");
  const ModelConfig saved =
      ParseOk(kGranite + R"(, "layer_types": ["linear_attention", "full_attention",
                                              "linear_attention"]})");
  EXPECT_EQ(Letters(hub), "MEAEME");
  EXPECT_EQ(hub.blocks, saved.blocks);
  EXPECT_EQ(hub.hf_architecture(), "GraniteMoeHybridForCausalLM");
  // Absent: every layer Mamba; the class defaults (kv heads = heads, nope, no multipliers).
  const ModelConfig plain = ParseOk(kGranite + "}");
  EXPECT_EQ(Letters(plain), "MEMEME");
  EXPECT_EQ(plain.attention.num_kv_heads, 4);
  EXPECT_EQ(plain.attention.rotary_dim, 0);
  EXPECT_EQ(plain.headdim, 128 / 4);  // mamba_d_head "auto": expand * hidden / heads
  EXPECT_EQ(plain.eos_token_id, 2);
  EXPECT_EQ(plain.pad_token_id, -1);  // None
  // Dense: the shared MLP is the layer's MLP.
  const ModelConfig dense = ParseOk(kGranite + R"(, "num_local_experts": 0})");
  EXPECT_EQ(Letters(dense), "MFMFMF");
  EXPECT_EQ(dense.ffn.intermediate, 48);
  const ModelConfig scaled =
      ParseOk(kGranite + R"(, "logits_scaling": 4.0, "position_embedding_type": "rope",
                             "rope_theta": 500.0, "partial_rotary_factor": 0.5})");
  EXPECT_FLOAT_EQ(scaled.multipliers.logits, 0.25f);
  EXPECT_EQ(scaled.attention.rotary_dim, 16);  // Granite ignores partial_rotary_factor
  EXPECT_DOUBLE_EQ(scaled.attention.rope_theta, 500.0);
  // The published Granite-4.0-H files write "nope" for no position embedding.
  const ModelConfig nope = ParseOk(kGranite + R"(, "position_embedding_type": "nope",
                                                  "rope_theta": 10000})");
  EXPECT_EQ(nope.attention.rotary_dim, 0);
}

TEST(HybridConfig, BambaHardCodesHalfRotary) {
  const std::string bamba = R"({"model_type": "bamba", "hidden_size": 64, "num_hidden_layers": 2,
    "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "mamba_n_heads": 4,
    "mamba_d_state": 16, "intermediate_size": 96, "attn_layer_indices": [1])";
  const ModelConfig c = ParseOk(bamba + R"(, "partial_rotary_factor": 1.0})");
  EXPECT_EQ(Letters(c), "MFAF");
  EXPECT_EQ(c.attention.rotary_dim, 8);  // 0.5 * head dim 16, whatever the top-level key says
  const ModelConfig quarter =
      ParseOk(bamba + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                              "partial_rotary_factor": 0.25}})");
  EXPECT_EQ(quarter.attention.rotary_dim, 4);
  ModelConfig bad;
  const Status s = Parse(bamba + R"(, "attn_layer_indices": [5]})", &bad);
  EXPECT_NE(s.message().find("attn_layer_indices"), std::string::npos) << s.message();
}

TEST(HybridConfig, NemotronPatternAndLayerList) {
  const std::string base = R"({"model_type": "nemotron_h", "hidden_size": 64, "vocab_size": 100,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "mamba_num_heads": 4,
    "mamba_head_dim": 32, "ssm_state_size": 16, "mamba_n_groups": 2, "intermediate_size": 96)";
  const ModelConfig pattern = ParseOk(base + R"(, "hybrid_override_pattern": "M-*M"})");
  const ModelConfig list =
      ParseOk(base + R"(, "layers_block_type": ["linear_attention", "mlp", "full_attention",
                                                 "mamba"]})");
  EXPECT_EQ(Letters(pattern), "MFAM");
  EXPECT_EQ(pattern.blocks, list.blocks);
  EXPECT_EQ(pattern.n_layer, 4);
  EXPECT_EQ(pattern.ngroups, 2);            // mamba_n_groups, the older name of n_groups
  EXPECT_EQ(pattern.d_inner, 128);          // mamba_num_heads * mamba_head_dim
  EXPECT_FLOAT_EQ(pattern.dt_min, 0.001f);  // time_step_min, the mixer's lower limit
  EXPECT_EQ(pattern.ffn.activation, "relu2");
  EXPECT_FALSE(pattern.ffn.gated);
  ModelConfig bad;
  Status s = Parse(base + R"(, "hybrid_override_pattern": "MX"})", &bad);
  EXPECT_NE(s.message().find("hybrid_override_pattern"), std::string::npos) << s.message();
}

// "E" / "moe" layers (Nemotron 3) and NemotronHConfig's MoE keys, defaults included.
TEST(HybridConfig, NemotronMoe) {
  const std::string base = R"({"model_type": "nemotron_h", "hidden_size": 64, "vocab_size": 100,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "mamba_num_heads": 4,
    "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2, "intermediate_size": 96)";
  const ModelConfig defaults = ParseOk(base + R"(, "hybrid_override_pattern": "ME*-"})");
  EXPECT_EQ(Letters(defaults), "MEAF");
  EXPECT_EQ(defaults.ffn.num_experts, 8);
  EXPECT_EQ(defaults.ffn.top_k, 2);
  EXPECT_EQ(defaults.ffn.moe_intermediate, 7688);
  EXPECT_EQ(defaults.ffn.shared_intermediate, 7688);
  EXPECT_TRUE(defaults.ffn.sigmoid_groups);
  EXPECT_TRUE(defaults.ffn.normalize_top_k);
  EXPECT_EQ(defaults.ffn.groups, 1);
  EXPECT_EQ(defaults.ffn.top_k_groups, 1);
  EXPECT_FLOAT_EQ(defaults.ffn.routed_scaling, 1.0f);
  // The class's default list when neither key is given: linear_attention, moe,
  // full_attention, mlp.
  EXPECT_EQ(Letters(ParseOk(base + "}")), "MEAF");
  const ModelConfig c = ParseOk(base + R"(, "layers_block_type": ["moe", "mamba", "moe"],
    "num_local_experts": 16, "num_experts_per_tok": 6, "moe_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 48, "n_group": 4, "topk_group": 2,
    "norm_topk_prob": false, "routed_scaling_factor": 2.5, "moe_latent_size": null})");
  EXPECT_EQ(Letters(c), "EME");
  EXPECT_EQ(c.ffn.num_experts, 16);  // num_local_experts: attribute_map's n_routed_experts
  EXPECT_EQ(c.ffn.top_k, 6);
  EXPECT_EQ(c.ffn.moe_intermediate, 32);
  EXPECT_EQ(c.ffn.shared_intermediate, 48);
  EXPECT_EQ(c.ffn.groups, 4);
  EXPECT_EQ(c.ffn.top_k_groups, 2);
  EXPECT_FALSE(c.ffn.normalize_top_k);
  EXPECT_FLOAT_EQ(c.ffn.routed_scaling, 2.5f);
  EXPECT_EQ(c.ffn.latent, 0);  // null: no latent projections
  const ModelConfig latent =
      ParseOk(base + R"(, "hybrid_override_pattern": "ME", "moe_latent_size": 16})");
  EXPECT_EQ(latent.ffn.latent, 16);
  ModelConfig bad;
  Status s = Parse(base + R"(, "hybrid_override_pattern": "ME", "moe_latent_size": 0})", &bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"moe_latent_size\": expected null or a width >= 1"),
            std::string::npos)
      << s.message();
  s = Parse(base + R"(, "hybrid_override_pattern": "ME", "n_group": 3})", &bad);
  EXPECT_NE(s.message().find("n_group"), std::string::npos) << s.message();
  s = Parse(base + R"(, "hybrid_override_pattern": "ME", "n_group": 4, "topk_group": 1,
    "num_experts_per_tok": 3})",
            &bad);
  EXPECT_NE(s.message().find("num_experts_per_tok"), std::string::npos) << s.message();
}

TEST(HybridConfig, FalconH1DssmAndMultipliers) {
  const std::string base = R"({"model_type": "falcon_h1", "hidden_size": 64,
    "num_hidden_layers": 1, "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2,
    "mamba_n_heads": 4,
    "mamba_d_state": 16, "intermediate_size": 96)";
  EXPECT_EQ(ParseOk(base + "}").d_inner, 1024);  // the class default when the key is absent
  const ModelConfig c = ParseOk(base + R"(, "mamba_d_ssm": null, "ssm_multipliers":
                                          [1, 2, 3, 4, 5], "mlp_multipliers": [0.5, 0.25]})");
  EXPECT_EQ(c.d_inner, 128);  // null: mamba_expand * hidden_size
  EXPECT_EQ(Letters(c), "PF");
  EXPECT_FLOAT_EQ(c.multipliers.ssm_dt, 5.0f);
  EXPECT_FLOAT_EQ(c.multipliers.mlp_down, 0.25f);
  EXPECT_FALSE(c.gated_norm);  // mamba_rms_norm defaults to false
  ModelConfig bad;
  const Status s = Parse(base + R"(, "ssm_multipliers": [1, 2]})", &bad);
  EXPECT_NE(s.message().find("a list of 5 numbers"), std::string::npos) << s.message();
}

TEST(HybridConfig, JambaPeriodsAndZamba2Defaults) {
  const ModelConfig j = ParseOk(R"({"model_type": "jamba", "hidden_size": 64,
    "num_hidden_layers": 8, "vocab_size": 100, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_experts": 4})");
  EXPECT_EQ(Letters(j), "mFmEmFmEAFmEmFmE");  // attention at layer 4 (of 8), experts at odd layers
  EXPECT_EQ(j.dt_rank, 4);                    // "auto": ceil(64 / 16)
  EXPECT_TRUE(j.dt_bc_norms);
  // Architectures alone name the family.
  const ModelConfig z = ParseOk(R"({"architectures": ["Zamba2ForCausalLM"], "hidden_size": 64,
    "vocab_size": 100, "num_attention_heads": 4, "n_mamba_heads": 4, "mamba_d_state": 16})");
  EXPECT_EQ(z.family, "zamba2");
  EXPECT_EQ(z.n_layer, 54);  // the class's default layer list
  int shared = 0;
  for (const BlockSpec& b : z.block_list()) shared += b.kind == BlockKind::kSharedTransformer;
  EXPECT_EQ(shared, 9);
  EXPECT_EQ(z.attention.head_dim, 32);  // 2 hidden / heads
  EXPECT_EQ(z.attention.input_dim, 128);
  EXPECT_EQ(z.ffn.activation, "gelu");
}

TEST(HybridConfig, UnsupportedFormsAreErrors) {
  ModelConfig c;
  Status s = Parse(kGranite + R"(, "position_embedding_type": "rope",
                                  "rope_parameters": {"rope_type": "yarn", "factor": 4}})",
                   &c);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("rope type \"yarn\""), std::string::npos) << s.message();
  s = Parse(kGranite + R"(, "position_embedding_type": "alibi"})", &c);
  EXPECT_NE(s.message().find("position_embedding_type"), std::string::npos) << s.message();
  s = Parse(kGranite + R"(, "layer_types": ["mamba", "cross_attention", "mamba"]})", &c);
  EXPECT_NE(s.message().find("\"layer_types\""), std::string::npos) << s.message();
  s = Parse(kGranite + R"(, "layer_types": ["mamba"]})", &c);
  EXPECT_NE(s.message().find("num_hidden_layers = 3"), std::string::npos) << s.message();
  s = Parse(kGranite + R"(, "hidden_act": "swiglu_oai"})", &c);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("hidden_act"), std::string::npos) << s.message();
  s = Parse(kGranite + R"(, "num_key_value_heads": 3, "layer_types": ["attention", "mamba",
                                                                        "mamba"]})",
            &c);
  EXPECT_NE(s.message().find("must divide the query heads"), std::string::npos) << s.message();
  s = Parse(R"({"model_type": "llama"})", &c);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("GraniteMoeHybridForCausalLM"), std::string::npos) << s.message();
}

// An expansion factor whose product with the model width has no int64 value (infinite, huge:
// the model_config fuzzer's 6.7e115, or an integer product past int64) is an error naming the
// key, in each reader that multiplies one; the same configs with a factor of 2 load.
TEST(HybridConfig, ExpansionPastInt64IsAnError) {
  struct Case {
    std::string before, after, key;
    std::string huge;  // a factor whose product with the width is past int64
  };
  const Case cases[] = {
      {R"({"d_model": 32, "n_layer": 2, "vocab_size": 304, "ssm_cfg": {"layer": "Mamba2",
         "d_state": 16, "headdim": 8, "ngroups": 2, "expand": )",
       "}}", "\"ssm_cfg.expand\"", "6.7e115"},
      {R"({"model_type": "jamba", "hidden_size": 64, "num_hidden_layers": 8, "vocab_size": 100,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4, "mamba_expand": )",
       "}", "\"mamba_expand\"", "4611686018427387904"},
      {R"({"model_type": "bamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
         "num_attention_heads": 4, "num_key_value_heads": 2, "mamba_n_heads": 4,
         "mamba_d_state": 16, "intermediate_size": 96, "attn_layer_indices": [1],
         "mamba_expand": )",
       "}", "\"mamba_expand\"", "4611686018427387904"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    ParseOk(c.before + "2" + c.after);
    for (const std::string& factor : {c.huge, std::string("-2")}) {
      ModelConfig bad;
      const Status s = Parse(c.before + factor + c.after, &bad);
      ASSERT_FALSE(s.ok()) << factor;
      EXPECT_NE(s.message().find(c.key + " times the model width"), std::string::npos)
          << s.message();
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

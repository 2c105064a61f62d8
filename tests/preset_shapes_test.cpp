// The benchmark presets of the hybrid checkpoints (PresetConfig, src/model/preset_config.cpp):
// read by the family readers from the published config.json keys, they must give the models
// those files describe: the layer list, the mixer and attention sizes, and the parameter count
// of the published checkpoint (counted here from the tensor plan, without allocating weights;
// the expected counts are summed by hand in the comments, from the config's sizes).
#include <string>
#include <vector>

#include "block_letters.hpp"
#include "model/tensor_names.hpp"
#include "model/weights.hpp"
#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

ModelConfig Preset(const std::string& name) {
  ModelConfig c;
  const Status s = PresetConfig(name, &c);
  EXPECT_TRUE(s.ok()) << s.message();
  return c;
}

// Every parameter once (a tied LM head counted once), from the tensor plan.
int64_t PlannedParameters(const ModelConfig& c) {
  model::ModelWeights w;
  model::TensorPlan plan;
  const Status s = model::PlanTensors(c, nullptr, &w, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  int64_t n = 0;
  for (const model::TensorSlot& slot : plan.slots) n += model::Numel(slot.shape);
  return n;
}

std::string Letters(const ModelConfig& c) { return BlockLetters(c.block_list()); }

// A Granite-4.0-H layer list: Mamba-2 + MLP, attention + MLP at `attention_layers`.
std::string GraniteLetters(int n_layer, const std::vector<int>& attention_layers) {
  std::string s;
  for (int l = 0; l < n_layer; ++l) {
    bool attention = false;
    for (int a : attention_layers) attention |= a == l;
    s += attention ? "AF" : "MF";
  }
  return s;
}

TEST(PresetShapes, Granite350m) {
  const ModelConfig c = Preset("granite-4.0-h-350m");
  EXPECT_EQ(Letters(c), GraniteLetters(32, {10, 13, 17, 27}));
  EXPECT_EQ(c.d_model, 768);
  EXPECT_EQ(c.d_inner, 1536);
  EXPECT_EQ(c.nheads, 48);
  EXPECT_EQ(c.headdim, 32);
  EXPECT_EQ(c.d_state, 128);
  EXPECT_EQ(c.attention.num_heads, 12);
  EXPECT_EQ(c.attention.num_kv_heads, 4);
  EXPECT_EQ(c.attention.head_dim, 64);
  EXPECT_EQ(c.attention.rotary_dim, 0);  // "nope"
  EXPECT_EQ(c.ffn.intermediate, 2048);
  EXPECT_TRUE(c.tie_embeddings);
  // Embedding 100352 x 768 = 77,070,336 (tied); per Mamba layer in_proj 768 x 3376, conv
  // 1792 x 4 + 1792, A / D / dt_bias 3 x 48, gated norm 1536, out_proj 1536 x 768 (3,776,544);
  // per attention layer 768 x (768 + 256 + 256) + 768 x 768 (1,572,864); per MLP 3 x 768 x
  // 2048; two norms per layer and the final one: 77,070,336 + 28 x 3,776,544 + 4 x 1,572,864
  // + 32 x 4,718,592 + 65 x 768.
  EXPECT_EQ(PlannedParameters(c), 340332224);
}

TEST(PresetShapes, Granite1b) {
  const ModelConfig c = Preset("granite-4.0-h-1b");
  EXPECT_EQ(Letters(c), GraniteLetters(40, {5, 15, 25, 35}));
  EXPECT_EQ(c.d_model, 1536);
  EXPECT_EQ(c.d_inner, 3072);
  EXPECT_EQ(c.nheads, 48);
  EXPECT_EQ(c.headdim, 64);
  EXPECT_EQ(c.attention.head_dim, 128);
  EXPECT_EQ(c.attention.num_kv_heads, 4);
  EXPECT_EQ(c.ffn.intermediate, 4096);
  // 100352 x 1536 + 36 Mamba layers (in_proj 1536 x 6448, conv 3328 x 5, 3 x 48, 3072, out_proj
  // 3072 x 1536) + 4 attention layers (2 x 1536^2 + 2 x 1536 x 512) + 40 MLPs (3 x 1536 x
  // 4096) + 81 norms of 1536.
  EXPECT_EQ(PlannedParameters(c), 1461538368);
}

TEST(PresetShapes, FalconH1_0_5b) {
  const ModelConfig c = Preset("falcon-h1-0.5b");
  std::string parallel;
  for (int l = 0; l < 36; ++l) parallel += "PF";
  EXPECT_EQ(Letters(c), parallel);
  EXPECT_EQ(c.d_inner, 1536);  // mamba_d_ssm, not expand * hidden
  EXPECT_EQ(c.nheads, 24);
  EXPECT_EQ(c.attention.num_heads, 8);
  EXPECT_EQ(c.attention.num_kv_heads, 2);
  EXPECT_EQ(c.attention.head_dim, 64);
  EXPECT_GT(c.attention.rotary_dim, 0);
  EXPECT_FALSE(c.tie_embeddings);
  // Embedding and LM head 2 x 32784 x 1024; per layer in_proj 1024 x 3352, conv 1792 x 5,
  // 3 x 24 (no gated norm: mamba_rms_norm false), out_proj 1536 x 1024, attention 1024 x (512 +
  // 128 + 128) + 512 x 1024, MLP 3 x 1024 x 2048, two norms; the final norm: 521,411,104, the
  // published 0.5B model's count.
  EXPECT_EQ(PlannedParameters(c), 521411104);
}

// The 2.8B pure Mamba shapes (issue 19 item 6): 64 layers of d_model 2560, the counts of
// state-spaces/mamba-2.8b and mamba2-2.7b.
TEST(PresetShapes, Mamba1_2_8b) {
  const ModelConfig c = Preset("m1-2.8b");
  EXPECT_EQ(c.arch, ModelArch::kMamba1);
  EXPECT_EQ(c.n_layer, 64);
  EXPECT_EQ(c.d_inner, 5120);
  EXPECT_EQ(c.dt_rank, 160);
  // Embedding 50280 x 2560 (tied); per layer in_proj 2560 x 10240, conv 5120 x 5, x_proj
  // (160 + 2 x 16) x 5120, dt_proj 5120 x 161, A_log 5120 x 16, D 5120, out_proj 5120 x 2560
  // and the norm 2560 (41,244,160); the final norm: 128,716,800 + 64 x 41,244,160 + 2560.
  EXPECT_EQ(PlannedParameters(c), 2768345600);
}

TEST(PresetShapes, Mamba2_2_7b) {
  const ModelConfig c = Preset("m2-2.7b");
  EXPECT_EQ(c.arch, ModelArch::kMamba2);
  EXPECT_EQ(c.n_layer, 64);
  EXPECT_EQ(c.nheads, 80);
  EXPECT_EQ(c.headdim, 64);
  // Embedding 50288 x 2560 (tied); per layer in_proj 2560 x (2 x 5120 + 2 x 128 + 80), conv
  // 5376 x 5, A / D / dt_bias 3 x 80, gated norm 5120, out_proj 5120 x 2560 and the norm 2560
  // (40,216,560); the final norm: 128,737,280 + 64 x 40,216,560 + 2560.
  EXPECT_EQ(PlannedParameters(c), 2702599680);
}

TEST(PresetShapes, UnknownNameListsTheKnownOnes) {
  ModelConfig c;
  const Status s = PresetConfig("granite-4.0-h-tiny", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("granite-4.0-h-350m"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ssmkit::testing

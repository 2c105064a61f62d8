// The trainer's bad inputs: each is a clear error naming what is wrong, and nothing is
// written (the parameters and gradients are unchanged after a refused call).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ssmkit/train.hpp"
#include "test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/init.hpp"
#include "train/lm.hpp"
#include "train/param_table.hpp"

namespace ssmkit::testing {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<train::TrainModel> TinyModel(ModelArch arch) {
  ModelConfig c;
  EXPECT_TRUE(TrainSizeConfig(arch, "tiny", &c).ok());
  std::unique_ptr<train::TrainModel> m;
  EXPECT_TRUE(train::TrainModel::Create(c, &m).ok());
  train::InitParams(c, m->table(), 3, m->params().data());
  return m;
}

void ExpectRefused(const Status& st, const std::string& needle) {
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(TrainErrors, TokensAndShapes) {
  auto m = TinyModel(ModelArch::kMamba2);
  const std::vector<float> params(m->params().begin(), m->params().end());
  m->ZeroGrads();
  std::vector<int32_t> tokens(2 * 9, 65);
  double loss = 0.0;
  tokens[5] = 256;
  ExpectRefused(m->ForwardBackward(tokens, 2, 8, 1.0f, &loss), "tokens[5]");
  tokens[5] = -1;
  ExpectRefused(m->ForwardBackward(tokens, 2, 8, 1.0f, &loss), "[0, 256)");
  tokens[5] = 65;
  ExpectRefused(m->ForwardBackward(tokens, 2, 9, 1.0f, &loss), "expected 2 x 10 ids");
  ExpectRefused(m->ForwardBackward(tokens, 0, 8, 1.0f, &loss), "batch and seqlen");
  ExpectRefused(m->Loss(tokens, 3, 8, &loss), "expected 3 x 9 ids");
  std::vector<float> logits;
  ExpectRefused(m->Logits(tokens, 2, 8, &logits), "expected 2 x 8 ids");
  EXPECT_EQ(std::vector<float>(m->params().begin(), m->params().end()), params);
  for (float g : m->grads()) ASSERT_EQ(g, 0.0f);
}

TEST(TrainErrors, UnsupportedConfigsAreNamed) {
  ModelConfig c;
  ASSERT_TRUE(TrainSizeConfig(ModelArch::kMamba2, "tiny", &c).ok());
  train::ParamTable t;
  ModelConfig bias = c;
  bias.proj_bias = true;
  ExpectRefused(train::ParamTable::Build(bias, &t), "proj_bias");
  ModelConfig groups = c;
  groups.ngroups = 2;
  ExpectRefused(train::ParamTable::Build(groups, &t), "ngroups");
  ModelConfig padded = c;
  padded.vocab_size = 264;
  ExpectRefused(train::ParamTable::Build(padded, &t), "vocab_size");
  ModelConfig no_conv_bias = c;
  no_conv_bias.conv_bias = false;
  ExpectRefused(train::ParamTable::Build(no_conv_bias, &t), "conv_bias");

  // The hybrid: GraniteMoeHybrid without experts, attention without biases or windows.
  ModelConfig h;
  ASSERT_TRUE(TrainHybridSizeConfig("tiny", 2, &h).ok());
  ASSERT_TRUE(train::ParamTable::Build(h, &t).ok());
  ModelConfig moe = h;
  moe.ffn.num_experts = 4;
  ExpectRefused(train::ParamTable::Build(moe, &t), "num_local_experts");
  ModelConfig window = h;
  window.attention.window = 8;
  ExpectRefused(train::ParamTable::Build(window, &t), "sliding window");
  ModelConfig biased = h;
  biased.attention.qkv_bias = true;
  ExpectRefused(train::ParamTable::Build(biased, &t), "attention_bias");
  ModelConfig falcon = h;
  falcon.multipliers.key = 0.5f;
  ExpectRefused(train::ParamTable::Build(falcon, &t), "multipliers");
  ModelConfig bamba = h;
  bamba.family = "bamba";
  ExpectRefused(train::ParamTable::Build(bamba, &t), "granitemoehybrid");
  ASSERT_TRUE(TrainSizeConfig(ModelArch::kMamba2, "tiny", &c).ok());
  ModelConfig nemotron = c;
  nemotron.family = "nemotron_h";
  ExpectRefused(train::ParamTable::Build(nemotron, &t), "model_type");
  ModelConfig no_attention;
  ExpectRefused(TrainHybridSizeConfig("tiny", 3, &no_attention), "--attention-every");
}

// Checkpoints that do not fit the model: a missing tensor, a wrong shape, an extra tensor.
TEST(TrainErrors, CheckpointMismatchesAreNamed) {
  const fs::path dir =
      fs::temp_directory_path() / ("ssmkit_train_errors_" + std::to_string(FreshSeed()));
  auto m = TinyModel(ModelArch::kMamba1);
  const train::ParamTable& table = m->table();
  auto write = [&](const std::vector<train::SafetensorsEntry>& entries) {
    fs::create_directories(dir);
    ASSERT_TRUE(train::WriteSafetensors((dir / "model.safetensors").string(), entries).ok());
  };
  std::vector<train::SafetensorsEntry> all;
  for (const train::ParamInfo& p : table.params())
    all.push_back({p.name, p.shape, m->params().data() + p.offset});

  std::vector<train::SafetensorsEntry> missing(all.begin() + 1, all.end());
  write(missing);
  ExpectRefused(train::LoadModelParams(dir.string(), m.get()), "missing tensor " + all[0].name);

  std::vector<train::SafetensorsEntry> reshaped = all;
  reshaped[1].shape = {reshaped[1].shape[0] / 2, 2};
  write(reshaped);
  ExpectRefused(train::LoadModelParams(dir.string(), m.get()), all[1].name + ": expected shape");

  std::vector<train::SafetensorsEntry> extra = all;
  const float one = 1.0f;
  extra.push_back({"backbone.layers.9.mixer.D", {1}, &one});
  write(extra);
  ExpectRefused(train::LoadModelParams(dir.string(), m.get()),
                "unexpected tensor backbone.layers.9.mixer.D");
  fs::remove_all(dir);
}

// A state file that does not belong to the run, or is not one at all.
TEST(TrainErrors, ResumeFromABrokenStateIsRefused) {
  const fs::path dir =
      fs::temp_directory_path() / ("ssmkit_train_resume_" + std::to_string(FreshSeed()));
  fs::create_directories(dir / "out");
  {
    std::ofstream data(dir / "data.txt");
    for (int i = 0; i < 400; ++i)
      data << "In the beginning God created the heaven and the earth.\n";
  }
  TrainOptions o;
  o.data = (dir / "data.txt").string();
  o.out = (dir / "out").string();
  o.steps = 2;
  o.batch = 2;
  o.seqlen = 16;
  o.eval_windows = 2;
  o.resume = true;
  std::ofstream(dir / "out" / "trainer_state.json") << "{not json";
  TrainResult r;
  ExpectRefused(Train(o, {}, nullptr, &r), "not a trainer state");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ssmkit::testing

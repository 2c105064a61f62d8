// The training loop end to end on a small generated text: the same seed gives the same loss
// curve bit for bit; a run interrupted and resumed from its checkpoint gives the curve of an
// uninterrupted one; the checkpoint loads in the inference engine (ssmkit::Model::Load) with
// the trainer's own logits; bad options are refused with a clear message. For Mamba-1,
// Mamba-2 and the hybrid (GraniteMoeHybrid: Mamba-2 and attention layers, SwiGLU MLPs).
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/threads.hpp"
#include "ssmkit/train.hpp"
#include "test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/lm.hpp"

namespace ssmkit::testing {
namespace {

namespace fs = std::filesystem;

// A scratch directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("ssmkit_" + name + "_" + std::to_string(FreshSeed()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& leaf) const { return (path_ / leaf).string(); }

 private:
  fs::path path_;
};

// Sentences made from a small word list by a seeded generator: enough structure to learn.
std::string MakeText(uint64_t seed, int64_t bytes) {
  const char* words[] = {"the",  "state", "space", "model", "reads", "one",   "byte", "at",    "a",
                         "time", "and",   "keeps", "what",  "it",    "needs", "in",   "memory"};
  Rng rng(seed);
  std::string text;
  while (static_cast<int64_t>(text.size()) < bytes) {
    const int n = 3 + static_cast<int>(rng.Uniform(0, 8));
    for (int i = 0; i < n; ++i) {
      text += words[static_cast<int>(rng.Uniform(0, 17))];
      text += i + 1 < n ? " " : ".\n";
    }
  }
  return text;
}

// arch: "mamba1", "mamba2" or "hybrid" (Mamba-2 and attention layers with MLPs).
TrainOptions SmallRun(const std::string& data, const std::string& out, const std::string& arch) {
  TrainOptions o;
  o.data = data;
  o.out = out;
  o.arch = arch == "mamba1" ? ModelArch::kMamba1 : ModelArch::kMamba2;
  if (arch == "hybrid") o.attention_every = 2;
  o.size = "tiny";
  o.steps = 12;
  o.batch = 3;
  o.seqlen = 32;
  o.accum = 2;
  o.warmup = 3;
  o.eval_every = 5;
  o.eval_windows = 4;
  o.save_every = 4;
  o.seed = 7;
  return o;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The log's step, lr, loss, val_loss, val_bpb and grad_norm columns (timings dropped).
std::string LossColumns(const std::string& log) {
  std::stringstream in(log), out;
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string f;
    for (int i = 0; i < 6 && std::getline(fields, f, '\t'); ++i) out << f << '\t';
    out << '\n';
  }
  return out.str();
}

class TrainLoop : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainLoop, SameSeedSameCurveAndResumeContinuesIt) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  TempDir dir("train_loop");
  { std::ofstream(dir / "data.txt") << MakeText(seed, 20000); }
  TrainResult r;
  ASSERT_TRUE(Train(SmallRun(dir / "data.txt", dir / "a", GetParam()), {}, nullptr, &r).ok());
  EXPECT_EQ(r.steps_done, 12);
  EXPECT_TRUE(std::isfinite(r.final_val_loss));
  ASSERT_TRUE(Train(SmallRun(dir / "data.txt", dir / "b", GetParam()), {}, nullptr, &r).ok());
  const std::string curve = LossColumns(ReadAll(dir / "a/log.tsv"));
  EXPECT_EQ(LossColumns(ReadAll(dir / "b/log.tsv")), curve) << "two runs with one seed";
  EXPECT_EQ(ReadAll(dir / "a/model.safetensors"), ReadAll(dir / "b/model.safetensors"));

  // Interrupted after step 6 (between the checkpoints at 4 and 8: the stop saves one), then
  // resumed; and a run killed after step 10 without saving, resumed from the step-8 checkpoint.
  volatile std::sig_atomic_t stop = 0;
  auto stop_at = [&stop](int64_t at) {
    return [&stop, at](const TrainStepInfo& s) {
      if (s.step == at) stop = 1;
    };
  };
  ASSERT_TRUE(Train(SmallRun(dir / "data.txt", dir / "c", GetParam()), stop_at(6), &stop, &r).ok());
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.steps_done, 6);
  stop = 0;
  TrainOptions resume = SmallRun(dir / "data.txt", dir / "c", GetParam());
  resume.resume = true;
  ASSERT_TRUE(Train(resume, {}, &stop, &r).ok());
  EXPECT_EQ(r.resumed_from, 6);
  EXPECT_EQ(r.steps_done, 12);
  EXPECT_EQ(LossColumns(ReadAll(dir / "c/log.tsv")), curve) << "interrupted at 6 and resumed";
  EXPECT_EQ(ReadAll(dir / "c/model.safetensors"), ReadAll(dir / "a/model.safetensors"));

  // A "crash" after step 10: stop without the final save by copying the step-8 checkpoint
  // aside while the run continues, then resuming from that copy.
  TrainOptions crash = SmallRun(dir / "data.txt", dir / "d", GetParam());
  auto snapshot = [&](const TrainStepInfo& s) {
    if (s.step == 9) fs::copy(dir / "d", dir / "d8", fs::copy_options::recursive);
  };
  ASSERT_TRUE(Train(crash, snapshot, nullptr, &r).ok());
  crash.out = dir / "d8";
  crash.resume = true;
  ASSERT_TRUE(Train(crash, {}, nullptr, &r).ok());
  EXPECT_EQ(r.resumed_from, 8);
  EXPECT_EQ(LossColumns(ReadAll(dir / "d8/log.tsv")), curve)
      << "resumed from the step-8 checkpoint";

  // Resuming with a different option is refused, naming it.
  resume.batch = 4;
  const Status changed = Train(resume, {}, nullptr, &r);
  EXPECT_FALSE(changed.ok());
  EXPECT_NE(changed.message().find("batch"), std::string::npos) << changed.message();
}

// The checkpoint is the engine's input: Model::Load reads it and its prefill logits equal the
// trainer's forward (same weights, f32; the two forwards are separate code).
TEST_P(TrainLoop, CheckpointLoadsInTheEngineWithTheSameLogits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  TempDir dir("train_engine");
  { std::ofstream(dir / "data.txt") << MakeText(seed, 20000); }
  TrainOptions o = SmallRun(dir / "data.txt", dir / "ckpt", GetParam());
  o.steps = 5;
  TrainResult r;
  ASSERT_TRUE(Train(o, {}, nullptr, &r).ok());

  std::unique_ptr<Model> engine;
  const Status loaded = Model::Load(dir / "ckpt", &engine);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(engine->parameter_count(), r.parameters);
  std::unique_ptr<train::TrainModel> trainer;
  ASSERT_TRUE(train::TrainModel::Create(engine->config(), &trainer).ok());
  ASSERT_TRUE(train::LoadModelParams(dir / "ckpt", trainer.get()).ok());

  const std::string prompt = "the model reads one byte";
  std::vector<int32_t> ids(prompt.begin(), prompt.end());
  const int64_t L = static_cast<int64_t>(ids.size()), V = engine->config().vocab_size;
  std::vector<float> ours;
  ASSERT_TRUE(trainer->Logits(ids, 1, L, &ours).ok());
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::Create(*engine, 1, &session).ok());
  std::vector<float> last(V), all(L * V, std::nanf(""));
  ASSERT_TRUE(session->Prefill({ids}, last, all).ok());
  std::vector<double> a(all.begin(), all.end()), b(ours.begin(), ours.end());
  EXPECT_LT(RelativeError(a, b), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Arch, TrainLoop, ::testing::Values("mamba1", "mamba2", "hybrid"),
                         [](const auto& info) { return info.param; });

// A few dozen steps of the hybrid lower the loss well below its start; the checkpoint's
// config.json reads back (as the engine and --init read it) into the same model, whose
// re-saved files are byte for byte the ones written; --init continues from it.
TEST(TrainHybrid, LearnsAndItsCheckpointReadsBack) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  TempDir dir("train_hybrid");
  { std::ofstream(dir / "data.txt") << MakeText(seed, 20000); }
  TrainOptions o = SmallRun(dir / "data.txt", dir / "ckpt", "hybrid");
  o.steps = 30;
  o.accum = 1;
  o.batch = 4;
  o.save_every = o.eval_every = 30;
  double first = 0.0;
  TrainResult r;
  const Status st = Train(
      o, [&](const TrainStepInfo& s) { first = s.step == 1 ? s.loss : first; }, nullptr, &r);
  ASSERT_TRUE(st.ok()) << st.message();
  std::printf("  hybrid: loss %.4f at step 1, %.4f at 30, validation %.4f\n", first, r.final_loss,
              r.final_val_loss);
  EXPECT_NEAR(first, std::log(256.0), 0.5) << "a fresh model predicts about uniformly";
  EXPECT_LT(r.final_val_loss, 0.6 * first);

  ModelConfig config;
  const Status parsed =
      model::ParseModelConfig(ReadAll(dir / "ckpt/config.json"), "config.json", &config);
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  EXPECT_EQ(config.hf_architecture(), "GraniteMoeHybridForCausalLM");
  std::unique_ptr<train::TrainModel> m;
  ASSERT_TRUE(train::TrainModel::Create(config, &m).ok());
  ASSERT_TRUE(train::LoadModelParams(dir / "ckpt", m.get()).ok());
  ASSERT_TRUE(train::SaveModel(*m, dir / "resaved", DType::kF32).ok());
  EXPECT_EQ(ReadAll(dir / "resaved/model.safetensors"), ReadAll(dir / "ckpt/model.safetensors"));
  EXPECT_EQ(ReadAll(dir / "resaved/config.json"), ReadAll(dir / "ckpt/config.json"));

  TrainOptions more = SmallRun(dir / "data.txt", dir / "more", "mamba2");
  more.init = dir / "ckpt";
  more.steps = 2;
  ASSERT_TRUE(Train(more, {}, nullptr, &r).ok());
  EXPECT_TRUE(std::isfinite(r.final_val_loss));
}

TEST(TrainOptionsCheck, BadOptionsAreRefusedByName) {
  TempDir dir("train_bad");
  { std::ofstream(dir / "data.txt") << MakeText(1, 5000); }
  struct Case {
    const char* name;
    void (*edit)(TrainOptions&);
    const char* expect;
  };
  const Case cases[] = {
      {"steps", [](TrainOptions& o) { o.steps = 0; }, "--steps"},
      {"batch", [](TrainOptions& o) { o.batch = 0; }, "--batch"},
      {"seqlen", [](TrainOptions& o) { o.seqlen = 1; }, "--seqlen"},
      {"accum", [](TrainOptions& o) { o.accum = 0; }, "--accum"},
      {"lr", [](TrainOptions& o) { o.lr = -1; }, "--lr"},
      {"min_lr above lr", [](TrainOptions& o) { o.min_lr = 1.0; }, "--min-lr"},
      {"clip", [](TrainOptions& o) { o.clip = -1; }, "--clip"},
      {"beta", [](TrainOptions& o) { o.beta2 = 1.0; }, "betas"},
      {"size", [](TrainOptions& o) { o.size = "huge"; }, "--size"},
      {"missing data", [](TrainOptions& o) { o.data += ".missing"; }, "cannot open"},
      {"data too short", [](TrainOptions& o) { o.seqlen = 4000; }, "at least"},
      {"val fraction", [](TrainOptions& o) { o.val_fraction = 1.5; }, "fraction"},
      {"init missing", [](TrainOptions& o) { o.init = "/nonexistent/ckpt"; }, "config.json"},
      {"attention period < 0", [](TrainOptions& o) { o.attention_every = -1; },
       "--attention-every"},
      {"attention period", [](TrainOptions& o) { o.attention_every = 3; }, "--attention-every"},
      {"hybrid of Mamba-1",
       [](TrainOptions& o) {
         o.attention_every = 2;
         o.arch = ModelArch::kMamba1;
       },
       "--arch hybrid"},
  };
  for (const Case& c : cases) {
    TrainOptions o = SmallRun(dir / "data.txt", dir / "out", "mamba2");
    c.edit(o);
    TrainResult r;
    const Status st = Train(o, {}, nullptr, &r);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.name << ": " << st.message();
  }
}

}  // namespace
}  // namespace ssmkit::testing

// The engine pieces the bindings stream through: Generator (token by token, stoppable, the same
// tokens as Generate), TokenTextStream (pieces of valid UTF-8 that concatenate to Decode),
// Tokenizer::ForModel, StartFromBeginningOfText and DefaultModelDir.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "ssmkit/generate.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/tokenizer.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

const std::string kModels = std::string(SSMKIT_FIXTURES_DIR) + "/models/";

std::vector<int32_t> RecordedInts(const std::string& model, const std::string& name) {
  SafetensorsCheckpoint file;
  EXPECT_TRUE(
      SafetensorsCheckpoint::OpenFile(kModels + model + "/expected.safetensors", &file).ok());
  const SafetensorsTensor* t = file.Find(name);
  if (t == nullptr) {
    ADD_FAILURE() << "no " << name;
    return {};
  }
  const int32_t* p = reinterpret_cast<const int32_t*>(t->data);
  return std::vector<int32_t>(p, p + t->numel());
}

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Model::Load(kModels + "mamba2-hf", &model_).ok());
    ASSERT_TRUE(Session::Create(*model_, 2, &session_).ok());
    prompt_ = RecordedInts("mamba2-hf", "p2.ids");
    greedy_ = RecordedInts("mamba2-hf", "p2.greedy_ids");
    ASSERT_EQ(greedy_.size(), 8u);
  }

  // Every token a fresh Generator gives, stopping after `stop_after` (0: run to the end).
  std::vector<int32_t> Run(const GenerateOptions& options, size_t stop_after = 0) {
    Generator g;
    const Status s = g.Start(*session_, prompt_, options);
    EXPECT_TRUE(s.ok()) << s.message();
    std::vector<int32_t> out;
    for (bool done = false;;) {
      int32_t token = -1;
      EXPECT_TRUE(g.Next(&token, &done).ok());
      if (done) break;
      out.push_back(token);
      if (out.size() == static_cast<size_t>(options.max_tokens) || token == options.eos_token_id) {
        EXPECT_TRUE(g.finished()) << "after the last token";
      } else {
        EXPECT_FALSE(g.finished()) << "after token " << out.size();
      }
      if (out.size() == stop_after) break;
    }
    return out;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Session> session_;
  std::vector<int32_t> prompt_, greedy_;
};

TEST_F(GeneratorTest, GreedyTokensAreTransformersAndGenerates) {
  GenerateOptions o;
  o.max_tokens = 8;
  EXPECT_EQ(Run(o), greedy_);
  std::vector<int32_t> from_generate;
  GenerateStats stats;
  ASSERT_TRUE(Generate(
                  *session_, prompt_, o, [&](int32_t t) { from_generate.push_back(t); }, &stats)
                  .ok());
  EXPECT_EQ(from_generate, greedy_);
  EXPECT_EQ(stats.generated_tokens, 8);
  EXPECT_EQ(stats.prompt_tokens, static_cast<int64_t>(prompt_.size()));
}

TEST_F(GeneratorTest, StoppedEarlyLeavesTheSessionReusable) {
  GenerateOptions o;
  o.max_tokens = 8;
  o.sampling = {0.9f, 50, 0.95f, FreshSeed()};
  SCOPED_TRACE(SeedTrace(o.sampling.seed));
  const std::vector<int32_t> whole = Run(o);
  ASSERT_EQ(whole.size(), 8u);
  const std::vector<int32_t> first3 = Run(o, 3);
  EXPECT_EQ(first3, std::vector<int32_t>(whole.begin(), whole.begin() + 3));
  EXPECT_EQ(Run(o), whole) << "the same seed after an interrupted run";
}

TEST_F(GeneratorTest, EosDoneAndErrors) {
  GenerateOptions o;
  o.max_tokens = 8;
  o.eos_token_id = greedy_[3];
  const std::vector<int32_t> out = Run(o);
  EXPECT_EQ(out.back(), greedy_[3]);
  EXPECT_LE(out.size(), 4u);

  Generator g;  // never started: done at once
  int32_t token = 123;
  bool done = false;
  ASSERT_TRUE(g.Next(&token, &done).ok());
  EXPECT_TRUE(done);
  EXPECT_EQ(token, 123);
  o.max_tokens = 0;
  ASSERT_TRUE(g.Start(*session_, prompt_, o).ok());
  ASSERT_TRUE(g.Next(&token, &done).ok());
  EXPECT_TRUE(done);
  o.max_tokens = -1;
  EXPECT_EQ(g.Start(*session_, prompt_, o).message(),
            "generate: max_tokens: expected >= 0, given -1");
  o.max_tokens = 4;
  o.sampling.top_p = 0.0f;
  EXPECT_FALSE(g.Start(*session_, prompt_, o).ok());
  o.sampling.top_p = 1.0f;
  EXPECT_FALSE(g.Start(*session_, {}, o).ok()) << "empty prompt";
  ASSERT_TRUE(g.Next(&token, &done).ok());
  EXPECT_TRUE(done) << "a failed Start leaves nothing to generate";
}

TEST(StartFromBeginningOfText, EmptyPromptsOnly) {
  ModelConfig c;
  c.bos_token_id = 7;
  c.eos_token_id = 3;
  std::vector<int32_t> p;
  ASSERT_TRUE(StartFromBeginningOfText(c, &p).ok());
  EXPECT_EQ(p, std::vector<int32_t>{7});
  ASSERT_TRUE(StartFromBeginningOfText(c, &p).ok());
  EXPECT_EQ(p, std::vector<int32_t>{7}) << "a non-empty prompt is left alone";
  c.bos_token_id = -1;
  p.clear();
  ASSERT_TRUE(StartFromBeginningOfText(c, &p).ok());
  EXPECT_EQ(p, std::vector<int32_t>{3});
  c.eos_token_id = -1;
  p.clear();
  EXPECT_FALSE(StartFromBeginningOfText(c, &p).ok());
}

// Random id sequences (BPE tokens, bytes that split characters): every piece is valid UTF-8 on
// its own and the pieces make Decode's text.
TEST(TokenTextStream, PiecesConcatenateToDecode) {
  std::unique_ptr<Tokenizer> bpe;
  ASSERT_TRUE(
      Tokenizer::FromFile(std::string(SSMKIT_FIXTURES_DIR) + "/tokenizer/tokenizer.json", &bpe)
          .ok());
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const std::unique_ptr<Tokenizer> bytes = Tokenizer::Bytes();
  for (const Tokenizer* t : {bpe.get(), bytes.get()}) {
    for (bool skip_special : {false, true}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<int32_t> ids(1 + trial);
        for (int32_t& id : ids)
          id = static_cast<int32_t>(rng.Uniform(0, static_cast<double>(t->vocab_size())));
        TokenTextStream stream(*t, skip_special);
        std::string joined;
        for (size_t i = 0; i <= ids.size(); ++i) {
          const std::string piece = i < ids.size() ? stream.Push(ids[i]) : stream.Finish();
          std::string valid;
          Utf8Lossy(piece, /*final=*/true, &valid);
          EXPECT_EQ(valid, piece) << "piece " << i << " is not valid UTF-8 on its own";
          joined += piece;
        }
        EXPECT_EQ(joined, t->Decode(ids, skip_special))
            << t->name() << ", " << ids.size() << " ids";
      }
    }
  }
  TokenTextStream stream(*bytes, false);
  EXPECT_EQ(stream.Push(0xE6), "");  // the first of three bytes
  EXPECT_EQ(stream.Push(0x97), "");
  EXPECT_EQ(stream.Finish(), "\xEF\xBF\xBD") << "an incomplete character at the end";
  EXPECT_EQ(stream.Finish(), "");
}

TEST(TokenizerForModel, TokenizerJsonBytesOrError) {
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(Tokenizer::ForModel(kModels + "mamba1-hf", 304, &t).ok());
  EXPECT_NE(t->name().find("tokenizer.json"), std::string::npos) << t->name();
  ASSERT_TRUE(Tokenizer::ForModel(kModels + "mamba1-ss", 256, &t).ok());
  EXPECT_EQ(t->name(), "bytes");
  const Status s = Tokenizer::ForModel(kModels + "mamba1-ss", 304, &t);
  EXPECT_NE(s.message().find("mamba1-ss: no tokenizer.json"), std::string::npos) << s.message();
}

TEST(DefaultModelDir, FoundBesideTheBinaryOrFromTheEnvironment) {
  std::string dir;
  const Status s = DefaultModelDir(&dir);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(dir) / "model.safetensors"))
      << dir;
  ASSERT_EQ(setenv("SSMKIT_DEFAULT_MODEL", (kModels + "mamba2-hf").c_str(), 1), 0);
  ASSERT_TRUE(DefaultModelDir(&dir).ok());
  EXPECT_EQ(dir, kModels + "mamba2-hf");
  ASSERT_EQ(setenv("SSMKIT_DEFAULT_MODEL", (kModels + "nothing-here").c_str(), 1), 0);
  EXPECT_NE(
      DefaultModelDir(&dir).message().find("nothing-here: expected a directory with config.json"),
      std::string::npos);
  unsetenv("SSMKIT_DEFAULT_MODEL");
}

}  // namespace
}  // namespace ssmkit::testing

// The built-in model (models/default, docs/default_model.md): it loads in the engine, it was
// trained (its loss on King James text is far below chance: 8 bits per byte), and what it
// writes reads as English-like text (most of its words are words of the corpus).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ssmkit/generate.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/tokenizer.hpp"
#include "train/checkpoint.hpp"
#include "train/lm.hpp"

namespace ssmkit::testing {
namespace {

const std::string kModelDir = std::string(SSMKIT_FIXTURES_DIR) + "/../../models/default";
// The first 64 KiB of the corpus (Genesis), as tests/fixtures/train keeps it.
const std::string kCorpusSample = std::string(SSMKIT_FIXTURES_DIR) + "/train/mamba1/data.txt";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::string w;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!w.empty()) {
      words.push_back(w);
      w.clear();
    }
  }
  return words;
}

TEST(DefaultModel, PredictsKingJamesText) {
  std::unique_ptr<Model> engine;
  const Status loaded = Model::Load(kModelDir, &engine);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(engine->config().vocab_size, 256);
  std::unique_ptr<train::TrainModel> m;
  ASSERT_TRUE(train::TrainModel::Create(engine->config(), &m).ok());
  ASSERT_TRUE(train::LoadModelParams(kModelDir, m.get()).ok());
  // 16 sequences of 256 bytes: the first 4 KiB of Genesis.
  const std::string text = ReadAll(kCorpusSample);
  ASSERT_GE(text.size(), 16u * 257u);
  std::vector<int32_t> tokens;
  for (int r = 0; r < 16; ++r) {
    for (int l = 0; l <= 256; ++l) tokens.push_back(static_cast<unsigned char>(text[r * 256 + l]));
  }
  double loss = 0.0;
  ASSERT_TRUE(m->Loss(tokens, 16, 256, &loss).ok());
  const double bits_per_byte = loss / (16 * 256) / std::log(2.0);
  std::printf(
      "  models/default on the first 4 KiB of Genesis (training text): %.3f bits per byte\n",
      bits_per_byte);
  EXPECT_LT(bits_per_byte, 2.0);
}

TEST(DefaultModel, WritesEnglishLikeText) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Load(kModelDir, &model).ok());
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::Create(*model, 1, &session).ok());
  const std::unique_ptr<Tokenizer> bytes = Tokenizer::Bytes();
  std::vector<int32_t> prompt;
  ASSERT_TRUE(bytes->Encode("And God said unto Moses, ", &prompt).ok());
  GenerateOptions o;
  o.max_tokens = 400;
  o.sampling.temperature = 0.8f;
  o.sampling.top_k = 40;
  o.sampling.seed = 1;
  std::vector<int32_t> out;
  GenerateStats stats;
  ASSERT_TRUE(Generate(
                  *session, prompt, o, [&](int32_t t) { out.push_back(t); }, &stats)
                  .ok());
  const std::string text = bytes->Decode(out);
  std::printf("  sample: %s\n", text.c_str());

  // The vocabulary of the corpus sample (Genesis 1-21, ~1,900 words); a model writing letters at
  // random, or stuck repeating, would not pass.
  std::set<std::string> vocab;
  for (const std::string& w : Words(ReadAll(kCorpusSample))) vocab.insert(w);
  const std::vector<std::string> words = Words(text);
  ASSERT_GE(words.size(), 40u) << text;
  size_t known = 0;
  std::set<std::string> distinct;
  for (const std::string& w : words) {
    known += vocab.count(w);
    distinct.insert(w);
  }
  const double known_fraction = static_cast<double>(known) / static_cast<double>(words.size());
  std::printf("  %zu words, %.0f%% of them in Genesis 1-21's vocabulary, %zu distinct\n",
              words.size(), 100.0 * known_fraction, distinct.size());
  EXPECT_GT(known_fraction, 0.7) << text;
  EXPECT_GT(distinct.size(), words.size() / 3) << "repetitive: " << text;
  for (unsigned char c : text) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << "byte " << int(c);
}

}  // namespace
}  // namespace ssmkit::testing

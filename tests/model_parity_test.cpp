// Parity with transformers: the tiny random checkpoints of scripts/make_model_fixtures.py
// (MambaForCausalLM f32 and bf16, Mamba2ForCausalLM with n_groups = 2, and both in the
// state-spaces format; the hybrid families of scripts/hybrid_fixtures.py:
// GraniteMoeHybridForCausalLM MoE + rope and dense + nope, BambaForCausalLM,
// NemotronHForCausalLM, FalconH1ForCausalLM with and without the gated norm, JambaForCausalLM,
// Zamba2ForCausalLM) against the logits transformers computed for fixed prompts.
//   - prefill: every position's logits, relative error <= 1e-4
//   - decode: the greedy tokens fed one at a time, each step's logits <= 1e-4, and our own greedy
//     continuation identical to transformers' generate()
//   - a batch of prompts of different lengths (packed without padding inside the engine) gives
//     each prompt's own logits, in prefill and in the decode steps that follow
#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "block_letters.hpp"
#include "core/safetensors.hpp"
#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kTolerance = 1e-4;
const char* const kPrompts[] = {"p0", "p1", "p2", "p3"};

std::string ModelDir(const std::string& name) {
  return std::string(SSMKIT_FIXTURES_DIR) + "/models/" + name;
}

// What transformers computed for one prompt.
struct Expected {
  std::vector<int32_t> ids;            // (L)
  std::vector<double> prefill_logits;  // (L, V)
  std::vector<int32_t> greedy;         // (S)
  std::vector<double> decode_logits;   // (S, V): the logits before each greedy token
};

std::vector<Expected> ReadExpected(const std::string& model_name, int64_t V) {
  SafetensorsCheckpoint file;
  const Status s =
      SafetensorsCheckpoint::OpenFile(ModelDir(model_name) + "/expected.safetensors", &file);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<Expected> all;
  for (const char* p : kPrompts) {
    Expected e;
    auto ints = [&](const std::string& name) {
      const SafetensorsTensor* t = file.Find(std::string(p) + "." + name);
      EXPECT_NE(t, nullptr) << name;
      std::vector<int32_t> v(t ? static_cast<size_t>(t->numel()) : 0);
      if (t) std::memcpy(v.data(), t->data, v.size() * 4);
      return v;
    };
    auto floats = [&](const std::string& name) {
      const SafetensorsTensor* t = file.Find(std::string(p) + "." + name);
      EXPECT_NE(t, nullptr) << name;
      std::vector<double> v(t ? static_cast<size_t>(t->numel()) : 0);
      for (size_t i = 0; i < v.size(); ++i) v[i] = reinterpret_cast<const float*>(t->data)[i];
      return v;
    };
    e.ids = ints("ids");
    e.prefill_logits = floats("prefill_logits");
    e.greedy = ints("greedy_ids");
    e.decode_logits = floats("decode_logits");
    EXPECT_EQ(e.prefill_logits.size(), e.ids.size() * V);
    EXPECT_EQ(e.decode_logits.size(), e.greedy.size() * V);
    all.push_back(std::move(e));
  }
  return all;
}

std::vector<double> Slice(const std::vector<double>& v, int64_t begin, int64_t n) {
  return std::vector<double>(v.begin() + begin, v.begin() + begin + n);
}
std::vector<double> ToDouble(const float* p, int64_t n) { return std::vector<double>(p, p + n); }

int32_t Argmax(const float* logits, int64_t n) {
  return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
}

struct ParityCase {
  const char* model;     // directory under tests/fixtures/models
  const char* expected;  // the directory whose expected.safetensors applies
  ModelArch arch;
  const char* format;
  const char* family = "";  // ModelConfig::family, for the hybrids
  int64_t n_layer = 2;
  int64_t vocab = 304;
  // The block kinds in order, one letter each: M / m Mamba-2 / Mamba-1, A attention, F MLP,
  // E MoE, P Falcon-H1's parallel block, S Zamba2's shared block ("" for a pure Mamba model).
  const char* blocks = "";
};

void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.model; }

class ModelParity : public ::testing::TestWithParam<ParityCase> {
 protected:
  void SetUp() override {
    const Status s = Model::Load(ModelDir(GetParam().model), &model_);
    ASSERT_TRUE(s.ok()) << s.message();
    V_ = model_->config().vocab_size;
    expected_ = ReadExpected(GetParam().expected, V_);
    ASSERT_TRUE(Session::Create(*model_, 4, &session_).ok());
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Session> session_;
  std::vector<Expected> expected_;
  int64_t V_ = 0;
};

TEST_P(ModelParity, ConfigRead) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.arch, GetParam().arch);
  EXPECT_EQ(c.format, GetParam().format);
  EXPECT_EQ(c.vocab_size, GetParam().vocab);
  EXPECT_EQ(c.n_layer, GetParam().n_layer);
  if (*GetParam().family) EXPECT_EQ(c.family, GetParam().family);
  EXPECT_EQ(BlockLetters(c.blocks), GetParam().blocks);
}

TEST_P(ModelParity, PrefillEveryPosition) {
  for (size_t p = 0; p < expected_.size(); ++p) {
    const Expected& e = expected_[p];
    const int64_t L = static_cast<int64_t>(e.ids.size());
    std::vector<float> last(V_, std::nanf("")), all(L * V_, std::nanf(""));
    const Status s = session_->Prefill({e.ids}, last, all);
    ASSERT_TRUE(s.ok()) << s.message();
    const double err = RelativeError(ToDouble(all.data(), L * V_), e.prefill_logits);
    EXPECT_LE(err, kTolerance) << kPrompts[p] << " (" << L << " tokens)";
    EXPECT_LE(RelativeError(ToDouble(last.data(), V_), Slice(e.prefill_logits, (L - 1) * V_, V_)),
              kTolerance)
        << kPrompts[p] << ": last-position logits";
  }
}

TEST_P(ModelParity, DecodeStepsAndGreedyContinuation) {
  for (size_t p = 0; p < expected_.size(); ++p) {
    SCOPED_TRACE(kPrompts[p]);
    const Expected& e = expected_[p];
    const int64_t steps = static_cast<int64_t>(e.greedy.size());
    std::vector<float> logits(V_, std::nanf(""));
    ASSERT_TRUE(session_->Prefill({e.ids}, logits).ok());
    std::vector<int32_t> ours;
    for (int64_t j = 0; j < steps; ++j) {
      // The logits before greedy token j: the prefill's for j = 0, then one decode step each.
      EXPECT_LE(RelativeError(ToDouble(logits.data(), V_), Slice(e.decode_logits, j * V_, V_)),
                kTolerance)
          << "decode step " << j;
      // generate() ran with min_new_tokens = its step count, which bans the end-of-text token
      // (sets its logit to -inf) before every greedy pick: so do we.
      const int64_t eos = model_->config().eos_token_id;
      if (eos >= 0 && eos < V_) logits[eos] = -std::numeric_limits<float>::infinity();
      ours.push_back(Argmax(logits.data(), V_));
      std::fill(logits.begin(), logits.end(), std::nanf(""));
      const int32_t next = e.greedy[j];  // teacher-forced: transformers' token
      const Status s = session_->Decode(std::span<const int32_t>(&next, 1), logits);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    EXPECT_EQ(ours, e.greedy) << "greedy continuation";
  }
}

TEST_P(ModelParity, BatchOfDifferentLengths) {
  const int64_t B = static_cast<int64_t>(expected_.size());
  std::vector<std::vector<int32_t>> prompts;
  int64_t L = 0;
  for (const Expected& e : expected_) {
    prompts.push_back(e.ids);
    L = std::max<int64_t>(L, static_cast<int64_t>(e.ids.size()));
  }
  std::vector<float> last(B * V_, std::nanf("")), all(B * L * V_, std::nanf(""));
  const Status s = session_->Prefill(prompts, last, all);
  ASSERT_TRUE(s.ok()) << s.message();
  for (int64_t b = 0; b < B; ++b) {
    const Expected& e = expected_[b];
    const int64_t n = static_cast<int64_t>(e.ids.size());
    EXPECT_LE(RelativeError(ToDouble(all.data() + b * L * V_, n * V_), e.prefill_logits),
              kTolerance)
        << kPrompts[b] << " in a batch of " << B;
    EXPECT_LE(RelativeError(ToDouble(last.data() + b * V_, V_), e.decode_logits.size()
                                                                    ? Slice(e.decode_logits, 0, V_)
                                                                    : std::vector<double>{}),
              kTolerance)
        << kPrompts[b] << ": last position";
  }
  const int64_t steps = static_cast<int64_t>(expected_[0].greedy.size());
  std::vector<float> logits(B * V_);
  for (int64_t j = 0; j + 1 < steps; ++j) {
    std::vector<int32_t> next;
    for (const Expected& e : expected_) next.push_back(e.greedy[j]);
    std::fill(logits.begin(), logits.end(), std::nanf(""));
    ASSERT_TRUE(session_->Decode(next, logits).ok());
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_LE(RelativeError(ToDouble(logits.data() + b * V_, V_),
                              Slice(expected_[b].decode_logits, (j + 1) * V_, V_)),
                kTolerance)
          << kPrompts[b] << " decode step " << j + 1 << " in a batch of " << B;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ModelParity,
    ::testing::Values(
        ParityCase{"mamba1-hf", "mamba1-hf", ModelArch::kMamba1, "hf"},
        ParityCase{"mamba1-hf-bf16", "mamba1-hf-bf16", ModelArch::kMamba1, "hf"},
        ParityCase{"mamba1-ss", "mamba1-hf", ModelArch::kMamba1, "state-spaces"},
        ParityCase{"mamba2-hf", "mamba2-hf", ModelArch::kMamba2, "hf"},
        ParityCase{"mamba2-ss", "mamba2-hf", ModelArch::kMamba2, "state-spaces"},
        // hybrids: the layer lists scripts/hybrid_fixtures.py configures
        ParityCase{"granitemoehybrid-moe", "granitemoehybrid-moe", ModelArch::kMamba2, "hf",
                   "granitemoehybrid", 4, 304, "MEAEMEAE"},
        ParityCase{"granitemoehybrid-dense", "granitemoehybrid-dense", ModelArch::kMamba2, "hf",
                   "granitemoehybrid", 3, 304, "MFMFAF"},
        ParityCase{"bamba", "bamba", ModelArch::kMamba2, "hf", "bamba", 3, 304, "MFAFMF"},
        ParityCase{"nemotron_h", "nemotron_h", ModelArch::kMamba2, "hf", "nemotron_h", 5, 304,
                   "MAFMF"},
        ParityCase{"nemotron_h-moe", "nemotron_h-moe", ModelArch::kMamba2, "hf", "nemotron_h", 6,
                   304, "MEAEFM"},
        ParityCase{"nemotron_h-moe-latent", "nemotron_h-moe-latent", ModelArch::kMamba2, "hf",
                   "nemotron_h", 6, 304, "MEMAEF"},
        ParityCase{"falcon_h1", "falcon_h1", ModelArch::kMamba2, "hf", "falcon_h1", 2, 304, "PFPF"},
        ParityCase{"falcon_h1-norm", "falcon_h1-norm", ModelArch::kMamba2, "hf", "falcon_h1", 2,
                   304, "PFPF"},
        ParityCase{"jamba", "jamba", ModelArch::kMamba1, "hf", "jamba", 4, 392, "mEAFmEAF"},
        ParityCase{"zamba2", "zamba2", ModelArch::kMamba2, "hf", "zamba2", 5, 392, "MSMMSMSM"}),
    [](const ::testing::TestParamInfo<ParityCase>& info) {
      std::string name = info.param.model;
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return !std::isalnum(ch); }, '_');
      return name;
    });

}  // namespace
}  // namespace ssmkit::testing

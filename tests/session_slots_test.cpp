// The session's slot API on random models: chunked prefill continues a slot exactly where it
// stood, decode of any subset of slots equals decoding each alone, a reset slot starts afresh,
// and a saved slot restored into another slot (or session) continues identically. Every model
// kind the engine runs is covered (model list below); each comparison is against the same
// model run another way, at 1e-4 relative (the ops' batch and chunk splits change rounding).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "random_model_config.hpp"
#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kTolerance = 1e-4;

struct SlotModel {
  const char* name;
  ModelConfig config;             // random weights of this config, or
  const char* fixture = nullptr;  // a checkpoint of tests/fixtures/models
};

void PrintTo(const SlotModel& m, std::ostream* os) { *os << m.name; }

std::vector<SlotModel> SlotModels() {
  return {
      {"mamba1", RandomModelConfig(ModelArch::kMamba1, {48, 2, 97, 8})},
      {"mamba2", RandomModelConfig(ModelArch::kMamba2, {48, 2, 97, 16, 6, 3, 8})},
      // The hybrid families' fixtures: attention (rope, nope, GQA), MLP, MoE, Falcon-H1's
      // parallel blocks and Zamba2's shared blocks, each with KV cache and SSM states.
      {"granite_moe", {}, "granitemoehybrid-moe"},
      {"granite_dense", {}, "granitemoehybrid-dense"},
      {"bamba", {}, "bamba"},
      {"nemotron_h", {}, "nemotron_h"},
      {"nemotron_h_moe", {}, "nemotron_h-moe"},
      {"nemotron_h_moe_latent", {}, "nemotron_h-moe-latent"},
      {"falcon_h1", {}, "falcon_h1-norm"},
      {"jamba", {}, "jamba"},
      {"zamba2", {}, "zamba2"},
  };
}

std::vector<double> Row(const std::vector<float>& v, int64_t row, int64_t width) {
  return std::vector<double>(v.begin() + row * width, v.begin() + (row + 1) * width);
}

class SessionSlots : public ::testing::TestWithParam<SlotModel> {
 protected:
  void SetUp() override {
    seed_ = FreshSeed();
    const Status s =
        GetParam().fixture != nullptr
            ? Model::Load(std::string(SSMKIT_FIXTURES_DIR) + "/models/" + GetParam().fixture,
                          &model_)
            : Model::Random(GetParam().config, DType::kF32, seed_, &model_);
    ASSERT_TRUE(s.ok()) << s.message();
    V_ = model_->config().vocab_size;
  }
  std::unique_ptr<Session> NewSession(int64_t max_batch) {
    std::unique_ptr<Session> s;
    SessionOptions o;
    o.max_batch = max_batch;
    o.max_context = 256;
    o.kv_block_size = 4;  // small blocks: sequences cross block boundaries
    EXPECT_TRUE(Session::Create(*model_, o, &s).ok());
    return s;
  }

  uint64_t seed_ = 0;
  std::unique_ptr<Model> model_;
  int64_t V_ = 0;
};

// A prompt fed in chunks of 3, 5, 1 and 7 tokens into slot 2 gives, at each chunk's end, the
// logits one prefill of the whole prompt gives there; decode then continues alike.
TEST_P(SessionSlots, ChunkedPrefillEqualsOnePrefill) {
  SCOPED_TRACE(SeedTrace(seed_));
  Rng rng(seed_);
  const std::vector<int32_t> prompt = RandomTokens(rng, 16, V_);
  auto whole = NewSession(1);
  std::vector<float> all(16 * V_), last(V_);
  ASSERT_TRUE(whole->Prefill({prompt}, last, all).ok());

  auto chunked = NewSession(3);
  const int32_t slot = 2;
  int64_t done = 0;
  std::vector<float> logits(V_, std::nanf("")), chunk_all(7 * V_, std::nanf(""));
  for (int64_t len : {3, 5, 1, 7}) {
    const std::vector<int32_t> chunk(prompt.begin() + done, prompt.begin() + done + len);
    std::fill(chunk_all.begin(), chunk_all.end(), std::nanf(""));
    const Status s = chunked->PrefillSlots({&slot, 1}, {chunk}, logits, chunk_all);
    ASSERT_TRUE(s.ok()) << s.message();
    done += len;
    EXPECT_EQ(chunked->slot_length(slot), done);
    EXPECT_LE(RelativeError(Row(logits, 0, V_), Row(all, done - 1, V_)), kTolerance)
        << "after " << done << " tokens";
    for (int64_t j = 0; j < len; ++j) {
      EXPECT_LE(RelativeError(Row(chunk_all, j, V_), Row(all, done - len + j, V_)), kTolerance)
          << "position " << done - len + j;
    }
  }
  for (int step = 0; step < 3; ++step) {
    const int32_t token = static_cast<int32_t>(step + 5);
    ASSERT_TRUE(whole->Decode({&token, 1}, last).ok());
    ASSERT_TRUE(chunked->DecodeSlots({&slot, 1}, {&token, 1}, logits).ok());
    EXPECT_LE(RelativeError(Row(logits, 0, V_), Row(last, 0, V_)), kTolerance) << "step " << step;
  }
}

// Slots prefilled at different times and lengths, decoded together in a scattered order
// ({3, 0} then {0, 2, 3}), equal each sequence run alone; one prefill call may mix a fresh
// slot with a continuing one.
TEST_P(SessionSlots, ScatteredSlotsEqualOneByOne) {
  SCOPED_TRACE(SeedTrace(seed_));
  Rng rng(seed_);
  const std::vector<int32_t> a = RandomTokens(rng, 9, V_), b = RandomTokens(rng, 4, V_);
  const std::vector<int32_t> c = RandomTokens(rng, 6, V_), a2 = RandomTokens(rng, 5, V_);
  auto many = NewSession(4);
  std::vector<float> logits(3 * V_);
  const std::vector<int32_t> s30 = {3, 0};
  ASSERT_TRUE(many->PrefillSlots(s30, {a, b}, logits).ok());
  // Slot 3 continues, slot 2 starts: one call.
  const std::vector<int32_t> s32 = {3, 2};
  ASSERT_TRUE(many->PrefillSlots(s32, {a2, c}, logits).ok());
  const std::vector<int32_t> t1 = {11, 12};
  ASSERT_TRUE(many->DecodeSlots(s30, t1, logits).ok());
  const std::vector<int32_t> s023 = {0, 2, 3}, t2 = {13, 14, 15};
  std::fill(logits.begin(), logits.end(), std::nanf(""));
  ASSERT_TRUE(many->DecodeSlots(s023, t2, logits).ok());

  // The same token streams, each in a session of its own.
  auto alone = [&](std::vector<int32_t> prompt, const std::vector<int32_t>& steps) {
    auto one = NewSession(1);
    std::vector<float> out(V_);
    EXPECT_TRUE(one->Prefill({prompt}, out).ok());
    for (int32_t t : steps) EXPECT_TRUE(one->Decode({&t, 1}, out).ok());
    return out;
  };
  std::vector<int32_t> a_all = a;
  a_all.insert(a_all.end(), a2.begin(), a2.end());
  const std::vector<float> want_b = alone(b, {12, 13}), want_c = alone(c, {14});
  const std::vector<float> want_a = alone(a_all, {11, 15});
  EXPECT_LE(RelativeError(Row(logits, 0, V_), Row(want_b, 0, V_)), kTolerance) << "slot 0";
  EXPECT_LE(RelativeError(Row(logits, 1, V_), Row(want_c, 0, V_)), kTolerance) << "slot 2";
  EXPECT_LE(RelativeError(Row(logits, 2, V_), Row(want_a, 0, V_)), kTolerance) << "slot 3";
  EXPECT_EQ(many->slot_length(3), 9 + 5 + 2);
  EXPECT_EQ(many->slot_length(1), 0);
}

// A reset slot forgets everything: it gives a fresh sequence's logits, and decoding it before
// a prefill is an error.
TEST_P(SessionSlots, ResetSlotStartsAfresh) {
  SCOPED_TRACE(SeedTrace(seed_));
  Rng rng(seed_);
  const std::vector<int32_t> p = RandomTokens(rng, 7, V_), q = RandomTokens(rng, 5, V_);
  auto s = NewSession(2);
  std::vector<float> logits(V_), fresh(V_);
  const int32_t slot = 1;
  ASSERT_TRUE(s->PrefillSlots({&slot, 1}, {p}, logits).ok());
  ASSERT_TRUE(s->ResetSlot(slot).ok());
  EXPECT_EQ(s->slot_length(slot), 0);
  const int32_t token = 3;
  const Status d = s->DecodeSlots({&slot, 1}, {&token, 1}, logits);
  EXPECT_NE(d.message().find("slot 1 holds no tokens"), std::string::npos) << d.message();
  ASSERT_TRUE(s->PrefillSlots({&slot, 1}, {q}, logits).ok());
  auto other = NewSession(1);
  ASSERT_TRUE(other->Prefill({q}, fresh).ok());
  EXPECT_LE(RelativeError(Row(logits, 0, V_), Row(fresh, 0, V_)), kTolerance);
}

// Save a slot after a prefix, restore it into another slot and into another session: all
// three continue with the same logits, bit for bit (the same ops on the same bits).
TEST_P(SessionSlots, SaveRestoreContinuesIdentically) {
  SCOPED_TRACE(SeedTrace(seed_));
  Rng rng(seed_);
  const std::vector<int32_t> prefix = RandomTokens(rng, 11, V_), rest = RandomTokens(rng, 4, V_);
  auto s = NewSession(3);
  std::vector<float> logits(V_);
  const int32_t s0 = 0, s2 = 2;
  ASSERT_TRUE(s->PrefillSlots({&s0, 1}, {prefix}, logits).ok());
  int64_t bytes = 0;
  ASSERT_TRUE(s->SlotStateBytes(s0, &bytes).ok());
  std::vector<uint8_t> buffer(static_cast<size_t>(bytes));
  int64_t written = 0;
  ASSERT_TRUE(s->SaveSlot(s0, buffer, &written).ok());
  EXPECT_EQ(written, bytes);
  ASSERT_TRUE(s->RestoreSlot(s2, buffer).ok());
  EXPECT_EQ(s->slot_length(s2), 11);
  auto t = NewSession(1);
  ASSERT_TRUE(t->RestoreSlot(0, buffer).ok());

  std::vector<float> a(V_), b(V_), c(V_);
  ASSERT_TRUE(s->PrefillSlots({&s0, 1}, {rest}, a).ok());
  ASSERT_TRUE(s->PrefillSlots({&s2, 1}, {rest}, b).ok());
  ASSERT_TRUE(t->PrefillSlots({&s0, 1}, {rest}, c).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  const int32_t token = 9;
  ASSERT_TRUE(s->DecodeSlots({&s2, 1}, {&token, 1}, b).ok());
  ASSERT_TRUE(t->DecodeSlots({&s0, 1}, {&token, 1}, c).ok());
  EXPECT_EQ(b, c);
}

// Bad slot arguments give a Status naming them, and change nothing.
TEST_P(SessionSlots, BadArguments) {
  auto s = NewSession(2);
  std::vector<float> logits(2 * V_, std::nanf(""));
  const std::vector<int32_t> dup = {1, 1}, out_of_range = {2}, negative = {-1};
  Status st = s->PrefillSlots(dup, {{1}, {2}}, logits);
  EXPECT_NE(st.message().find("slot 1 given twice"), std::string::npos) << st.message();
  st = s->PrefillSlots(out_of_range, {{1}}, logits);
  EXPECT_NE(st.message().find("slot 2 outside [0, 2)"), std::string::npos) << st.message();
  st = s->PrefillSlots(negative, {{1}}, logits);
  EXPECT_NE(st.message().find("slot -1 outside"), std::string::npos) << st.message();
  const std::vector<int32_t> one = {0};
  st = s->PrefillSlots(one, {{1}, {2}}, logits);
  EXPECT_NE(st.message().find("chunks: expected one per slot (1), given 2"), std::string::npos)
      << st.message();
  st = s->PrefillSlots(one, {{}}, logits);
  EXPECT_NE(st.message().find("chunk 0 is empty"), std::string::npos) << st.message();
  EXPECT_FALSE(s->ResetSlot(2).ok());
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); }));
  EXPECT_EQ(s->slot_length(0), 0);

  ASSERT_TRUE(s->PrefillSlots(one, {{1, 2, 3}}, logits).ok());
  int64_t bytes = 0;
  ASSERT_TRUE(s->SlotStateBytes(0, &bytes).ok());
  std::vector<uint8_t> buffer(static_cast<size_t>(bytes));
  int64_t written = 0;
  st = s->SaveSlot(0, std::span<uint8_t>(buffer).first(bytes - 1), &written);
  EXPECT_NE(st.message().find("buffer: expected " + std::to_string(bytes)), std::string::npos)
      << st.message();
  ASSERT_TRUE(s->SaveSlot(0, buffer, &written).ok());
  st = s->RestoreSlot(1, std::span<const uint8_t>(buffer).first(bytes - 4));
  EXPECT_NE(st.message().find("restore slot: buffer: expected"), std::string::npos) << st.message();
  std::vector<uint8_t> garbage(buffer.size(), 0x5a);
  st = s->RestoreSlot(1, garbage);
  EXPECT_NE(st.message().find("not a slot state"), std::string::npos) << st.message();
  EXPECT_EQ(s->slot_length(1), 0);

  // A state from a model of another shape.
  ModelConfig other_config =
      SlotModels()[GetParam().config.arch == ModelArch::kMamba2 ? 0 : 1].config;
  std::unique_ptr<Model> other;
  ASSERT_TRUE(Model::Random(other_config, DType::kF32, 1, &other).ok());
  std::unique_ptr<Session> os;
  ASSERT_TRUE(Session::Create(*other, 1, &os).ok());
  st = os->RestoreSlot(0, buffer);
  EXPECT_NE(st.message().find("model of another shape"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Models, SessionSlots, ::testing::ValuesIn(SlotModels()),
                         [](const ::testing::TestParamInfo<SlotModel>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ssmkit::testing

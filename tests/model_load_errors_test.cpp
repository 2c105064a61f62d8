// Loading a checkpoint that is broken in one way at a time: each gives a Status naming the file
// (and the tensor or key), never a crash. Starting from the mamba1-hf fixture, a temporary
// directory gets a config or a safetensors file with one defect: bad JSON, a missing or
// mistyped key, an unsupported model type, no weights file, a header length past the end, a
// header that is not JSON, truncated data, offsets that disagree with the shape, a missing,
// extra or mis-shaped tensor, an integer or unknown dtype; plus sharded checkpoints (valid, and
// with a shard missing a tensor its index lists).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ssmkit/model.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const fs::path kSource = fs::path(SSMKIT_FIXTURES_DIR) / "models" / "mamba1-hf";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

// A safetensors file split into its JSON header and its data bytes.
struct Safetensors {
  Json header;
  std::string data;

  static Safetensors Read(const fs::path& p) {
    const std::string bytes = ReadFile(p);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(bytes[i]);
    return {Json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  }
  std::string Bytes() const {
    const std::string h = header.dump();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xFF);
    return out + h + data;
  }
};

class ModelLoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("ssmkit_load_" + std::to_string(FreshSeed() % 1000000007));
    fs::create_directories(dir_);
    fs::copy_file(kSource / "config.json", dir_ / "config.json");
    fs::copy_file(kSource / "model.safetensors", dir_ / "model.safetensors");
    config_ = Json::parse(ReadFile(dir_ / "config.json"));
    weights_ = Safetensors::Read(dir_ / "model.safetensors");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WriteConfig() { WriteFile(dir_ / "config.json", config_.dump()); }
  void WriteWeights() { WriteFile(dir_ / "model.safetensors", weights_.Bytes()); }

  // Loads dir_; expects failure with every fragment in the message.
  void ExpectError(std::initializer_list<std::string> fragments,
                   StatusCode code = StatusCode::kInvalidArgument) {
    std::unique_ptr<Model> model;
    const Status s = Model::Load(dir_.string(), &model);
    ASSERT_FALSE(s.ok()) << "loaded a broken checkpoint";
    EXPECT_EQ(s.code(), code) << s.message();
    for (const std::string& f : fragments)
      EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
    EXPECT_EQ(model, nullptr);
  }

  fs::path dir_;
  Json config_;
  Safetensors weights_;
};

TEST_F(ModelLoadErrors, TheUnbrokenCopyLoads) {
  WriteConfig();
  // Rewritten through the helper: the round trip is valid, and its unpadded header leaves the
  // tensors' data misaligned (the loader copies such tensors to aligned memory).
  WriteWeights();
  std::unique_ptr<Model> model;
  const Status s = Model::Load(dir_.string(), &model);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(ModelLoadErrors, NoDirectory) {
  std::unique_ptr<Model> model;
  const Status s = Model::Load((dir_ / "nowhere").string(), &model);
  EXPECT_NE(s.message().find("config.json: cannot open"), std::string::npos) << s.message();
}

TEST_F(ModelLoadErrors, ConfigNotJson) {
  WriteFile(dir_ / "config.json", "{\"hidden_size\": 32,");
  ExpectError({"config.json", "not valid JSON"});
}

TEST_F(ModelLoadErrors, ConfigMissingKey) {
  config_.erase("hidden_size");
  WriteConfig();
  ExpectError({"config.json", "missing key \"hidden_size\""});
}

TEST_F(ModelLoadErrors, ConfigWrongType) {
  config_["num_hidden_layers"] = "two";
  WriteConfig();
  ExpectError({"config.json", "\"num_hidden_layers\": expected an integer", "\"two\""});
}

TEST_F(ModelLoadErrors, ConfigUnsupportedModelType) {
  config_["model_type"] = "llama";
  WriteConfig();
  ExpectError({"config.json", "model_type \"llama\""}, StatusCode::kUnsupported);
}

TEST_F(ModelLoadErrors, ConfigInconsistent) {
  config_["conv_kernel"] = 12;
  WriteConfig();
  ExpectError({"config.json", "conv width 12"});
}

TEST_F(ModelLoadErrors, ConfigExpansionPastInt64) {
  config_["expand"] = 1e300;
  WriteConfig();
  ExpectError({"config.json", "\"expand\" times the model width", "[1, 2^62)"});
}

TEST_F(ModelLoadErrors, NoWeightsFile) {
  fs::remove(dir_ / "model.safetensors");
  ExpectError({"no model.safetensors or model.safetensors.index.json"});
}

TEST_F(ModelLoadErrors, HeaderLengthPastTheEnd) {
  std::string bytes = ReadFile(dir_ / "model.safetensors");
  bytes[6] = '\x7f';  // a header length of ~2^55 bytes
  WriteFile(dir_ / "model.safetensors", bytes);
  ExpectError({"model.safetensors", "header length", "exceeds the file"});
}

TEST_F(ModelLoadErrors, TooShortForAHeader) {
  WriteFile(dir_ / "model.safetensors", "abc");
  ExpectError({"model.safetensors", "too short"});
}

TEST_F(ModelLoadErrors, HeaderNotJson) {
  std::string bytes = ReadFile(dir_ / "model.safetensors");
  bytes[8] = '[';
  bytes[9] = ':';
  WriteFile(dir_ / "model.safetensors", bytes);
  ExpectError({"model.safetensors", "header is not valid JSON"});
}

TEST_F(ModelLoadErrors, TruncatedData) {
  std::string bytes = ReadFile(dir_ / "model.safetensors");
  bytes.resize(bytes.size() - 100);
  WriteFile(dir_ / "model.safetensors", bytes);
  ExpectError({"model.safetensors", "tensor '", "truncated"});
}

TEST_F(ModelLoadErrors, OffsetsDisagreeWithShape) {
  Json& t = weights_.header["backbone.norm_f.weight"];
  t["data_offsets"][1] = t["data_offsets"][1].get<int64_t>() - 4;
  WriteWeights();
  ExpectError({"tensor 'backbone.norm_f.weight'", "span 124 bytes", "needs 128"});
}

TEST_F(ModelLoadErrors, MissingTensor) {
  config_["num_hidden_layers"] = 3;
  WriteConfig();
  ExpectError({"missing tensor 'backbone.layers.2.", "3 layers"});
}

TEST_F(ModelLoadErrors, ExtraTensor) {
  config_["num_hidden_layers"] = 1;
  WriteConfig();
  ExpectError({"unexpected tensor 'backbone.layers.1.", "1 layers"});
}

TEST_F(ModelLoadErrors, MisShapedTensor) {
  weights_.header["backbone.layers.0.mixer.D"]["shape"] =
      Json::array({2, 32});  // same bytes as (64,)
  WriteWeights();
  ExpectError(
      {"model.safetensors", "tensor 'backbone.layers.0.mixer.D'", "shape (2, 32), expected (64,)"});
}

TEST_F(ModelLoadErrors, IntegerDtype) {
  weights_.header["backbone.layers.1.mixer.A_log"]["dtype"] = "I32";
  WriteWeights();
  ExpectError({"tensor 'backbone.layers.1.mixer.A_log'", "dtype I32, expected F32, BF16 or F16"});
}

TEST_F(ModelLoadErrors, UnknownDtype) {
  weights_.header["backbone.norm_f.weight"]["dtype"] = "F33";
  WriteWeights();
  ExpectError({"tensor 'backbone.norm_f.weight'", "unknown dtype \"F33\""});
}

TEST_F(ModelLoadErrors, MalformedEntry) {
  weights_.header["backbone.norm_f.weight"]["shape"] = "thirty-two";
  WriteWeights();
  ExpectError({"tensor 'backbone.norm_f.weight'", "\"shape\""});
}

// Splits the weights into two shards with an index; `drop` names a tensor left out of its shard.
void WriteShards(const fs::path& dir, const Safetensors& all, const std::string& drop = "") {
  Safetensors shard[2];
  Json index = {{"metadata", Json::object()}, {"weight_map", Json::object()}};
  int i = 0;
  for (const auto& [name, entry] : all.header.items()) {
    if (name == "__metadata__") continue;
    Safetensors& s = shard[i % 2];
    const std::string file = "model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
    index["weight_map"][name] = file;
    ++i;
    if (name == drop) continue;
    const int64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    Json e = entry;
    e["data_offsets"] = Json::array(
        {static_cast<int64_t>(s.data.size()), static_cast<int64_t>(s.data.size()) + end - begin});
    s.header[name] = e;
    s.data += all.data.substr(begin, end - begin);
  }
  WriteFile(dir / "model-00001-of-00002.safetensors", shard[0].Bytes());
  WriteFile(dir / "model-00002-of-00002.safetensors", shard[1].Bytes());
  WriteFile(dir / "model.safetensors.index.json", index.dump());
  fs::remove(dir / "model.safetensors");
}

TEST_F(ModelLoadErrors, ShardedCheckpointLoadsAndAgrees) {
  WriteShards(dir_, weights_);
  std::unique_ptr<Model> sharded, single;
  const Status s = Model::Load(dir_.string(), &sharded);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(Model::Load(kSource.string(), &single).ok());
  EXPECT_EQ(sharded->parameter_count(), single->parameter_count());
  std::unique_ptr<Session> a, b;
  ASSERT_TRUE(Session::Create(*sharded, 1, &a).ok());
  ASSERT_TRUE(Session::Create(*single, 1, &b).ok());
  const int64_t V = single->config().vocab_size;
  std::vector<float> la(V), lb(V);
  ASSERT_TRUE(a->Prefill({{5, 6, 7}}, la).ok());
  ASSERT_TRUE(b->Prefill({{5, 6, 7}}, lb).ok());
  EXPECT_EQ(la, lb);
}

TEST_F(ModelLoadErrors, ShardMissingAnIndexedTensor) {
  WriteShards(dir_, weights_, "backbone.layers.0.mixer.x_proj.weight");
  ExpectError(
      {"model-0000", "tensor 'backbone.layers.0.mixer.x_proj.weight'", "absent from the file"});
}

TEST_F(ModelLoadErrors, IndexNamesAFileOutsideTheDirectory) {
  WriteFile(dir_ / "model.safetensors.index.json",
            R"({"weight_map": {"backbone.norm_f.weight": "../elsewhere.safetensors"}})");
  fs::remove(dir_ / "model.safetensors");
  ExpectError({"model.safetensors.index.json", "not a file in the directory"});
}

// The same checkpoint with every tensor stored as F16 loads and runs through the f16 paths; its
// logits differ from the f32 checkpoint's only by the weights' rounding.
TEST_F(ModelLoadErrors, F16Checkpoint) {
  Safetensors half;
  for (const auto& [name, entry] : weights_.header.items()) {
    if (name == "__metadata__") continue;
    const int64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    const float* src = reinterpret_cast<const float*>(weights_.data.data() + begin);
    std::string bytes((end - begin) / 2, '\0');
    for (int64_t i = 0; i < (end - begin) / 4; ++i) {
      const uint16_t h = F32ToF16(src[i]);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
    Json e = entry;
    e["dtype"] = "F16";
    e["data_offsets"] = Json::array({static_cast<int64_t>(half.data.size()),
                                     static_cast<int64_t>(half.data.size() + bytes.size())});
    half.header[name] = e;
    half.data += bytes;
  }
  WriteFile(dir_ / "model.safetensors", half.Bytes());
  std::unique_ptr<Model> f16, f32;
  const Status s = Model::Load(dir_.string(), &f16);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(f16->weight_dtype_name(), "f16");
  ASSERT_TRUE(Model::Load(kSource.string(), &f32).ok());
  const int64_t V = f32->config().vocab_size;
  std::vector<float> a(V), b(V);
  std::unique_ptr<Session> sa, sb;
  ASSERT_TRUE(Session::Create(*f16, 1, &sa).ok());
  ASSERT_TRUE(Session::Create(*f32, 1, &sb).ok());
  ASSERT_TRUE(sa->Prefill({{3, 1, 4, 1, 5, 9, 2, 6}}, a).ok());
  ASSERT_TRUE(sb->Prefill({{3, 1, 4, 1, 5, 9, 2, 6}}, b).ok());
  const double err = RelativeError(std::vector<double>(a.begin(), a.end()),
                                   std::vector<double>(b.begin(), b.end()));
  EXPECT_GT(err, 0.0);  // the f16 weights were really used
  EXPECT_LT(err, 1e-2);
}

// A hybrid's tensors under either spelling: the hub files' (what save_pretrained writes) and the
// names transformers 5 converts them to; a missing one names both.
TEST(HybridLoadErrors, TensorSpellings) {
  const fs::path source = fs::path(SSMKIT_FIXTURES_DIR) / "models" / "granitemoehybrid-moe";
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("ssmkit_hybrid_" + std::to_string(FreshSeed() % 1000000007));
  fs::create_directories(dir);
  fs::copy_file(source / "config.json", dir / "config.json");
  Safetensors w = Safetensors::Read(source / "model.safetensors");
  const std::string moe = "model.layers.0.block_sparse_moe.";
  // The new names load.
  w.header[moe + "experts.gate_up_proj"] = w.header[moe + "input_linear.weight"];
  w.header.erase(moe + "input_linear.weight");
  w.header[moe + "router.weight"] = w.header[moe + "router.layer.weight"];
  w.header.erase(moe + "router.layer.weight");
  WriteFile(dir / "model.safetensors", w.Bytes());
  std::unique_ptr<Model> model;
  Status s = Model::Load(dir.string(), &model);
  EXPECT_TRUE(s.ok()) << s.message();
  // A missing router names both of its spellings.
  w.header.erase(moe + "router.weight");
  WriteFile(dir / "model.safetensors", w.Bytes());
  s = Model::Load(dir.string(), &model);
  EXPECT_NE(s.message().find("missing tensor '" + moe + "router.layer.weight' (or '" + moe +
                             "router.weight') (4, 32)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("a granitemoehybrid model with 4 layers"), std::string::npos)
      << s.message();
  fs::remove_all(dir);
}

// Prefill and decode reject bad arguments with a message, touching nothing.
TEST(SessionErrors, BadArguments) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Load(kSource.string(), &model).ok());
  std::unique_ptr<Session> session;
  EXPECT_FALSE(Session::Create(*model, 0, &session).ok());
  ASSERT_TRUE(Session::Create(*model, 2, &session).ok());
  const int64_t V = model->config().vocab_size;
  std::vector<float> logits(3 * V);
  const int32_t one = 1;
  Status s = session->Decode(std::span<const int32_t>(&one, 1), logits);
  EXPECT_NE(s.message().find("call Prefill first"), std::string::npos) << s.message();
  s = session->Prefill({}, logits);
  EXPECT_NE(s.message().find("expected 1 to 2 prompts"), std::string::npos) << s.message();
  s = session->Prefill({{1}, {2}, {3}}, logits);
  EXPECT_NE(s.message().find("given 3"), std::string::npos) << s.message();
  s = session->Prefill({{1}, {}}, logits);
  EXPECT_NE(s.message().find("prompt 1 is empty"), std::string::npos) << s.message();
  s = session->Prefill({{1, static_cast<int32_t>(V)}}, logits);
  EXPECT_NE(s.message().find("token 304 at position 1 outside the vocabulary [0, 304)"),
            std::string::npos)
      << s.message();
  s = session->Prefill({{1, -2}}, logits);
  EXPECT_NE(s.message().find("token -2"), std::string::npos) << s.message();
  s = session->Prefill({{1, 2}}, std::span<float>(logits).first(V - 1));
  EXPECT_NE(s.message().find("logits: expected (B, V) = (1, 304)"), std::string::npos)
      << s.message();
  ASSERT_TRUE(session->Prefill({{1, 2}, {3}}, logits).ok());
  const std::vector<int32_t> wrong = {1, 2, 3};
  s = session->Decode(wrong, logits);
  EXPECT_NE(s.message().find("expected one per sequence (2)"), std::string::npos) << s.message();
  const std::vector<int32_t> bad = {1, 999};
  s = session->Decode(bad, logits);
  EXPECT_NE(s.message().find("token 999"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ssmkit::testing

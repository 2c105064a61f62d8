// Model::FromTensors: a model over tensors in the caller's memory (what ssmkit.torch.accelerate
// binds a PyTorch model's parameters with). On the fixture checkpoints, copies of the files'
// tensors give the logits Model::Load gives, bit for bit (same weights, same code); an in-place
// change of a matrix shows in the next prefill (matrices are views); and a bad tensor map is
// refused as a bad checkpoint is, naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.hpp"
#include "core/safetensors.hpp"
#include "ssmkit/model.hpp"

namespace ssmkit::testing {
namespace {

const std::string kModels = std::string(SSMKIT_FIXTURES_DIR) + "/models/";

// Copies of a checkpoint's tensors (the caller's memory) and views of them.
struct OwnedTensors {
  std::map<std::string, std::vector<uint8_t>> bytes;
  std::map<std::string, Tensor> views;
};

OwnedTensors CopyCheckpoint(const std::string& dir) {
  SafetensorsCheckpoint checkpoint;
  const Status s = SafetensorsCheckpoint::OpenDirectory(dir, &checkpoint);
  EXPECT_TRUE(s.ok()) << s.message();
  OwnedTensors out;
  for (const auto& [name, t] : checkpoint.tensors()) {
    const Tensor source = t.view();
    const size_t n = static_cast<size_t>(source.numel()) * DTypeSize(t.dtype);
    auto& buffer = out.bytes[name];
    buffer.assign(t.data, t.data + n);
    out.views[name] = ContiguousView(buffer.data(), t.dtype, t.shape);
  }
  return out;
}

std::string ConfigText(const std::string& dir) {
  std::string text;
  EXPECT_TRUE(ReadTextFile(dir + "/config.json", &text).ok());
  return text;
}

std::vector<float> PrefillLogits(const Model& model, const std::vector<int32_t>& prompt) {
  std::unique_ptr<Session> session;
  EXPECT_TRUE(Session::Create(model, 1, &session).ok());
  const int64_t V = model.config().vocab_size, L = static_cast<int64_t>(prompt.size());
  std::vector<float> last(static_cast<size_t>(V)), all(static_cast<size_t>(L * V), NAN);
  const Status s = session->Prefill({prompt}, last, all);
  EXPECT_TRUE(s.ok()) << s.message();
  return all;
}

class FromTensors : public ::testing::TestWithParam<const char*> {};

TEST_P(FromTensors, SameLogitsAsLoadingTheFiles) {
  const std::string dir = kModels + GetParam();
  std::unique_ptr<Model> loaded, bound;
  ASSERT_TRUE(Model::Load(dir, &loaded).ok());
  OwnedTensors tensors = CopyCheckpoint(dir);
  const Status s = Model::FromTensors(ConfigText(dir), tensors.views, &bound);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(bound->config().hf_architecture(), loaded->config().hf_architecture());
  EXPECT_EQ(bound->parameter_count(), loaded->parameter_count());
  const std::vector<int32_t> prompt{3, 17, 42, 5, 99, 7};
  const std::vector<float> want = PrefillLogits(*loaded, prompt);
  const std::vector<float> got = PrefillLogits(*bound, prompt);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);

  // The matrices are not copied: scaling the embedding in place changes the next prefill.
  const std::string embedding = tensors.views.count("backbone.embeddings.weight")
                                    ? "backbone.embeddings.weight"
                                    : "model.embed_tokens.weight";
  Tensor& w = tensors.views.at(embedding);
  ASSERT_EQ(w.dtype, DType::kF32);
  for (int64_t i = 0; i < w.numel(); ++i) static_cast<float*>(w.data)[i] *= 2.0f;
  const std::vector<float> changed = PrefillLogits(*bound, prompt);
  EXPECT_NE(std::memcmp(changed.data(), want.data(), got.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FromTensors,
                         ::testing::Values("mamba1-hf", "mamba2-hf", "granitemoehybrid-moe"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(FromTensorsErrors, BadTensorsAreNamed) {
  const std::string dir = kModels + "mamba2-hf";
  const std::string config = ConfigText(dir);
  auto expect_error = [&](const std::map<std::string, Tensor>& views, const std::string& what) {
    std::unique_ptr<Model> model;
    const Status s = Model::FromTensors(config, views, &model);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    EXPECT_EQ(model, nullptr);
  };
  OwnedTensors good = CopyCheckpoint(dir);
  const std::string name = "backbone.layers.0.mixer.out_proj.weight";

  auto missing = good.views;
  missing.erase(name);
  expect_error(missing, name);

  auto extra = good.views;
  extra["backbone.layers.0.mixer.unknown"] = good.views.at(name);
  expect_error(extra, "backbone.layers.0.mixer.unknown");

  auto wrong_shape = good.views;
  Tensor& t = wrong_shape.at(name);
  t = ContiguousView(t.data, t.dtype, {t.shape[0], t.shape[1] - 1});
  expect_error(wrong_shape, name);

  auto ints = good.views;
  ints.at(name).dtype = DType::kI32;
  expect_error(ints, "tensors[" + name + "]: dtype i32, expected f32, bf16 or f16");

  auto strided = good.views;
  std::swap(strided.at(name).strides[0], strided.at(name).strides[1]);
  expect_error(strided, "tensors[" + name + "]: expected contiguous");

  std::unique_ptr<Model> model;
  const Status s = Model::FromTensors("{not json", good.views, &model);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("config_json"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ssmkit::testing

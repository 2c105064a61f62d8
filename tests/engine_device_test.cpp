// The engine's device choice on any machine (the GPU results are tests/gpu/engine_gpu_test.cpp):
// a CUDA session without the backend or a device is a clear Unsupported, an unknown device an
// InvalidArgument; and DecodeGreedy, which a CUDA session answers from the GPU's argmax, is on
// the CPU the Sampler's greedy choice over Decode's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "random_model_config.hpp"
#include "ssmkit/cuda.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/sampler.hpp"

namespace ssmkit::testing {
namespace {

std::unique_ptr<Model> RandomModel(ModelArch arch) {
  const ModelConfig c = arch == ModelArch::kMamba1
                            ? RandomModelConfig(arch, {32, 2, 61, 8})
                            : RandomModelConfig(arch, {32, 2, 61, 16, 4, 2, 8});
  std::unique_ptr<Model> model;
  EXPECT_TRUE(Model::Random(c, DType::kBF16, 5, &model).ok());
  return model;
}

TEST(EngineDevice, CudaWithoutAGpuIsUnsupported) {
  if (CudaDeviceCount() > 0)
    GTEST_SKIP() << "a GPU is present: tests/gpu/engine_gpu_test covers it";
  const auto model = RandomModel(ModelArch::kMamba2);
  ASSERT_TRUE(model);
  SessionOptions options;
  options.device = Device::kCuda;
  std::unique_ptr<Session> session;
  const Status s = Session::Create(*model, options, &session);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  const std::string expected = CudaBuilt() ? "no usable CUDA device" : "no CUDA backend";
  EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  EXPECT_FALSE(session);
}

TEST(EngineDevice, UnknownDeviceIsInvalid) {
  const auto model = RandomModel(ModelArch::kMamba1);
  ASSERT_TRUE(model);
  SessionOptions options;
  options.device = static_cast<Device>(7);
  std::unique_ptr<Session> session;
  const Status s = Session::Create(*model, options, &session);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find("device"), std::string::npos) << s.message();
}

TEST(EngineDevice, DecodeGreedyIsTheSamplersChoice) {
  for (ModelArch arch : {ModelArch::kMamba1, ModelArch::kMamba2}) {
    SCOPED_TRACE(ModelArchName(arch));
    const auto model = RandomModel(arch);
    ASSERT_TRUE(model);
    constexpr int64_t B = 3;
    std::unique_ptr<Session> greedy, reference;
    ASSERT_TRUE(Session::Create(*model, B, &greedy).ok());
    ASSERT_TRUE(Session::Create(*model, B, &reference).ok());
    const int64_t V = greedy->vocab_size();
    const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4}, {5, 6}};
    std::vector<float> logits(static_cast<size_t>(B * V));
    ASSERT_TRUE(greedy->Prefill(prompts, logits).ok());
    ASSERT_TRUE(reference->Prefill(prompts, logits).ok());
    Sampler sampler;
    ASSERT_TRUE(Sampler::Create({}, V, &sampler).ok());
    std::vector<int32_t> ids = {7, 8, 9}, next(B), expected(B);
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(greedy->DecodeGreedy(ids, next).ok());
      ASSERT_TRUE(reference->Decode(ids, logits).ok());
      for (int64_t b = 0; b < B; ++b) {
        expected[b] = sampler.Sample(std::span<const float>(logits).subspan(b * V, V));
      }
      EXPECT_EQ(next, expected) << "step " << step;
      ids = next;
    }
    std::vector<int32_t> short_next(B - 1);
    EXPECT_EQ(greedy->DecodeGreedy(ids, short_next).code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ssmkit::testing

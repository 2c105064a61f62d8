// The kernel-variant switch (src/cuda/variant.hpp): defaults, names, the '!' requirement and
// the error for a name the op does not know. Host code only: runs without a GPU, in CI.
#include "gpu_test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr const char* kNames[] = {"original", "fast"};
constexpr cuda::OpVariants kOp{"test_op", "SSMKIT_CUDA_VARIANT_TEST", kNames, 2, 1};

TEST(KernelVariant, UnsetOrEmptyPicksTheDefault) {
  unsetenv(kOp.env);
  cuda::Variant v;
  ASSERT_TRUE(cuda::PickVariant(kOp, &v).ok());
  EXPECT_EQ(v.index, 1);
  EXPECT_FALSE(v.required);
  ScopedVariant empty(kOp.env, "");
  ASSERT_TRUE(cuda::PickVariant(kOp, &v).ok());
  EXPECT_EQ(v.index, 1);
}

TEST(KernelVariant, NamesPickTheirIndexAndBangRequires) {
  cuda::Variant v;
  {
    ScopedVariant set(kOp.env, "original");
    ASSERT_TRUE(cuda::PickVariant(kOp, &v).ok());
    EXPECT_EQ(v.index, 0);
    EXPECT_FALSE(v.required);
  }
  ScopedVariant set(kOp.env, "fast!");
  ASSERT_TRUE(cuda::PickVariant(kOp, &v).ok());
  EXPECT_EQ(v.index, 1);
  EXPECT_TRUE(v.required);
  const Status s = cuda::VariantDoesNotApply(kOp, v.index);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("SSMKIT_CUDA_VARIANT_TEST=fast!"), std::string::npos) << s.message();
}

TEST(KernelVariant, UnknownNameIsAnErrorNamingTheChoices) {
  for (const char* bad : {"fastest", "!", "fast!!", "Fast"}) {
    ScopedVariant set(kOp.env, bad);
    cuda::Variant v;
    const Status s = cuda::PickVariant(kOp, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("test_op: SSMKIT_CUDA_VARIANT_TEST: expected one of original, fast"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(std::string("given '") + bad + "'"), std::string::npos)
        << s.message();
  }
}

// Every op's list: a default inside the list, names unique.
TEST(KernelVariant, OpListsAreWellFormed) {
  for (const cuda::OpVariants* op :
       {&cuda::kScanVariants, &cuda::kScanBackwardVariants, &cuda::kSsdVariants,
        &cuda::kConv1dVariants, &cuda::kConv1dBackwardVariants}) {
    SCOPED_TRACE(op->env);
    EXPECT_GE(op->count, 1);
    EXPECT_GE(op->default_index, 0);
    EXPECT_LT(op->default_index, op->count);
    EXPECT_STREQ(op->names[0], "original");
    for (int i = 0; i < op->count; ++i)
      for (int j = i + 1; j < op->count; ++j) EXPECT_STRNE(op->names[i], op->names[j]);
  }
}

}  // namespace
}  // namespace ssmkit::testing

// Bad input to LinearForward and LinearBackward: one test per rule of src/ops/linear.cpp. Each must
// return kInvalidArgument with a message naming the argument and the expected and given values, and
// leave out untouched.
#include <cstring>
#include <string>
#include <vector>

#include "ssmkit/linear.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kT = 3, kK = 5, kM = 4;

class LinearErrors : public ::testing::Test {
 protected:
  LinearErrors()
      : x_({kT, kK}, DType::kF32),
        w_({kM, kK}, DType::kBF16),
        bias_({kM}, DType::kF32),
        out_({kT, kM}, DType::kF32) {
    Rng rng(FreshSeed());
    for (HostTensor* t : {&x_, &w_, &bias_}) t->Fill(rng.NormalVec(t->numel()));
    std::memset(out_.data(), 0xA5, out_.bytes().size());
    before_ = out_.bytes();
    in_ = {x_.view(), w_.view(), bias_.view()};
    out_view_ = out_.view();
  }

  // Runs the op; expects an invalid-argument status whose message contains every fragment,
  // and out unchanged.
  void ExpectError(std::initializer_list<const char*> fragments) {
    const Status s = LinearForward(in_, out_view_);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    for (const char* f : fragments)
      EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
    EXPECT_EQ(out_.bytes(), before_) << "out written on error";
  }

  HostTensor x_, w_, bias_, out_;
  std::vector<uint8_t> before_;
  LinearInputs in_;
  Tensor out_view_;
};

TEST_F(LinearErrors, ValidCallSucceeds) { EXPECT_TRUE(LinearForward(in_, out_view_).ok()); }

TEST_F(LinearErrors, NullWeight) {
  in_.weight = Tensor{};
  ExpectError({"linear: weight", "null"});
}

TEST_F(LinearErrors, WeightRank) {
  in_.weight.rank = 3;
  in_.weight.shape[2] = 1;
  in_.weight.strides[2] = 1;
  ExpectError({"weight", "rank 2", "given rank 3"});
}

TEST_F(LinearErrors, WeightDtype) {
  in_.weight.dtype = DType::kI32;
  ExpectError({"weight", "dtype f32 or bf16 or f16", "i32"});
}

// A quantized weight: each row a whole number of blocks.
TEST_F(LinearErrors, QuantizedWeightKNotAWholeBlock) {
  std::vector<uint8_t> bytes(kM * DTypeBlockBytes(DType::kQ4_K), 0);
  in_.weight = Tensor::Contiguous(bytes.data(), DType::kQ4_K, {kM, kK});
  ExpectError({"linear: weight", "K a multiple of q4_k's block of 256 elements", "K = 5"});
}

// The same call with K = 32 (one Q8_0 block per row) is valid: all-zero blocks give the bias.
TEST_F(LinearErrors, QuantizedWeightSucceeds) {
  constexpr int64_t kBlockK = 32;
  std::vector<uint8_t> bytes(kM * DTypeBlockBytes(DType::kQ8_0), 0);
  std::vector<float> x(kT * kBlockK, 1.0f);
  in_.weight = Tensor::Contiguous(bytes.data(), DType::kQ8_0, {kM, kBlockK});
  in_.x = Tensor::Contiguous(x.data(), DType::kF32, {kT, kBlockK});
  ASSERT_TRUE(LinearForward(in_, out_view_).ok());
  const std::vector<double> out = out_.ToDouble(), bias = bias_.ToDouble();
  for (int64_t i = 0; i < kT * kM; ++i) EXPECT_EQ(out[i], bias[i % kM]) << i;
}

TEST_F(LinearErrors, WeightNotContiguous) {
  in_.weight.shape[1] = 2;  // a column slice: row stride 5, width 2
  in_.x.shape[1] = 2;
  ExpectError({"weight", "contiguous"});
}

TEST_F(LinearErrors, EmptyWeight) {
  in_.weight.shape[0] = 0;
  ExpectError({"weight", "M >= 1"});
}

TEST_F(LinearErrors, NullX) {
  in_.x = Tensor{};
  ExpectError({"x", "null"});
}

TEST_F(LinearErrors, XFeatures) {
  in_.x.shape[1] = kK - 1;
  ExpectError({"x", "(T, K) = (3, 5)", "(3, 4)"});
}

TEST_F(LinearErrors, XDtype) {
  in_.x.dtype = DType::kBF16;
  ExpectError({"x", "dtype f32", "bf16"});
}

TEST_F(LinearErrors, XStrides) {
  in_.x.strides = {2, 2};
  ExpectError({"x", "strides", "(2, 2)"});
}

TEST_F(LinearErrors, XOnCuda) {
  in_.x.device = Device::kCuda;
  ExpectError({"x", "CPU"});
}

// Every tensor on the device: cuBLAS multiplies x in the weight's 16-bit dtype (the CPU's f32
// x is an error there; a valid CUDA call is tests/device_dispatch_test.cpp's).
TEST_F(LinearErrors, OnCudaXIsInTheWeightsDtype) {
  for (Tensor* t : {&in_.x, &in_.weight, &in_.bias, &out_view_}) t->device = Device::kCuda;
  ExpectError({"x", "dtype bf16", "f32"});
}

// An f32 (or quantized) weight on the device: a valid request the GPU does not serve.
TEST_F(LinearErrors, OnCudaAnF32WeightIsUnsupported) {
  for (Tensor* t : {&in_.x, &in_.weight, &in_.bias, &out_view_}) t->device = Device::kCuda;
  in_.weight.dtype = DType::kF32;
  const Status s = LinearForward(in_, out_view_);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("CPU only"), std::string::npos) << s.message();
  EXPECT_EQ(out_.bytes(), before_) << "out written on error";
}

TEST_F(LinearErrors, OnCudaOutIsF32OrTheWeightsDtype) {
  for (Tensor* t : {&in_.x, &in_.weight, &in_.bias, &out_view_}) t->device = Device::kCuda;
  in_.x.dtype = DType::kBF16;
  out_view_.dtype = DType::kF16;
  ExpectError({"out", "f32", "bf16", "f16"});
}

TEST_F(LinearErrors, BiasShape) {
  in_.bias.shape[0] = kM + 1;
  ExpectError({"bias", "(M) = (4,)", "(5,)"});
}

TEST_F(LinearErrors, BiasDtype) {
  in_.bias.dtype = DType::kBF16;
  ExpectError({"bias", "dtype f32"});
}

TEST_F(LinearErrors, NullOut) {
  out_view_ = Tensor{};
  ExpectError({"out", "null"});
}

TEST_F(LinearErrors, OutShape) {
  out_view_.shape[1] = kM - 1;
  ExpectError({"out", "(T, M) = (3, 4)", "(3, 3)"});
}

TEST_F(LinearErrors, OutOverlapsX) {
  in_.x = out_view_;  // out's (3, 4) buffer read as x (3, 3) with row stride 4
  in_.x.shape[1] = kM - 1;
  in_.weight.shape[1] = kM - 1;  // keep shapes consistent: only the overlap is wrong
  in_.weight.strides[0] = kM - 1;
  ExpectError({"out", "overlapping"});
}

// LinearBackward: its own rules (f32 weight, dout, the gradients' shapes, dbias only with a
// bias, no gradient overlapping an input or another gradient); gradients untouched on error.
class LinearBackwardErrors : public ::testing::Test {
 protected:
  LinearBackwardErrors()
      : x_({kT, kK}, DType::kF32),
        w_({kM, kK}, DType::kF32),
        bias_({kM}, DType::kF32),
        dout_({kT, kM}, DType::kF32),
        dx_({kT, kK}, DType::kF32),
        dw_({kM, kK}, DType::kF32),
        db_({kM}, DType::kF32) {
    Rng rng(FreshSeed());
    for (HostTensor* t : {&x_, &w_, &bias_, &dout_}) t->Fill(rng.NormalVec(t->numel()));
    for (HostTensor* t : {&dx_, &dw_, &db_}) std::memset(t->data(), 0xA5, t->bytes().size());
    in_ = {x_.view(), w_.view(), bias_.view()};
    dout_view_ = dout_.view();
    grads_ = {dx_.view(), dw_.view(), db_.view()};
  }

  void ExpectError(std::initializer_list<const char*> fragments) {
    const std::vector<uint8_t> dx = dx_.bytes(), dw = dw_.bytes(), db = db_.bytes();
    const Status s = LinearBackward(in_, dout_view_, grads_);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    for (const char* f : fragments)
      EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
    EXPECT_EQ(dx_.bytes(), dx) << "dx written on error";
    EXPECT_EQ(dw_.bytes(), dw) << "dweight written on error";
    EXPECT_EQ(db_.bytes(), db) << "dbias written on error";
  }

  HostTensor x_, w_, bias_, dout_, dx_, dw_, db_;
  LinearInputs in_;
  Tensor dout_view_;
  LinearGrads grads_;
};

TEST_F(LinearBackwardErrors, ValidCallSucceeds) {
  EXPECT_TRUE(LinearBackward(in_, dout_view_, grads_).ok());
}

TEST_F(LinearBackwardErrors, WeightMustBeF32) {
  HostTensor w16({kM, kK}, DType::kBF16);
  in_.weight = w16.view();
  ExpectError({"linear: weight", "dtype f32", "bf16"});
}

TEST_F(LinearBackwardErrors, QuantizedWeight) {
  std::vector<uint8_t> bytes(kM * DTypeBlockBytes(DType::kQ4_0), 0);
  in_.weight = Tensor::Contiguous(bytes.data(), DType::kQ4_0, {kM, kK});
  ExpectError({"linear: weight", "dtype f32 (no gradient of a quantized weight", "given q4_0"});
}

TEST_F(LinearBackwardErrors, NullDout) {
  dout_view_ = Tensor{};
  ExpectError({"dout", "null"});
}

TEST_F(LinearBackwardErrors, DoutShape) {
  dout_view_.shape[1] = kM + 1;
  ExpectError({"dout", "(T, M) = (3, 4)", "(3, 5)"});
}

TEST_F(LinearBackwardErrors, DxShape) {
  grads_.dx.shape[0] = kT + 1;
  ExpectError({"dx", "(T, K) = (3, 5)", "(4, 5)"});
}

TEST_F(LinearBackwardErrors, DweightDtype) {
  grads_.dweight.dtype = DType::kBF16;
  ExpectError({"dweight", "dtype f32", "bf16"});
}

TEST_F(LinearBackwardErrors, DbiasWithoutBias) {
  in_.bias = Tensor{};
  ExpectError({"dbias", "since bias is absent"});
}

TEST_F(LinearBackwardErrors, DxOverlapsDout) {
  grads_.dx = dout_view_;  // dout's (3, 4) buffer as dx (3, 4): K = 4 for this test
  in_.x.shape[1] = kM;
  in_.weight.shape[1] = kM;
  in_.weight.strides[0] = kM;
  grads_.dweight.shape[1] = kM;
  grads_.dweight.strides[0] = kM;
  ExpectError({"dx", "overlapping dout"});
}

TEST_F(LinearBackwardErrors, DweightOverlapsDx) {
  grads_.dweight = grads_.dx;  // (3, 5) buffer as dweight (4, 5) would overrun: use M = T
  grads_.dweight.shape[0] = kT;
  in_.weight.shape[0] = kT;
  dout_view_.shape[1] = kT;
  dout_view_.strides[0] = kT;
  in_.bias = Tensor{};
  grads_.dbias = Tensor{};
  ExpectError({"dweight", "overlapping dx"});
}

}  // namespace
}  // namespace ssmkit::testing

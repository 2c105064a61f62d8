// Bad input to the RMS norms: one test per rule of src/ops/norm.cpp and src/ops/check.cpp.
// Each must return kInvalidArgument with a message naming the argument, the expected and the
// given value, and leave every output untouched.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ssmkit/norm.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kM = 4, kE = 8;

class NormErrors : public ::testing::Test {
 protected:
  NormErrors() : rng_(FreshSeed()) {
    for (HostTensor* t : {&x_, &z_, &residual_, &dout_, &dresidual_out_})
      *t = HostTensor({kM, kE}, DType::kF32);
    for (HostTensor* t : {&weight_, &bias_}) *t = HostTensor({kE}, DType::kF32);
    for (HostTensor* t : {&x_, &z_, &residual_, &dout_, &dresidual_out_, &weight_, &bias_}) {
      t->Fill(rng_.NormalVec(t->numel()));
    }
    for (HostTensor* t : {&out_, &residual_out_, &dx_, &dz_, &dresidual_})
      *t = HostTensor({kM, kE}, DType::kF32);
    for (HostTensor* t : {&dweight_, &dbias_}) *t = HostTensor({kE}, DType::kF32);
    for (HostTensor* t : Outputs()) std::memset(t->data(), 0xA5, t->bytes().size());
    in_ = {x_.view(), weight_.view(), bias_.view(), z_.view()};
    add_in_ = {x_.view(), residual_.view(), weight_.view(), bias_.view()};
    grads_ = {dx_.view(), dweight_.view(), dbias_.view(), dz_.view()};
    add_grads_ = {dx_.view(), dresidual_.view(), dweight_.view(), dbias_.view()};
    out_view_ = out_.view();
    residual_out_view_ = residual_out_.view();
    dout_view_ = dout_.view();
    dresidual_out_view_ = dresidual_out_.view();
  }

  std::vector<HostTensor*> Outputs() {
    return {&out_, &residual_out_, &dx_, &dz_, &dresidual_, &dweight_, &dbias_};
  }

  void ExpectError(const Status& s, std::initializer_list<const char*> pieces) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    for (const char* piece : pieces)
      EXPECT_NE(s.message().find(piece), std::string::npos) << s.message();
    for (const HostTensor* t : Outputs()) {
      for (uint8_t byte : t->bytes()) ASSERT_EQ(byte, 0xA5) << "an output was written on error";
    }
  }
  void ExpectForwardError(std::initializer_list<const char*> pieces) {
    ExpectError(RmsNormForward(in_, out_view_, options_), pieces);
  }
  void ExpectBackwardError(std::initializer_list<const char*> pieces) {
    ExpectError(RmsNormBackward(in_, dout_view_, grads_, options_), pieces);
  }
  void ExpectAddForwardError(std::initializer_list<const char*> pieces) {
    ExpectError(AddRmsNormForward(add_in_, out_view_, residual_out_view_, add_options_), pieces);
  }
  void ExpectAddBackwardError(std::initializer_list<const char*> pieces) {
    ExpectError(
        AddRmsNormBackward(add_in_, dout_view_, dresidual_out_view_, add_grads_, add_options_),
        pieces);
  }

  Rng rng_;
  HostTensor x_, z_, residual_, dout_, dresidual_out_, weight_, bias_;
  HostTensor out_, residual_out_, dx_, dz_, dresidual_, dweight_, dbias_;
  RmsNormInputs in_;
  AddRmsNormInputs add_in_;
  RmsNormGrads grads_;
  AddRmsNormGrads add_grads_;
  RmsNormOptions options_;
  AddRmsNormOptions add_options_;
  Tensor out_view_, residual_out_view_, dout_view_, dresidual_out_view_;
};

// The fixture's calls are valid: every error below comes from the one thing each test changes.
TEST_F(NormErrors, ValidCallsSucceed) {
  options_.group_size = 4;
  Status s = RmsNormForward(in_, out_view_, options_);
  EXPECT_TRUE(s.ok()) << s.message();
  s = RmsNormBackward(in_, dout_view_, grads_, options_);
  EXPECT_TRUE(s.ok()) << s.message();
  s = AddRmsNormForward(add_in_, out_view_, residual_out_view_, add_options_);
  EXPECT_TRUE(s.ok()) << s.message();
  s = AddRmsNormBackward(add_in_, dout_view_, dresidual_out_view_, add_grads_, add_options_);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ------------------------------------------------------------------ options

TEST_F(NormErrors, EpsZero) {
  options_.eps = 0.0f;
  ExpectForwardError({"rmsnorm: options.eps:", "expected a finite value > 0", "given 0"});
}

TEST_F(NormErrors, EpsNegative) {
  options_.eps = -1e-5f;
  ExpectBackwardError({"rmsnorm: options.eps:", "expected a finite value > 0", "given -1e-05"});
}

TEST_F(NormErrors, EpsNaN) {
  add_options_.eps = std::numeric_limits<float>::quiet_NaN();
  ExpectAddForwardError({"add_rmsnorm: options.eps:", "expected a finite value > 0", "given nan"});
}

TEST_F(NormErrors, EpsInfinite) {
  add_options_.eps = std::numeric_limits<float>::infinity();
  ExpectAddBackwardError({"add_rmsnorm: options.eps:", "given inf"});
}

TEST_F(NormErrors, GroupSizeNotDividingE) {
  options_.group_size = 3;
  ExpectForwardError({"rmsnorm: options.group_size:",
                      "expected 0 (one group of E) or a divisor of E = 8", "given 3"});
}

TEST_F(NormErrors, GroupSizeNegative) {
  options_.group_size = -2;
  ExpectBackwardError({"rmsnorm: options.group_size:", "a divisor of E = 8", "given -2"});
}

TEST_F(NormErrors, GroupSizeLargerThanE) {
  options_.group_size = 16;
  ExpectForwardError({"rmsnorm: options.group_size:", "given 16"});
}

// ------------------------------------------------------------------ x

TEST_F(NormErrors, NullX) {
  in_.x.data = nullptr;
  ExpectForwardError({"rmsnorm: x:", "expected a tensor (M, E)", "given null"});
}

TEST_F(NormErrors, XRankWrong) {
  add_in_.x.rank = 3;
  ExpectAddForwardError({"add_rmsnorm: x:", "expected rank 2", "given rank 3"});
}

TEST_F(NormErrors, ZeroRows) {
  in_.x.shape[0] = 0;
  ExpectForwardError({"rmsnorm: x:", "expected rows M >= 1", "given M = 0"});
}

TEST_F(NormErrors, ZeroFeatures) {
  add_in_.x.shape[1] = 0;
  ExpectAddBackwardError({"add_rmsnorm: x:", "expected features E >= 1", "given E = 0"});
}

TEST_F(NormErrors, XDtype) {
  in_.x.dtype = DType::kF16;
  ExpectForwardError({"rmsnorm: x:", "expected dtype f32 or bf16", "given f16"});
}

TEST_F(NormErrors, XFeaturesNotContiguous) {
  in_.x.strides[1] = 2;
  ExpectBackwardError({"rmsnorm: x:", "expected stride 1 on the last dimension", "given stride 2"});
}

TEST_F(NormErrors, XNegativeRowStride) {
  add_in_.x.strides[0] = -8;
  ExpectAddForwardError(
      {"add_rmsnorm: x:", "expected non-negative strides", "given stride -8 on dimension 0"});
}

TEST_F(NormErrors, XOnCuda) {
  in_.x.device = Device::kCuda;
  ExpectForwardError({"rmsnorm: x:", "expected a CPU tensor", "given a CUDA tensor"});
}

// ------------------------------------------------------------------ weight, bias, z, residual

TEST_F(NormErrors, NullWeight) {
  in_.weight.data = nullptr;
  ExpectForwardError({"rmsnorm: weight:", "expected a tensor of shape (E) = (8,)", "given null"});
}

TEST_F(NormErrors, WeightShape) {
  add_in_.weight.shape[0] = 7;
  ExpectAddForwardError({"add_rmsnorm: weight:", "expected shape (E) = (8,)", "given (7,)"});
}

TEST_F(NormErrors, WeightDtype) {
  in_.weight.dtype = DType::kBF16;
  ExpectBackwardError({"rmsnorm: weight:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, BiasShape) {
  in_.bias.shape[0] = 4;
  ExpectForwardError({"rmsnorm: bias:", "expected shape (E) = (8,)", "given (4,)"});
}

TEST_F(NormErrors, BiasDtype) {
  add_in_.bias.dtype = DType::kI32;
  ExpectAddBackwardError({"add_rmsnorm: bias:", "expected dtype f32", "given i32"});
}

TEST_F(NormErrors, ZShape) {
  in_.z.shape[1] = 9;
  ExpectForwardError({"rmsnorm: z:", "expected shape (M, E) = (4, 8)", "given (4, 9)"});
}

TEST_F(NormErrors, ZDtype) {
  in_.z.dtype = DType::kI64;
  ExpectBackwardError({"rmsnorm: z:", "expected dtype f32 or bf16", "given i64"});
}

TEST_F(NormErrors, ResidualShape) {
  add_in_.residual.shape[0] = 5;
  ExpectAddForwardError(
      {"add_rmsnorm: residual:", "expected shape (M, E) = (4, 8)", "given (5, 8)"});
}

TEST_F(NormErrors, ResidualDtype) {
  add_in_.residual.dtype = DType::kBF16;
  ExpectAddForwardError({"add_rmsnorm: residual:", "expected dtype f32", "given bf16"});
}

// ------------------------------------------------------------------ forward outputs

TEST_F(NormErrors, NullOut) {
  out_view_.data = nullptr;
  ExpectForwardError({"rmsnorm: out:", "expected a tensor of shape (M, E) = (4, 8)", "given null"});
}

TEST_F(NormErrors, OutShape) {
  out_view_.shape[0] = 2;
  ExpectAddForwardError({"add_rmsnorm: out:", "expected shape (M, E) = (4, 8)", "given (2, 8)"});
}

TEST_F(NormErrors, OutDtypeNotX) {
  out_view_.dtype = DType::kBF16;
  ExpectForwardError({"rmsnorm: out:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, OutRowsOverlap) {
  out_view_.strides[0] = 4;
  ExpectForwardError({"rmsnorm: out:", "expected row stride >= E = 8 (rows must not overlap)",
                      "given row stride 4"});
}

TEST_F(NormErrors, NullResidualOut) {
  residual_out_view_.data = nullptr;
  ExpectAddForwardError(
      {"add_rmsnorm: residual_out:", "expected a tensor of shape (M, E)", "given null"});
}

TEST_F(NormErrors, ResidualOutDtype) {
  residual_out_view_.dtype = DType::kBF16;
  ExpectAddForwardError({"add_rmsnorm: residual_out:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, ResidualOutRowsOverlap) {
  residual_out_view_.strides[0] = 0;
  ExpectAddForwardError(
      {"add_rmsnorm: residual_out:", "expected row stride >= E = 8", "given row stride 0"});
}

// ------------------------------------------------------------------ backward inputs and grads

TEST_F(NormErrors, NullDout) {
  dout_view_.data = nullptr;
  ExpectBackwardError(
      {"rmsnorm: dout:", "expected a tensor of shape (M, E) = (4, 8)", "given null"});
}

TEST_F(NormErrors, DoutDtypeNotX) {
  dout_view_.dtype = DType::kBF16;
  ExpectAddBackwardError({"add_rmsnorm: dout:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, DoutShape) {
  dout_view_.shape[1] = 16;
  ExpectBackwardError({"rmsnorm: dout:", "expected shape (M, E) = (4, 8)", "given (4, 16)"});
}

TEST_F(NormErrors, DresidualOutShape) {
  dresidual_out_view_.shape[0] = 1;
  ExpectAddBackwardError(
      {"add_rmsnorm: dresidual_out:", "expected shape (M, E) = (4, 8)", "given (1, 8)"});
}

TEST_F(NormErrors, DresidualOutDtype) {
  dresidual_out_view_.dtype = DType::kBF16;
  ExpectAddBackwardError({"add_rmsnorm: dresidual_out:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, DxShape) {
  grads_.dx.shape[0] = 3;
  ExpectBackwardError({"rmsnorm: dx:", "expected shape (M, E) = (4, 8)", "given (3, 8)"});
}

TEST_F(NormErrors, DxDtypeNotX) {
  add_grads_.dx.dtype = DType::kBF16;
  ExpectAddBackwardError({"add_rmsnorm: dx:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, DxRowsOverlap) {
  grads_.dx.strides[0] = 7;
  ExpectBackwardError({"rmsnorm: dx:", "expected row stride >= E = 8", "given row stride 7"});
}

TEST_F(NormErrors, DweightShape) {
  grads_.dweight.shape[0] = 9;
  ExpectBackwardError({"rmsnorm: dweight:", "expected shape (E) = (8,)", "given (9,)"});
}

TEST_F(NormErrors, DweightDtype) {
  add_grads_.dweight.dtype = DType::kBF16;
  ExpectAddBackwardError({"add_rmsnorm: dweight:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, DbiasWithoutBias) {
  in_.bias = Tensor{};
  ExpectBackwardError({"rmsnorm: dbias:", "expected no tensor, since bias is absent",
                       "given a tensor of shape (8,)"});
}

TEST_F(NormErrors, DbiasShape) {
  add_grads_.dbias.shape[0] = 1;
  ExpectAddBackwardError({"add_rmsnorm: dbias:", "expected shape (E) = (8,)", "given (1,)"});
}

TEST_F(NormErrors, DzWithoutZ) {
  in_.z = Tensor{};
  ExpectBackwardError(
      {"rmsnorm: dz:", "expected no tensor, since z is absent", "given a tensor of shape (4, 8)"});
}

TEST_F(NormErrors, DzDtypeNotZ) {
  grads_.dz.dtype = DType::kBF16;
  ExpectBackwardError({"rmsnorm: dz:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, DresidualWithoutResidual) {
  add_in_.residual = Tensor{};
  ExpectAddBackwardError({"add_rmsnorm: dresidual:", "expected no tensor, since residual is absent",
                          "given a tensor of shape (4, 8)"});
}

TEST_F(NormErrors, DresidualDtype) {
  add_grads_.dresidual.dtype = DType::kBF16;
  ExpectAddBackwardError({"add_rmsnorm: dresidual:", "expected dtype f32", "given bf16"});
}

TEST_F(NormErrors, DresidualRowsOverlap) {
  add_grads_.dresidual.strides[0] = 1;
  ExpectAddBackwardError(
      {"add_rmsnorm: dresidual:", "expected row stride >= E = 8", "given row stride 1"});
}

}  // namespace
}  // namespace ssmkit::testing

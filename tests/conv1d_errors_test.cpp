// Bad input to causal_conv1d (forward, backward) and causal_conv1d_update: one test per rule
// of src/ops/conv1d.cpp and src/ops/check.cpp. Each must return kInvalidArgument with a message
// naming the argument, the expected and the given value, and leave every output (conv_state
// included, which the update writes in place) untouched.
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ssmkit/conv1d.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kB = 2, kD = 3, kL = 5, kK = 4, kT = 2;

class Conv1dErrors : public ::testing::Test {
 protected:
  Conv1dErrors() : rng_(FreshSeed()) {
    for (HostTensor* t : {&x_, &out_, &dout_, &dx_}) *t = HostTensor({kB, kD, kL}, DType::kF32);
    for (HostTensor* t : {&h0_, &final_, &dfinal_, &dh0_})
      *t = HostTensor({kB, kD, kK - 1}, DType::kF32);
    for (HostTensor* t : {&weight_, &dweight_}) *t = HostTensor({kD, kK}, DType::kF32);
    for (HostTensor* t : {&bias_, &dbias_}) *t = HostTensor({kD}, DType::kF32);
    ux_ = HostTensor({kB, kD}, DType::kF32);
    uout_ = HostTensor({kB, kD}, DType::kF32);
    state_ = HostTensor({kB, kD, kK - 1}, DType::kF32);
    for (HostTensor* t : {&x_, &dout_, &h0_, &dfinal_, &weight_, &bias_, &ux_, &state_}) {
      t->Fill(rng_.NormalVec(t->numel()));
    }
    for (HostTensor* t : Outputs()) {
      if (t != &state_) std::memset(t->data(), 0xA5, t->bytes().size());
    }
    state_before_ = state_.bytes();
    in_ = {x_.view(), weight_.view(), bias_.view(), h0_.view(), Conv1dActivation::kSilu};
    grads_ = {dx_.view(), dweight_.view(), dbias_.view(), dh0_.view()};
    update_in_ = {ux_.view(), weight_.view(), bias_.view(), Conv1dActivation::kSilu};
    out_view_ = out_.view();
    final_view_ = final_.view();
    dout_view_ = dout_.view();
    dfinal_view_ = dfinal_.view();
    state_view_ = state_.view();
    uout_view_ = uout_.view();
  }

  std::vector<HostTensor*> Outputs() {
    return {&out_, &final_, &dx_, &dweight_, &dbias_, &dh0_, &uout_, &state_};
  }

  void ExpectError(const Status& s, std::initializer_list<const char*> pieces) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    for (const char* piece : pieces)
      EXPECT_NE(s.message().find(piece), std::string::npos) << s.message();
    for (HostTensor* t : Outputs()) {
      if (t == &state_) {
        ASSERT_TRUE(state_.bytes() == state_before_) << "conv_state was written on error";
        continue;
      }
      for (uint8_t byte : t->bytes()) ASSERT_EQ(byte, 0xA5) << "an output was written on error";
    }
  }
  void ExpectForwardError(std::initializer_list<const char*> pieces) {
    ExpectError(CausalConv1dForward(in_, out_view_, final_view_), pieces);
  }
  void ExpectBackwardError(std::initializer_list<const char*> pieces) {
    ExpectError(CausalConv1dBackward(in_, dout_view_, dfinal_view_, grads_), pieces);
  }
  void ExpectUpdateError(std::initializer_list<const char*> pieces) {
    ExpectError(CausalConv1dUpdate(update_in_, state_view_, uout_view_), pieces);
  }

  Rng rng_;
  HostTensor x_, out_, dout_, dx_, h0_, final_, dfinal_, dh0_, weight_, dweight_, bias_, dbias_;
  HostTensor ux_, uout_, state_;
  std::vector<uint8_t> state_before_;
  CausalConv1dInputs in_;
  CausalConv1dGrads grads_;
  CausalConv1dUpdateInputs update_in_;
  Tensor out_view_, final_view_, dout_view_, dfinal_view_, state_view_, uout_view_;
};

// The fixture's calls are valid: every error below comes from the one thing each test changes.
// (Run on copies, so the fixture's outputs stay poisoned for the others.)
TEST_F(Conv1dErrors, ValidCallsSucceed) {
  HostTensor out({kB, kD, kL}, DType::kF32), fin({kB, kD, kK - 1}, DType::kF32);
  HostTensor dx({kB, kD, kL}, DType::kF32), dw({kD, kK}, DType::kF32), db({kD}, DType::kF32);
  HostTensor dh0({kB, kD, kK - 1}, DType::kF32), uout({kB, kD}, DType::kF32);
  Status s = CausalConv1dForward(in_, out.view(), fin.view());
  EXPECT_TRUE(s.ok()) << s.message();
  s = CausalConv1dBackward(in_, dout_view_, dfinal_view_,
                           {dx.view(), dw.view(), db.view(), dh0.view()});
  EXPECT_TRUE(s.ok()) << s.message();
  s = CausalConv1dUpdate(update_in_, state_view_, uout.view());
  EXPECT_TRUE(s.ok()) << s.message();
}

// ------------------------------------------------------------------ x

TEST_F(Conv1dErrors, NullX) {
  in_.x.data = nullptr;
  ExpectForwardError({"causal_conv1d: x:", "expected a tensor (B, D, L)", "given null"});
}

TEST_F(Conv1dErrors, XRankWrong) {
  in_.x.rank = 2;
  ExpectForwardError({"causal_conv1d: x:", "expected rank 3", "given rank 2"});
}

TEST_F(Conv1dErrors, ZeroBatch) {
  in_.x.shape[0] = 0;
  ExpectForwardError({"causal_conv1d: x:", "expected batch B >= 1", "given B = 0"});
}

TEST_F(Conv1dErrors, ZeroChannels) {
  in_.x.shape[1] = 0;
  ExpectBackwardError({"causal_conv1d: x:", "expected channels D >= 1", "given D = 0"});
}

TEST_F(Conv1dErrors, ZeroLength) {
  in_.x.shape[2] = 0;
  ExpectForwardError({"causal_conv1d: x:", "expected sequence length L >= 1", "given L = 0"});
}

TEST_F(Conv1dErrors, XDtype) {
  in_.x.dtype = DType::kF16;
  ExpectForwardError({"causal_conv1d: x:", "expected dtype f32 or bf16", "given f16"});
}

TEST_F(Conv1dErrors, XTimeNotContiguous) {
  in_.x.strides[2] = 2;
  ExpectForwardError(
      {"causal_conv1d: x:", "expected stride 1 on the last dimension", "given stride 2"});
}

TEST_F(Conv1dErrors, XNegativeStride) {
  in_.x.strides[1] = -5;
  ExpectBackwardError(
      {"causal_conv1d: x:", "expected non-negative strides", "given stride -5 on dimension 1"});
}

TEST_F(Conv1dErrors, XOnCuda) {
  in_.x.device = Device::kCuda;
  ExpectForwardError({"causal_conv1d: x:", "expected a CPU tensor", "given a CUDA tensor"});
}

// ------------------------------------------------------------------ weight, bias, states,
// activation

TEST_F(Conv1dErrors, NullWeight) {
  in_.weight.data = nullptr;
  ExpectForwardError({"causal_conv1d: weight:", "expected a tensor (D, K)", "given null"});
}

TEST_F(Conv1dErrors, WeightRank) {
  in_.weight.rank = 1;
  ExpectForwardError({"causal_conv1d: weight:", "expected rank 2", "given rank 1"});
}

TEST_F(Conv1dErrors, WidthTooSmall) {
  in_.weight.shape[1] = 1;
  ExpectForwardError(
      {"causal_conv1d: weight:", "expected conv width K in [2, 8]", "given K = 1 in (3, 1)"});
}

TEST_F(Conv1dErrors, WidthTooLarge) {
  in_.weight.shape[1] = 9;
  ExpectBackwardError({"causal_conv1d: weight:", "expected conv width K in [2, 8]", "given K = 9"});
}

TEST_F(Conv1dErrors, WeightChannels) {
  in_.weight.shape[0] = 4;
  ExpectForwardError({"causal_conv1d: weight:", "expected shape (D, K) = (3, 4)", "given (4, 4)"});
}

TEST_F(Conv1dErrors, WeightDtype) {
  in_.weight.dtype = DType::kBF16;
  ExpectForwardError({"causal_conv1d: weight:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, WeightTapsNotContiguous) {
  in_.weight.strides[1] = 3;
  ExpectForwardError(
      {"causal_conv1d: weight:", "expected stride 1 on the last dimension", "given stride 3"});
}

TEST_F(Conv1dErrors, BiasShape) {
  in_.bias.shape[0] = 2;
  ExpectForwardError({"causal_conv1d: bias:", "expected shape (D) = (3,)", "given (2,)"});
}

TEST_F(Conv1dErrors, BiasDtype) {
  in_.bias.dtype = DType::kI32;
  ExpectBackwardError({"causal_conv1d: bias:", "expected dtype f32", "given i32"});
}

TEST_F(Conv1dErrors, InitialStatesShape) {
  in_.initial_states.shape[2] = kK;
  ExpectForwardError({"causal_conv1d: initial_states:", "expected shape (B, D, K-1) = (2, 3, 3)",
                      "given (2, 3, 4)"});
}

TEST_F(Conv1dErrors, InitialStatesDtype) {
  in_.initial_states.dtype = DType::kF16;
  ExpectForwardError({"causal_conv1d: initial_states:", "expected dtype f32 or bf16", "given f16"});
}

TEST_F(Conv1dErrors, ActivationOutOfRange) {
  in_.activation = static_cast<Conv1dActivation>(7);
  ExpectForwardError({"causal_conv1d: activation:", "expected kNone (0) or kSilu (1)", "given 7"});
}

// ------------------------------------------------------------------ forward outputs

TEST_F(Conv1dErrors, OutNull) {
  out_view_.data = nullptr;
  ExpectForwardError(
      {"causal_conv1d: out:", "expected a tensor of shape (B, D, L) = (2, 3, 5)", "given null"});
}

TEST_F(Conv1dErrors, OutShape) {
  out_view_.shape[2] = 4;
  ExpectForwardError(
      {"causal_conv1d: out:", "expected shape (B, D, L) = (2, 3, 5)", "given (2, 3, 4)"});
}

TEST_F(Conv1dErrors, OutDtypeMustMatchX) {
  out_view_.dtype = DType::kBF16;
  ExpectForwardError({"causal_conv1d: out:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, FinalStatesShape) {
  final_view_.shape[0] = 1;
  ExpectForwardError({"causal_conv1d: final_states:", "expected shape (B, D, K-1) = (2, 3, 3)",
                      "given (1, 3, 3)"});
}

TEST_F(Conv1dErrors, FinalStatesDtype) {
  final_view_.dtype = DType::kI32;
  ExpectForwardError({"causal_conv1d: final_states:", "expected dtype f32 or bf16", "given i32"});
}

// ------------------------------------------------------------------ backward

TEST_F(Conv1dErrors, DoutNull) {
  dout_view_.data = nullptr;
  ExpectBackwardError(
      {"causal_conv1d: dout:", "expected a tensor of shape (B, D, L)", "given null"});
}

TEST_F(Conv1dErrors, DoutShape) {
  dout_view_.shape[1] = 2;
  ExpectBackwardError(
      {"causal_conv1d: dout:", "expected shape (B, D, L) = (2, 3, 5)", "given (2, 2, 5)"});
}

TEST_F(Conv1dErrors, DoutDtype) {
  dout_view_.dtype = DType::kBF16;
  ExpectBackwardError({"causal_conv1d: dout:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, DfinalStatesShape) {
  dfinal_view_.shape[2] = 2;
  ExpectBackwardError({"causal_conv1d: dfinal_states:", "expected shape (B, D, K-1) = (2, 3, 3)",
                       "given (2, 3, 2)"});
}

TEST_F(Conv1dErrors, DxShape) {
  grads_.dx.shape[2] = 6;
  ExpectBackwardError(
      {"causal_conv1d: dx:", "expected shape (as x) = (2, 3, 5)", "given (2, 3, 6)"});
}

TEST_F(Conv1dErrors, DxDtypeMustMatchX) {
  grads_.dx.dtype = DType::kBF16;
  ExpectBackwardError({"causal_conv1d: dx:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, DweightShape) {
  grads_.dweight.shape[1] = 3;
  ExpectBackwardError(
      {"causal_conv1d: dweight:", "expected shape (as weight) = (3, 4)", "given (3, 3)"});
}

TEST_F(Conv1dErrors, DbiasForAbsentBias) {
  in_.bias = Tensor{};
  ExpectBackwardError({"causal_conv1d: dbias:", "expected no tensor, since bias is absent",
                       "given a tensor of shape (3,)"});
}

TEST_F(Conv1dErrors, DinitialStatesForAbsentInitialStates) {
  in_.initial_states = Tensor{};
  ExpectBackwardError(
      {"causal_conv1d: dinitial_states:", "expected no tensor, since initial_states is absent"});
}

TEST_F(Conv1dErrors, DinitialStatesDtypeMustMatchInitialStates) {
  grads_.dinitial_states.dtype = DType::kBF16;
  ExpectBackwardError({"causal_conv1d: dinitial_states:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, BackwardChecksInputsToo) {
  in_.weight.shape[1] = 10;
  ExpectBackwardError({"causal_conv1d: weight:", "given K = 10"});
}

// ------------------------------------------------------------------ update

TEST_F(Conv1dErrors, UpdateNullX) {
  update_in_.x.data = nullptr;
  ExpectUpdateError(
      {"causal_conv1d_update: x:", "expected a tensor (B, D) or (B, D, T)", "given null"});
}

TEST_F(Conv1dErrors, UpdateXRank) {
  update_in_.x.rank = 1;
  ExpectUpdateError({"causal_conv1d_update: x:", "expected rank 2 or 3", "given rank 1"});
}

TEST_F(Conv1dErrors, UpdateZeroBatch) {
  update_in_.x.shape[0] = 0;
  ExpectUpdateError({"causal_conv1d_update: x:", "expected batch B >= 1", "given B = 0"});
}

TEST_F(Conv1dErrors, UpdateZeroChannels) {
  update_in_.x.shape[1] = 0;
  ExpectUpdateError({"causal_conv1d_update: x:", "expected channels D >= 1", "given D = 0"});
}

TEST_F(Conv1dErrors, UpdateZeroSteps) {
  update_in_.x = Tensor::Contiguous(ux_.data(), DType::kF32, {kB, kD, 0});
  ExpectUpdateError({"causal_conv1d_update: x:", "expected steps T >= 1", "given T = 0"});
}

TEST_F(Conv1dErrors, UpdateXDtype) {
  update_in_.x.dtype = DType::kI64;
  ExpectUpdateError({"causal_conv1d_update: x:", "expected dtype f32 or bf16", "given i64"});
}

TEST_F(Conv1dErrors, UpdateXChannelsNotContiguous) {
  update_in_.x.strides[1] = 2;
  ExpectUpdateError(
      {"causal_conv1d_update: x:", "expected stride 1 on the last dimension", "given stride 2"});
}

TEST_F(Conv1dErrors, UpdateWidthOutOfRange) {
  update_in_.weight.shape[1] = 9;
  ExpectUpdateError(
      {"causal_conv1d_update: weight:", "expected conv width K in [2, 8]", "given K = 9"});
}

TEST_F(Conv1dErrors, UpdateWeightChannels) {
  update_in_.weight.shape[0] = 2;
  ExpectUpdateError(
      {"causal_conv1d_update: weight:", "expected shape (D, K) = (3, 4)", "given (2, 4)"});
}

TEST_F(Conv1dErrors, UpdateBiasShape) {
  update_in_.bias.shape[0] = 4;
  ExpectUpdateError({"causal_conv1d_update: bias:", "expected shape (D) = (3,)", "given (4,)"});
}

TEST_F(Conv1dErrors, UpdateActivation) {
  update_in_.activation = static_cast<Conv1dActivation>(-1);
  ExpectUpdateError(
      {"causal_conv1d_update: activation:", "expected kNone (0) or kSilu (1)", "given -1"});
}

TEST_F(Conv1dErrors, ConvStateNull) {
  state_view_.data = nullptr;
  ExpectUpdateError(
      {"causal_conv1d_update: conv_state:", "expected a tensor (B, D, S), S >= K-1", "given null"});
}

TEST_F(Conv1dErrors, ConvStateRank) {
  state_view_.rank = 2;
  ExpectUpdateError({"causal_conv1d_update: conv_state:", "expected rank 3", "given rank 2"});
}

TEST_F(Conv1dErrors, ConvStateTooShort) {
  state_view_.shape[2] = 2;
  ExpectUpdateError({"causal_conv1d_update: conv_state:", "expected state length S >= K-1 = 3",
                     "given S = 2 in (2, 3, 2)"});
}

TEST_F(Conv1dErrors, ConvStateBatch) {
  state_view_.shape[0] = 3;
  ExpectUpdateError({"causal_conv1d_update: conv_state:", "expected shape (B, D, S) = (2, 3, 3)",
                     "given (3, 3, 3)"});
}

TEST_F(Conv1dErrors, ConvStateDtype) {
  state_view_.dtype = DType::kBF16;
  ExpectUpdateError({"causal_conv1d_update: conv_state:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, ConvStateNotContiguous) {
  state_view_.strides[2] = 2;
  ExpectUpdateError(
      {"causal_conv1d_update: conv_state:", "expected stride 1 on the last dimension"});
}

TEST_F(Conv1dErrors, UpdateOutShape) {
  uout_view_ = Tensor::Contiguous(uout_.data(), DType::kF32, {kB, kD, 1});
  ExpectUpdateError(
      {"causal_conv1d_update: out:", "expected shape (B, D) = (2, 3)", "given (2, 3, 1)"});
}

TEST_F(Conv1dErrors, UpdateOutDtype) {
  uout_view_.dtype = DType::kBF16;
  ExpectUpdateError({"causal_conv1d_update: out:", "expected dtype f32", "given bf16"});
}

TEST_F(Conv1dErrors, UpdateOutNull) {
  uout_view_.data = nullptr;
  ExpectUpdateError(
      {"causal_conv1d_update: out:", "expected a tensor of shape (B, D) = (2, 3)", "given null"});
}

TEST_F(Conv1dErrors, UpdateStepsMustMatchOut) {
  HostTensor x3({kB, kD, kT}, DType::kF32);
  x3.Fill(rng_.NormalVec(x3.numel()));
  update_in_.x = x3.view();
  ExpectUpdateError(
      {"causal_conv1d_update: out:", "expected shape (B, D, T) = (2, 3, 2)", "given (2, 3)"});
}

}  // namespace
}  // namespace ssmkit::testing

// Bad input to selective_state_update: one test per rule of src/ops/state_update.cpp and
// src/ops/check.cpp, for both forms. Each must return kInvalidArgument with a message naming
// the argument, the expected and the given value, and leave out and the state untouched.
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ssmkit/state_update.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// Mamba-1: B = 2, D = 6, N = 4, G = 3.  Mamba-2: B = 2, H = 4, P = 3, N = 5, G = 2, Bs = 5.
constexpr int64_t kB = 2, kD = 6, kN1 = 4, kG1 = 3;
constexpr int64_t kH = 4, kP = 3, kN2 = 5, kG2 = 2, kBs = 5;

class StateUpdateErrors : public ::testing::Test {
 protected:
  StateUpdateErrors() : rng_(FreshSeed()) {
    // Mamba-1
    x1_ = HostTensor({kB, kD}, DType::kF32);
    dt1_ = HostTensor({kB, kD}, DType::kF32);
    z1_ = HostTensor({kB, kD}, DType::kF32);
    A1_ = HostTensor({kD, kN1}, DType::kF32);
    B1_ = HostTensor({kB, kG1, kN1}, DType::kF32);
    C1_ = HostTensor({kB, kN1}, DType::kF32);
    D1_ = HostTensor({kD}, DType::kF32);
    bias1_ = HostTensor({kD}, DType::kF32);
    state1_ = HostTensor({kB, kD, kN1}, DType::kF32);
    out1_ = HostTensor({kB, kD}, DType::kF32);
    // Mamba-2
    x2_ = HostTensor({kB, kH, kP}, DType::kF32);
    dt2_ = HostTensor({kB, kH}, DType::kF32);
    z2_ = HostTensor({kB, kH, kP}, DType::kF32);
    A2_ = HostTensor({kH}, DType::kF32);
    B2_ = HostTensor({kB, kG2, kN2}, DType::kF32);
    C2_ = HostTensor({kB, kG2, kN2}, DType::kF32);
    D2_ = HostTensor({kH, kP}, DType::kF32);
    bias2_ = HostTensor({kH}, DType::kF32);
    state2_ = HostTensor({kBs, kH, kP, kN2}, DType::kF32);
    out2_ = HostTensor({kB, kH, kP}, DType::kF32);
    indices_ = HostTensor({kB}, DType::kI32);
    for (HostTensor* t : {&x1_, &dt1_, &z1_, &A1_, &B1_, &C1_, &D1_, &bias1_, &state1_, &x2_, &dt2_,
                          &z2_, &A2_, &B2_, &C2_, &D2_, &bias2_, &state2_}) {
      t->Fill(rng_.NormalVec(t->numel()));
    }
    indices_.Fill({3.0, 0.0});
    for (HostTensor* t : {&out1_, &out2_}) std::memset(t->data(), 0xA5, t->bytes().size());
    state1_before_ = state1_.bytes();
    state2_before_ = state2_.bytes();
    in1_ = {x1_.view(), dt1_.view(), A1_.view(),    B1_.view(), C1_.view(),
            D1_.view(), z1_.view(),  bias1_.view(), Tensor{},   true};
    in2_ = {x2_.view(), dt2_.view(), A2_.view(),    B2_.view(),      C2_.view(),
            D2_.view(), z2_.view(),  bias2_.view(), indices_.view(), true};
    state1_view_ = state1_.view();
    state2_view_ = state2_.view();
    out1_view_ = out1_.view();
    out2_view_ = out2_.view();
  }

  void ExpectError(const Status& s, std::initializer_list<const char*> pieces) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    for (const char* piece : pieces)
      EXPECT_NE(s.message().find(piece), std::string::npos) << s.message();
    for (const HostTensor* t : {&out1_, &out2_}) {
      for (uint8_t byte : t->bytes()) ASSERT_EQ(byte, 0xA5) << "out was written on error";
    }
    ASSERT_TRUE(state1_.bytes() == state1_before_) << "the Mamba-1 state was written on error";
    ASSERT_TRUE(state2_.bytes() == state2_before_) << "the Mamba-2 state was written on error";
  }
  void Expect1(std::initializer_list<const char*> pieces) {
    ExpectError(SelectiveStateUpdate(in1_, state1_view_, out1_view_), pieces);
  }
  void Expect2(std::initializer_list<const char*> pieces) {
    ExpectError(SelectiveStateUpdate(in2_, state2_view_, out2_view_), pieces);
  }

  Rng rng_;
  HostTensor x1_, dt1_, z1_, A1_, B1_, C1_, D1_, bias1_, state1_, out1_;
  HostTensor x2_, dt2_, z2_, A2_, B2_, C2_, D2_, bias2_, state2_, out2_, indices_;
  std::vector<uint8_t> state1_before_, state2_before_;
  StateUpdateInputs in1_, in2_;
  Tensor state1_view_, state2_view_, out1_view_, out2_view_;
};

// The fixture's calls are valid (on copies of out and state, so the others stay pristine).
TEST_F(StateUpdateErrors, ValidCallsSucceed) {
  HostTensor s1 = state1_, s2 = state2_, o1({kB, kD}, DType::kF32), o2({kB, kH, kP}, DType::kF32);
  Status s = SelectiveStateUpdate(in1_, s1.view(), o1.view());
  EXPECT_TRUE(s.ok()) << s.message();
  s = SelectiveStateUpdate(in2_, s2.view(), o2.view());
  EXPECT_TRUE(s.ok()) << s.message();
}

// ------------------------------------------------------------------ state

TEST_F(StateUpdateErrors, StateNull) {
  state1_view_.data = nullptr;
  Expect1({"selective_state_update: state:", "expected a tensor (Bs, D, N) or (Bs, H, P, N)",
           "given null"});
}

TEST_F(StateUpdateErrors, StateRank) {
  state2_view_.rank = 2;
  Expect2({"selective_state_update: state:", "expected rank 3 or 4", "given rank 2"});
}

TEST_F(StateUpdateErrors, StateZeroHeads) {
  state2_view_.shape[1] = 0;
  Expect2(
      {"selective_state_update: state:", "expected every dimension >= 1", "given (5, 0, 3, 5)"});
}

TEST_F(StateUpdateErrors, StateSizeTooLarge) {
  state1_view_.shape[2] = 257;
  Expect1({"selective_state_update: state:", "expected state size N in [1, 256]", "given N = 257"});
}

TEST_F(StateUpdateErrors, StateSizeZero) {
  state2_view_.shape[3] = 0;
  Expect2({"selective_state_update: state:", "expected state size N in [1, 256]", "given N = 0"});
}

TEST_F(StateUpdateErrors, StateBatchMustBeBWithoutIndices) {
  state1_view_.shape[0] = 3;
  Expect1({"selective_state_update: state:", "expected shape (B, D, N) = (2, 6, 4)",
           "given (3, 6, 4)"});
}

TEST_F(StateUpdateErrors, StateDtype) {
  state2_view_.dtype = DType::kBF16;
  Expect2({"selective_state_update: state:", "expected dtype f32", "given bf16"});
}

TEST_F(StateUpdateErrors, StateNotContiguous) {
  state2_view_.strides[3] = 2;
  Expect2({"selective_state_update: state:", "expected stride 1 on the last dimension",
           "given stride 2"});
}

TEST_F(StateUpdateErrors, StateOnCuda) {
  state1_view_.device = Device::kCuda;
  Expect1({"selective_state_update: state:", "expected a CPU tensor", "given a CUDA tensor"});
}

// ------------------------------------------------------------------ x, dt, A

TEST_F(StateUpdateErrors, XNull) {
  in2_.x.data = nullptr;
  Expect2({"selective_state_update: x:", "expected a tensor (B, H, P)", "given null"});
}

TEST_F(StateUpdateErrors, XRankMustMatchTheForm) {
  in2_.x = in1_.x;  // a (B, D) x with a Mamba-2 state
  Expect2({"selective_state_update: x:", "expected rank 3", "given rank 2"});
}

TEST_F(StateUpdateErrors, XZeroBatch) {
  in1_.x.shape[0] = 0;
  Expect1({"selective_state_update: x:", "expected batch B >= 1", "given B = 0"});
}

TEST_F(StateUpdateErrors, XShape) {
  in2_.x.shape[2] = 2;
  Expect2(
      {"selective_state_update: x:", "expected shape (B, H, P) = (2, 4, 3)", "given (2, 4, 2)"});
}

TEST_F(StateUpdateErrors, XDtype) {
  in1_.x.dtype = DType::kF16;
  Expect1({"selective_state_update: x:", "expected dtype f32 or bf16", "given f16"});
}

TEST_F(StateUpdateErrors, XNegativeStride) {
  in2_.x.strides[0] = -12;
  Expect2({"selective_state_update: x:", "expected non-negative strides",
           "given stride -12 on dimension 0"});
}

TEST_F(StateUpdateErrors, DtNull) {
  in1_.dt.data = nullptr;
  Expect1(
      {"selective_state_update: dt:", "expected a tensor of shape (B, D) = (2, 6)", "given null"});
}

TEST_F(StateUpdateErrors, DtPerHeadInMamba2) {
  in2_.dt = in2_.x;  // (B, H, P): Mamba-2 takes one dt per head
  Expect2({"selective_state_update: dt:", "expected shape (B, H) = (2, 4)", "given (2, 4, 3)"});
}

TEST_F(StateUpdateErrors, DtDtype) {
  in2_.dt.dtype = DType::kI32;
  Expect2({"selective_state_update: dt:", "expected dtype f32 or bf16", "given i32"});
}

TEST_F(StateUpdateErrors, ANull) {
  in2_.A.data = nullptr;
  Expect2({"selective_state_update: A:", "expected a tensor of shape (H) = (4,)", "given null"});
}

TEST_F(StateUpdateErrors, AShapeMamba1) {
  in1_.A = in1_.D;  // (D): Mamba-1 takes A (D, N)
  Expect1({"selective_state_update: A:", "expected shape (D, N) = (6, 4)", "given (6,)"});
}

TEST_F(StateUpdateErrors, AShapeMamba2) {
  in2_.A = in2_.D;  // (H, P): Mamba-2 takes one A per head
  Expect2({"selective_state_update: A:", "expected shape (H) = (4,)", "given (4, 3)"});
}

TEST_F(StateUpdateErrors, ADtype) {
  in1_.A.dtype = DType::kBF16;
  Expect1({"selective_state_update: A:", "expected dtype f32", "given bf16"});
}

// ------------------------------------------------------------------ B, C

TEST_F(StateUpdateErrors, BNull) {
  in1_.B.data = nullptr;
  Expect1({"selective_state_update: B:", "expected a tensor (B, N) or (B, G, N)", "given null"});
}

TEST_F(StateUpdateErrors, BRank) {
  in2_.B.rank = 4;
  Expect2({"selective_state_update: B:", "expected rank 2 or 3", "given rank 4"});
}

TEST_F(StateUpdateErrors, GroupsNotDividingD) {
  in1_.B.shape[1] = 4;
  Expect1({"selective_state_update: B:", "expected a group count G dividing D = 6", "given G = 4"});
}

TEST_F(StateUpdateErrors, GroupsNotDividingH) {
  in2_.C.shape[1] = 3;
  Expect2({"selective_state_update: C:", "expected a group count G dividing H = 4", "given G = 3"});
}

TEST_F(StateUpdateErrors, CShape) {
  in1_.C.shape[1] = 5;
  Expect1({"selective_state_update: C:", "expected shape (B, N) = (2, 4)", "given (2, 5)"});
}

TEST_F(StateUpdateErrors, GroupedBShape) {
  in2_.B.shape[0] = 1;
  Expect2(
      {"selective_state_update: B:", "expected shape (B, G, N) = (2, 2, 5)", "given (1, 2, 5)"});
}

TEST_F(StateUpdateErrors, CDtype) {
  in2_.C.dtype = DType::kF16;
  Expect2({"selective_state_update: C:", "expected dtype f32 or bf16", "given f16"});
}

// ------------------------------------------------------------------ D, z, dt_bias

TEST_F(StateUpdateErrors, DShapeMamba1) {
  in1_.D.shape[0] = 5;
  Expect1({"selective_state_update: D:", "expected shape (D) = (6,)", "given (5,)"});
}

TEST_F(StateUpdateErrors, DRankMamba2) {
  in2_.D = in2_.x;
  Expect2({"selective_state_update: D:", "expected rank 1 or 2", "given rank 3"});
}

TEST_F(StateUpdateErrors, DPerHeadDimShape) {
  in2_.D.shape[1] = 2;
  Expect2({"selective_state_update: D:", "expected shape (H, P) = (4, 3)", "given (4, 2)"});
}

TEST_F(StateUpdateErrors, DDtype) {
  in1_.D.dtype = DType::kBF16;
  Expect1({"selective_state_update: D:", "expected dtype f32", "given bf16"});
}

TEST_F(StateUpdateErrors, ZShape) {
  in2_.z.shape[1] = 5;
  Expect2(
      {"selective_state_update: z:", "expected shape (B, H, P) = (2, 4, 3)", "given (2, 5, 3)"});
}

TEST_F(StateUpdateErrors, ZDtype) {
  in1_.z.dtype = DType::kI64;
  Expect1({"selective_state_update: z:", "expected dtype f32 or bf16", "given i64"});
}

TEST_F(StateUpdateErrors, DtBiasShape) {
  in2_.dt_bias.shape[0] = 2;
  Expect2({"selective_state_update: dt_bias:", "expected shape (H) = (4,)", "given (2,)"});
}

TEST_F(StateUpdateErrors, DtBiasDtype) {
  in1_.dt_bias.dtype = DType::kBF16;
  Expect1({"selective_state_update: dt_bias:", "expected dtype f32", "given bf16"});
}

// ------------------------------------------------------------------ state_batch_indices

TEST_F(StateUpdateErrors, IndicesDtype) {
  in2_.state_batch_indices.dtype = DType::kI64;
  Expect2({"selective_state_update: state_batch_indices:", "expected dtype i32", "given i64"});
}

TEST_F(StateUpdateErrors, IndicesShape) {
  in2_.state_batch_indices.shape[0] = 3;
  Expect2(
      {"selective_state_update: state_batch_indices:", "expected shape (B) = (2,)", "given (3,)"});
}

TEST_F(StateUpdateErrors, IndexOutOfRange) {
  indices_.Fill({1.0, 5.0});
  Expect2({"selective_state_update: state_batch_indices:",
           "expected indices < Bs = 5 (the state's batch), or negative to skip a row",
           "given 5 at row 1"});
}

TEST_F(StateUpdateErrors, IndexRepeated) {
  indices_.Fill({2.0, 2.0});
  Expect2({"selective_state_update: state_batch_indices:", "expected distinct non-negative indices",
           "given 2 at rows 0 and 1"});
}

// A rejected call leaves nothing behind: after a repeated index, the same indices in another
// order are accepted (the per-thread duplicate marks were reset).
TEST_F(StateUpdateErrors, IndexCheckResetsAfterAnError) {
  indices_.Fill({4.0, 4.0});
  Expect2({"selective_state_update: state_batch_indices:", "given 4 at rows 0 and 1"});
  indices_.Fill({4.0, -1.0});
  HostTensor s2 = state2_, o2({kB, kH, kP}, DType::kF32);
  const Status s = SelectiveStateUpdate(in2_, s2.view(), o2.view());
  EXPECT_TRUE(s.ok()) << s.message();
}

// ------------------------------------------------------------------ out

TEST_F(StateUpdateErrors, OutNull) {
  out1_view_.data = nullptr;
  Expect1(
      {"selective_state_update: out:", "expected a tensor of shape (B, D) = (2, 6)", "given null"});
}

TEST_F(StateUpdateErrors, OutShape) {
  out2_view_.shape[0] = 1;
  Expect2(
      {"selective_state_update: out:", "expected shape (B, H, P) = (2, 4, 3)", "given (1, 4, 3)"});
}

TEST_F(StateUpdateErrors, OutDtypeMustMatchX) {
  out1_view_.dtype = DType::kBF16;
  Expect1({"selective_state_update: out:", "expected dtype f32", "given bf16"});
}

}  // namespace
}  // namespace ssmkit::testing

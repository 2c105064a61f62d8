// Bad input to the selective scan: one test per rule of src/ops/selective_scan.cpp and
// src/ops/check.cpp. Each must return kInvalidArgument with a message naming the argument,
// the expected and the given value, and leave every output untouched.
#include <cstring>
#include <functional>
#include <string>

#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

class ScanErrors : public ::testing::Test {
 protected:
  ScanErrors() : rng_(FreshSeed()), prob_(MakeCase(), rng_) {
    out_ = HostTensor({2, 4, 9}, DType::kF32);
    final_ = HostTensor({2, 4, 3}, DType::kF32);
    dout_ = HostTensor({2, 4, 9}, DType::kF32);
    dout_.Fill(rng_.NormalVec(dout_.numel()));
    du_ = HostTensor({2, 4, 9}, DType::kF32);
    dA_ = HostTensor({4, 3}, DType::kF32);
    for (HostTensor* t : {&out_, &final_, &du_, &dA_}) Sentinel(*t);
    in_ = prob_.Inputs();
  }

  static ScanCase MakeCase() {
    ScanCase c;
    c.batch = 2;
    c.dim = 4;
    c.seqlen = 9;
    c.dstate = 3;
    c.groups = 2;
    return c;
  }

  // A recognisable byte pattern: any write by a failing call shows up as a changed byte.
  static void Sentinel(HostTensor& t) { std::memset(t.data(), 0xA5, t.bytes().size()); }

  void ExpectUntouched() {
    for (const HostTensor* t : {&out_, &final_, &du_, &dA_}) {
      for (uint8_t byte : t->bytes()) ASSERT_EQ(byte, 0xA5) << "an output was written on error";
    }
  }

  // Runs the forward, expects an invalid-argument status whose message holds every piece.
  void ExpectForwardError(std::initializer_list<const char*> pieces) {
    const Status s = SelectiveScanForward(in_, out_.view(), final_.view(), options_);
    ExpectError(s, pieces);
  }

  void ExpectBackwardError(std::initializer_list<const char*> pieces) {
    const Status s = SelectiveScanBackward(in_, dout_.view(), Tensor{}, grads_, options_);
    ExpectError(s, pieces);
  }

  void ExpectError(const Status& s, std::initializer_list<const char*> pieces) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    for (const char* piece : pieces) EXPECT_NE(s.message().find(piece), std::string::npos) << s.message();
    ExpectUntouched();
  }

  Rng rng_;
  ScanProblem prob_;
  SelectiveScanInputs in_;
  SelectiveScanOptions options_;
  SelectiveScanGrads grads_;
  HostTensor out_, final_, dout_, du_, dA_;
};

TEST_F(ScanErrors, ValidCallSucceeds) {
  Status s = SelectiveScanForward(in_, out_.view(), final_.view(), options_);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(ScanErrors, NullU) {
  in_.u.data = nullptr;
  ExpectForwardError({"selective_scan: u:", "expected a tensor (B, D, L)", "given null"});
}

TEST_F(ScanErrors, URankWrong) {
  in_.u.rank = 2;
  ExpectForwardError({"u:", "expected rank 3", "given rank 2"});
}

TEST_F(ScanErrors, NullA) {
  in_.A.data = nullptr;
  ExpectForwardError({"A:", "given null"});
}

TEST_F(ScanErrors, ZeroLength) {
  in_.u.shape[2] = 0;
  ExpectForwardError({"u:", "sequence length L >= 1", "given L = 0"});
}

TEST_F(ScanErrors, ZeroBatch) {
  in_.u.shape[0] = 0;
  ExpectForwardError({"u:", "batch B >= 1", "given B = 0"});
}

TEST_F(ScanErrors, ZeroChannels) {
  in_.u.shape[1] = 0;
  ExpectForwardError({"u:", "channels D >= 1", "given D = 0"});
}

TEST_F(ScanErrors, StateTooLarge) {
  in_.A.shape[1] = 257;
  ExpectForwardError({"A:", "state size N in [1, 256]", "given N = 257"});
}

TEST_F(ScanErrors, StateZero) {
  in_.A.shape[1] = 0;
  ExpectForwardError({"A:", "given N = 0"});
}

TEST_F(ScanErrors, DeltaShape) {
  in_.delta.shape[2] = 8;
  ExpectForwardError({"delta:", "expected shape (B, D, L) = (2, 4, 9)", "given (2, 4, 8)"});
}

TEST_F(ScanErrors, DeltaDtype) {
  in_.delta.dtype = DType::kF16;
  ExpectForwardError({"delta:", "expected dtype f32 or bf16", "given f16"});
}

TEST_F(ScanErrors, ADtype) {
  in_.A.dtype = DType::kBF16;
  ExpectForwardError({"A:", "expected dtype f32", "given bf16"});
}

TEST_F(ScanErrors, AShape) {
  in_.A.shape[0] = 5;
  ExpectForwardError({"A:", "expected shape (D, N) = (4, 3)", "given (5, 3)"});
}

TEST_F(ScanErrors, URowNotContiguous) {
  in_.u.strides[2] = 2;
  ExpectForwardError({"u:", "expected stride 1 on the last dimension", "given stride 2"});
}

TEST_F(ScanErrors, NegativeStride) {
  in_.z.strides[0] = -36;
  ExpectForwardError({"z:", "expected non-negative strides", "given stride -36 on dimension 0"});
}

TEST_F(ScanErrors, CudaTensorOnCpuBuild) {
  in_.u.device = Device::kCuda;
  ExpectForwardError({"u:", "expected a CPU tensor", "given a CUDA tensor"});
}

TEST_F(ScanErrors, NullB) {
  in_.B.data = nullptr;
  ExpectForwardError({"B:", "(D, N), (B, N, L) or (B, G, N, L)", "given null"});
}

TEST_F(ScanErrors, BRankWrong) {
  in_.B.rank = 5;
  ExpectForwardError({"B:", "expected rank 2 or 3 or 4", "given rank 5"});
}

TEST_F(ScanErrors, ConstantBShape) {
  in_.B = Tensor::Contiguous(prob_.A.data(), DType::kF32, {4, 2});
  ExpectForwardError({"B:", "expected shape (D, N) = (4, 3)", "given (4, 2)"});
}

TEST_F(ScanErrors, VariableCShape) {
  std::vector<float> buf(2 * 3 * 10);
  in_.C = Tensor::Contiguous(buf.data(), DType::kF32, {2, 3, 10});
  ExpectForwardError({"C:", "expected shape (B, N, L) = (2, 3, 9)", "given (2, 3, 10)"});
}

TEST_F(ScanErrors, GroupsNotDividingD) {
  std::vector<float> buf(2 * 3 * 3 * 9);
  in_.B = Tensor::Contiguous(buf.data(), DType::kF32, {2, 3, 3, 9});
  ExpectForwardError({"B:", "a group count G dividing D = 4", "given G = 3"});
}

TEST_F(ScanErrors, GroupedBShape) {
  std::vector<float> buf(2 * 2 * 4 * 9);
  in_.B = Tensor::Contiguous(buf.data(), DType::kF32, {2, 2, 4, 9});
  ExpectForwardError({"B:", "expected shape (B, G, N, L) = (2, 2, 3, 9)", "given (2, 2, 4, 9)"});
}

TEST_F(ScanErrors, DShape) {
  in_.D.shape[0] = 3;
  ExpectForwardError({"D:", "expected shape (D) = (4,)", "given (3,)"});
}

TEST_F(ScanErrors, ZDtype) {
  in_.z.dtype = DType::kI32;
  ExpectForwardError({"z:", "expected dtype f32 or bf16", "given i32"});
}

TEST_F(ScanErrors, DeltaBiasShape) {
  in_.delta_bias.shape[0] = 8;
  ExpectForwardError({"delta_bias:", "expected shape (D) = (4,)", "given (8,)"});
}

TEST_F(ScanErrors, InitialStateShape) {
  in_.initial_state.shape[2] = 4;
  ExpectForwardError({"initial_state:", "expected shape (B, D, N) = (2, 4, 3)", "given (2, 4, 4)"});
}

TEST_F(ScanErrors, InitialStateDtype) {
  in_.initial_state.dtype = DType::kBF16;
  ExpectForwardError({"initial_state:", "expected dtype f32", "given bf16"});
}

TEST_F(ScanErrors, OutNull) {
  const Status s = SelectiveScanForward(in_, Tensor{}, final_.view(), options_);
  ExpectError(s, {"out:", "given null"});
}

TEST_F(ScanErrors, OutDtypeMustMatchU) {
  HostTensor bf16_out({2, 4, 9}, DType::kBF16);
  const Status s = SelectiveScanForward(in_, bf16_out.view(), final_.view(), options_);
  ExpectError(s, {"out:", "expected dtype f32", "given bf16"});
}

TEST_F(ScanErrors, OutShape) {
  Tensor bad = out_.view();
  bad.shape[1] = 3;
  const Status s = SelectiveScanForward(in_, bad, final_.view(), options_);
  ExpectError(s, {"out:", "(B, D, L) = (2, 4, 9)", "given (2, 3, 9)"});
}

TEST_F(ScanErrors, FinalStateShape) {
  Tensor bad = final_.view();
  bad.shape[0] = 1;
  const Status s = SelectiveScanForward(in_, out_.view(), bad, options_);
  ExpectError(s, {"final_state:", "(B, D, N) = (2, 4, 3)", "given (1, 4, 3)"});
}

TEST_F(ScanErrors, AlgorithmOutOfRange) {
  options_.algorithm = static_cast<ScanAlgorithm>(9);
  ExpectForwardError({"options.algorithm", "a ScanAlgorithm value 0..4", "given 9"});
}

TEST_F(ScanErrors, NegativeChunkLength) {
  options_.chunk_length = -4;
  ExpectForwardError({"options.chunk_length", "0 (default) or a positive length", "given -4"});
}

TEST_F(ScanErrors, ParseBadAlgorithmName) {
  ScanAlgorithm algorithm = ScanAlgorithm::kChunked;
  const Status s = ParseScanAlgorithm("fastest", &algorithm);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"fastest\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("hillis-steele"), std::string::npos) << s.message();
  EXPECT_EQ(algorithm, ScanAlgorithm::kChunked);
  ASSERT_TRUE(ParseScanAlgorithm("log-space", &algorithm).ok());
  EXPECT_EQ(algorithm, ScanAlgorithm::kLogSpace);
}

TEST_F(ScanErrors, DoutShape) {
  grads_.du = du_.view();
  Tensor bad = dout_.view();
  bad.shape[2] = 10;
  const Status s = SelectiveScanBackward(in_, bad, Tensor{}, grads_, options_);
  ExpectError(s, {"dout:", "(B, D, L) = (2, 4, 9)", "given (2, 4, 10)"});
}

TEST_F(ScanErrors, DfinalStateDtype) {
  grads_.du = du_.view();
  HostTensor dfinal({2, 4, 3}, DType::kBF16);
  const Status s = SelectiveScanBackward(in_, dout_.view(), dfinal.view(), grads_, options_);
  ExpectError(s, {"dfinal_state:", "expected dtype f32", "given bf16"});
}

TEST_F(ScanErrors, GradientShapeMustMatchInput) {
  grads_.du = du_.view();
  grads_.dA = dA_.view();
  grads_.dA.shape[1] = 2;
  ExpectBackwardError({"dA:", "expected shape (as A) = (4, 3)", "given (4, 2)"});
}

TEST_F(ScanErrors, GradientDtypeMustMatchInput) {
  HostTensor du_bf16({2, 4, 9}, DType::kBF16);
  grads_.du = du_bf16.view();
  grads_.dA = dA_.view();
  ExpectBackwardError({"du:", "expected dtype f32", "given bf16"});
}

TEST_F(ScanErrors, GradientForAbsentInput) {
  in_.D = Tensor{};
  HostTensor dD({4}, DType::kF32);
  grads_.dD = dD.view();
  grads_.du = du_.view();
  ExpectBackwardError({"dD:", "no tensor, since D is absent", "given a tensor of shape (4,)"});
}

TEST_F(ScanErrors, BackwardChecksInputsToo) {
  grads_.du = du_.view();
  in_.u.shape[2] = 0;
  ExpectBackwardError({"u:", "given L = 0"});
}

}  // namespace
}  // namespace ssmkit::testing

// Bad input to the selective scan: one test per rule of src/ops/selective_scan.cpp and
// src/ops/check.cpp, for every argument the rule applies to. Each starts from a valid call
// (B = 2, D = 4, L = 9, N = 3; B variable (B, N, L), C grouped (B, G, N, L) with G = 2),
// breaks one thing, and expects kInvalidArgument with a message naming the argument and
// holding the expected and the given value, and every output (out, final_state and the nine
// gradients, filled with a sentinel byte pattern) bit-for-bit untouched.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kB = 2, kD = 4, kL = 9, kN = 3, kG = 2;
constexpr uint8_t kSentinel = 0xA5;

// Everything one call passes; valid until a rule breaks it.
struct Call {
  SelectiveScanInputs in;
  Tensor out, final_state, chunk_states, dout, dfinal;
  SelectiveScanGrads grads;
  SelectiveScanOptions options;
  bool backward = false;
};

// Storage for tensors a rule substitutes (a wrong shape or dtype); the checks fail before any
// element is read.
class Spare {
 public:
  Tensor Make(std::initializer_list<int64_t> shape, DType dtype = DType::kF32) {
    return Tensor::Contiguous(buffer_.data(), dtype, shape);
  }

 private:
  std::vector<double> buffer_ = std::vector<double>(4096, 1.0);
};

struct Rule {
  const char* name;
  bool backward;
  std::function<void(Call&, Spare&)> breaks;
  std::vector<std::string> message;  // substrings the status message must hold
};

// A valid problem, its outputs filled with the sentinel, and the valid calls on it.
class ScanCall : public ::testing::Test {
 protected:
  ScanCall() : rng_(FreshSeed()), prob_(MakeCase(), rng_) {
    const std::vector<int64_t> seq = prob_.SeqShape(), state = prob_.StateShape();
    outputs_ = {HostTensor(seq, DType::kF32),
                HostTensor(state, DType::kF32),
                HostTensor(seq, DType::kF32),
                HostTensor(seq, DType::kF32),
                HostTensor({kD, kN}, DType::kF32),
                HostTensor({kB, kN, kL}, DType::kF32),
                HostTensor({kB, kG, kN, kL}, DType::kF32),
                HostTensor({kD}, DType::kF32),
                HostTensor(seq, DType::kF32),
                HostTensor({kD}, DType::kF32),
                HostTensor(state, DType::kF32),
                HostTensor({kB, kD, 1, kN}, DType::kF32)};
    FillSentinel();
    dout_ = HostTensor(seq, DType::kF32);
    dout_.Fill(rng_.NormalVec(dout_.numel()));
    dfinal_ = HostTensor(state, DType::kF32);
    dfinal_.Fill(rng_.NormalVec(dfinal_.numel()));
  }

  static ScanCase MakeCase() {
    ScanCase c;
    c.batch = kB;
    c.dim = kD;
    c.seqlen = kL;
    c.dstate = kN;
    c.groups = kG;
    c.b_form = BCForm::kVariable;
    c.c_form = BCForm::kGrouped;
    return c;
  }

  // The valid call: forward into out / final_state, backward into all nine gradients.
  Call ValidCall(bool backward) {
    Call call;
    call.backward = backward;
    call.in = prob_.Inputs();
    call.out = outputs_[0].view();
    call.final_state = outputs_[1].view();
    call.dout = dout_.view();
    call.dfinal = dfinal_.view();
    SelectiveScanGrads& g = call.grads;
    Tensor* grads[] = {&g.du,          &g.ddelta,        &g.dA, &g.dB, &g.dC, &g.dD, &g.dz,
                       &g.ddelta_bias, &g.dinitial_state};
    for (int i = 0; i < 9; ++i) *grads[i] = outputs_[2 + i].view();
    call.chunk_states = outputs_[11].view();
    return call;
  }

  static Status Run(const Call& call) {
    return call.backward ? SelectiveScanBackward(call.in, call.dout, call.dfinal, call.chunk_states,
                                                 call.grads, call.options)
                         : SelectiveScanForward(call.in, call.out, call.final_state,
                                                call.chunk_states, call.options);
  }

  void FillSentinel() {
    for (HostTensor& t : outputs_) std::memset(t.data(), kSentinel, t.bytes().size());
  }

  bool OutputsUntouched() const {
    for (const HostTensor& t : outputs_) {
      for (uint8_t byte : t.bytes()) {
        if (byte != kSentinel) return false;
      }
    }
    return true;
  }

  Rng rng_;
  ScanProblem prob_;
  std::vector<HostTensor>
      outputs_;  // out, final_state, the gradients in SelectiveScanGrads order, chunk_states
  HostTensor dout_, dfinal_;
  Spare spare_;
};

class ScanErrors : public ScanCall, public ::testing::WithParamInterface<Rule> {};

// The starting point of every rule is accepted (so each failure below is the rule's own), and
// a call that succeeds does write its outputs (so the untouched check can see a write).
TEST_F(ScanCall, ValidCallsSucceed) {
  for (bool backward : {false, true}) {
    FillSentinel();
    const Status s = Run(ValidCall(backward));
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_FALSE(OutputsUntouched());
  }
}

TEST_P(ScanErrors, Rule) {
  const Rule& rule = GetParam();
  Call call = ValidCall(rule.backward);
  rule.breaks(call, spare_);
  const Status s = Run(call);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  for (const std::string& piece : rule.message) {
    EXPECT_NE(s.message().find(piece), std::string::npos)
        << "missing \"" << piece << "\" in: " << s.message();
  }
  EXPECT_TRUE(OutputsUntouched()) << "an output was written by a call that failed";
}

constexpr bool kFwd = false, kBwd = true;

std::vector<Rule> Rules() {
  using S = Spare;
  return {
      // ---- options (checked first, by both entry points)
      {"AlgorithmAboveRange",
       kFwd,
       [](Call& c, S&) { c.options.algorithm = static_cast<ScanAlgorithm>(5); },
       {"selective_scan: options.algorithm: expected a ScanAlgorithm value 0..4, given 5"}},
      {"AlgorithmNegative",
       kFwd,
       [](Call& c, S&) { c.options.algorithm = static_cast<ScanAlgorithm>(-1); },
       {"options.algorithm: expected a ScanAlgorithm value 0..4, given -1"}},
      {"NegativeChunkLength",
       kFwd,
       [](Call& c, S&) { c.options.chunk_length = -4; },
       {"selective_scan: options.chunk_length: expected 0 (default) or a positive length, given "
        "-4"}},
      {"BackwardAlgorithmOutOfRange",
       kBwd,
       [](Call& c, S&) { c.options.algorithm = static_cast<ScanAlgorithm>(7); },
       {"options.algorithm:", "given 7"}},
      {"BackwardNegativeChunkLength",
       kBwd,
       [](Call& c, S&) { c.options.chunk_length = -1; },
       {"options.chunk_length:", "given -1"}},

      // ---- u: null, rank, B / D / L >= 1, dtype, strides, device
      {"UNull",
       kFwd,
       [](Call& c, S&) { c.in.u.data = nullptr; },
       {"selective_scan: u: expected a tensor (B, D, L), given null"}},
      {"URank",
       kFwd,
       [](Call& c, S&) { c.in.u.rank = 2; },
       {"u: expected rank 3, given rank 2 (2, 4)"}},
      {"UZeroBatch",
       kFwd,
       [](Call& c, S&) { c.in.u.shape[0] = 0; },
       {"u: expected batch B >= 1, given B = 0"}},
      {"UZeroChannels",
       kFwd,
       [](Call& c, S&) { c.in.u.shape[1] = 0; },
       {"u: expected channels D >= 1, given D = 0"}},
      {"UZeroLength",
       kFwd,
       [](Call& c, S&) { c.in.u.shape[2] = 0; },
       {"u: expected sequence length L >= 1, given L = 0"}},
      {"UDtype",
       kFwd,
       [](Call& c, S&) { c.in.u.dtype = DType::kF16; },
       {"u: expected dtype f32 or bf16, given f16"}},
      {"ULastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.u.strides[2] = 2; },
       {"u: expected stride 1 on the last dimension, given stride 2"}},
      {"UNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.u.strides[0] = -36; },
       {"u: expected non-negative strides, given stride -36 on dimension 0"}},
      {"UOnCuda",
       kFwd,
       [](Call& c, S&) { c.in.u.device = Device::kCuda; },
       {"u: expected a CPU tensor, given a CUDA tensor"}},
      {"BackwardUZeroLength",
       kBwd,
       [](Call& c, S&) { c.in.u.shape[2] = 0; },
       {"u:", "given L = 0"}},
      {"BackwardUNull", kBwd, [](Call& c, S&) { c.in.u.data = nullptr; }, {"u:", "given null"}},

      // ---- A: null, rank, N in [1, 256], shape, dtype, strides
      {"ANull",
       kFwd,
       [](Call& c, S&) { c.in.A.data = nullptr; },
       {"A: expected a tensor (D, N), given null"}},
      {"ARank",
       kFwd,
       [](Call& c, S&) { c.in.A.rank = 1; },
       {"A: expected rank 2, given rank 1 (4,)"}},
      {"AZeroState",
       kFwd,
       [](Call& c, S&) { c.in.A.shape[1] = 0; },
       {"A: expected state size N in [1, 256], given N = 0"}},
      {"AStateAbove256",
       kFwd,
       [](Call& c, S&) { c.in.A.shape[1] = 257; },
       {"A: expected state size N in [1, 256], given N = 257"}},
      {"AShape",
       kFwd,
       [](Call& c, S&) { c.in.A.shape[0] = 5; },
       {"A: expected shape (D, N) = (4, 3), given (5, 3)"}},
      {"ADtype",
       kFwd,
       [](Call& c, S&) { c.in.A.dtype = DType::kBF16; },
       {"A: expected dtype f32, given bf16"}},
      {"ALastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.A.strides[1] = 3; },
       {"A: expected stride 1 on the last dimension, given stride 3"}},
      {"ANegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.A.strides[0] = -3; },
       {"A: expected non-negative strides, given stride -3 on dimension 0"}},

      // ---- delta
      {"DeltaNull",
       kFwd,
       [](Call& c, S&) { c.in.delta.data = nullptr; },
       {"delta: expected a tensor of shape (B, D, L) = (2, 4, 9), given null"}},
      {"DeltaShapeLength",
       kFwd,
       [](Call& c, S&) { c.in.delta.shape[2] = 8; },
       {"delta: expected shape (B, D, L) = (2, 4, 9), given (2, 4, 8)"}},
      {"DeltaShapeBatch",
       kFwd,
       [](Call& c, S&) { c.in.delta.shape[0] = 1; },
       {"delta: expected shape (B, D, L) = (2, 4, 9), given (1, 4, 9)"}},
      {"DeltaRank",
       kFwd,
       [](Call& c, S&) { c.in.delta.rank = 2; },
       {"delta: expected shape (B, D, L) = (2, 4, 9), given (2, 4)"}},
      {"DeltaDtype",
       kFwd,
       [](Call& c, S&) { c.in.delta.dtype = DType::kI32; },
       {"delta: expected dtype f32 or bf16, given i32"}},
      {"DeltaLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.delta.strides[2] = 0; },
       {"delta: expected stride 1 on the last dimension, given stride 0"}},
      {"DeltaNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.delta.strides[1] = -9; },
       {"delta: expected non-negative strides, given stride -9 on dimension 1"}},
      {"DeltaOnCuda",
       kFwd,
       [](Call& c, S&) { c.in.delta.device = Device::kCuda; },
       {"delta: expected a CPU tensor, given a CUDA tensor"}},

      // ---- B (variable in the valid call): null, rank, each form's shape, groups, dtype, strides
      {"BNull",
       kFwd,
       [](Call& c, S&) { c.in.B.data = nullptr; },
       {"B: expected a tensor (D, N), (B, N, L) or (B, G, N, L), given null"}},
      {"BRankFive",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 1, 2, 3, 9});
       },
       {"B: expected rank 2 or 3 or 4, given rank 5 (2, 1, 2, 3, 9)"}},
      {"BRankOne",
       kFwd,
       [](Call& c, S& s) { c.in.B = s.Make({3}); },
       {"B: expected rank 2 or 3 or 4, given rank 1"}},
      {"BConstantShape",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({4, 2});
       },
       {"B: expected shape (D, N) = (4, 3), given (4, 2)"}},
      {"BVariableShape",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 3, 10});
       },
       {"B: expected shape (B, N, L) = (2, 3, 9), given (2, 3, 10)"}},
      {"BGroupedShape",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 2, 4, 9});
       },
       {"B: expected shape (B, G, N, L) = (2, 2, 3, 9), given (2, 2, 4, 9)"}},
      {"BGroupsNotDividingD",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 3, 3, 9});
       },
       {"B: expected a group count G dividing D = 4, given G = 3"}},
      {"BZeroGroups",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 0, 3, 9});
       },
       {"B: expected a group count G dividing D = 4, given G = 0"}},
      {"BDtype",
       kFwd,
       [](Call& c, S&) { c.in.B.dtype = DType::kF16; },
       {"B: expected dtype f32 or bf16, given f16"}},
      {"BLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.B.strides[2] = 2; },
       {"B: expected stride 1 on the last dimension, given stride 2"}},
      {"BNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.B.strides[1] = -9; },
       {"B: expected non-negative strides, given stride -9 on dimension 1"}},

      // ---- C (grouped in the valid call)
      {"CNull",
       kFwd,
       [](Call& c, S&) { c.in.C.data = nullptr; },
       {"C: expected a tensor (D, N), (B, N, L) or (B, G, N, L), given null"}},
      {"CRank",
       kFwd,
       [](Call& c, S& s) {
         c.in.C = s.Make({2, 1, 2, 3, 9});
       },
       {"C: expected rank 2 or 3 or 4, given rank 5"}},
      {"CConstantShape",
       kFwd,
       [](Call& c, S& s) {
         c.in.C = s.Make({3, 3});
       },
       {"C: expected shape (D, N) = (4, 3), given (3, 3)"}},
      {"CVariableShape",
       kFwd,
       [](Call& c, S& s) {
         c.in.C = s.Make({1, 3, 9});
       },
       {"C: expected shape (B, N, L) = (2, 3, 9), given (1, 3, 9)"}},
      {"CGroupedShape",
       kFwd,
       [](Call& c, S&) { c.in.C.shape[3] = 8; },
       {"C: expected shape (B, G, N, L) = (2, 2, 3, 9), given (2, 2, 3, 8)"}},
      {"CGroupsNotDividingD",
       kFwd,
       [](Call& c, S& s) {
         c.in.C = s.Make({2, 8, 3, 9});
       },
       {"C: expected a group count G dividing D = 4, given G = 8"}},
      {"CDtype",
       kFwd,
       [](Call& c, S&) { c.in.C.dtype = DType::kI64; },
       {"C: expected dtype f32 or bf16, given i64"}},
      {"CLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.C.strides[3] = 3; },
       {"C: expected stride 1 on the last dimension, given stride 3"}},
      {"CNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.C.strides[0] = -54; },
       {"C: expected non-negative strides, given stride -54 on dimension 0"}},

      // ---- D (optional)
      {"DShape",
       kFwd,
       [](Call& c, S&) { c.in.D.shape[0] = 3; },
       {"D: expected shape (D) = (4,), given (3,)"}},
      {"DRank",
       kFwd,
       [](Call& c, S& s) {
         c.in.D = s.Make({4, 1});
       },
       {"D: expected shape (D) = (4,), given (4, 1)"}},
      {"DDtype",
       kFwd,
       [](Call& c, S&) { c.in.D.dtype = DType::kBF16; },
       {"D: expected dtype f32, given bf16"}},
      {"DStride",
       kFwd,
       [](Call& c, S&) { c.in.D.strides[0] = 2; },
       {"D: expected stride 1 on the last dimension, given stride 2"}},

      // ---- z (optional)
      {"ZShape",
       kFwd,
       [](Call& c, S&) { c.in.z.shape[1] = 5; },
       {"z: expected shape (B, D, L) = (2, 4, 9), given (2, 5, 9)"}},
      {"ZDtype",
       kFwd,
       [](Call& c, S&) { c.in.z.dtype = DType::kI32; },
       {"z: expected dtype f32 or bf16, given i32"}},
      {"ZLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.z.strides[2] = 4; },
       {"z: expected stride 1 on the last dimension, given stride 4"}},
      {"ZNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.z.strides[0] = -36; },
       {"z: expected non-negative strides, given stride -36 on dimension 0"}},

      // ---- delta_bias (optional)
      {"DeltaBiasShape",
       kFwd,
       [](Call& c, S&) { c.in.delta_bias.shape[0] = 8; },
       {"delta_bias: expected shape (D) = (4,), given (8,)"}},
      {"DeltaBiasDtype",
       kFwd,
       [](Call& c, S&) { c.in.delta_bias.dtype = DType::kF16; },
       {"delta_bias: expected dtype f32, given f16"}},
      {"DeltaBiasStride",
       kFwd,
       [](Call& c, S&) { c.in.delta_bias.strides[0] = 3; },
       {"delta_bias: expected stride 1 on the last dimension, given stride 3"}},

      // ---- initial_state (optional)
      {"InitialStateShape",
       kFwd,
       [](Call& c, S&) { c.in.initial_state.shape[2] = 4; },
       {"initial_state: expected shape (B, D, N) = (2, 4, 3), given (2, 4, 4)"}},
      {"InitialStateDtype",
       kFwd,
       [](Call& c, S&) { c.in.initial_state.dtype = DType::kBF16; },
       {"initial_state: expected dtype f32, given bf16"}},
      {"InitialStateStride",
       kFwd,
       [](Call& c, S&) { c.in.initial_state.strides[2] = 2; },
       {"initial_state: expected stride 1 on the last dimension, given stride 2"}},

      // ---- out and final_state (forward)
      {"OutNull",
       kFwd,
       [](Call& c, S&) { c.out = Tensor{}; },
       {"out: expected a tensor of shape (B, D, L) = (2, 4, 9), given null"}},
      {"OutShape",
       kFwd,
       [](Call& c, S&) { c.out.shape[1] = 3; },
       {"out: expected shape (B, D, L) = (2, 4, 9), given (2, 3, 9)"}},
      {"OutDtypeNotU",
       kFwd,
       [](Call& c, S&) { c.out.dtype = DType::kBF16; },
       {"out: expected dtype f32, given bf16"}},
      {"OutDtypeNotBf16U",
       kFwd,
       [](Call& c, S&) {
         c.in.u.dtype = c.in.delta.dtype = c.in.z.dtype = c.in.B.dtype = c.in.C.dtype =
             DType::kBF16;
       },
       {"out: expected dtype bf16, given f32"}},
      {"OutStride",
       kFwd,
       [](Call& c, S&) { c.out.strides[2] = 2; },
       {"out: expected stride 1 on the last dimension, given stride 2"}},
      {"OutOnCuda",
       kFwd,
       [](Call& c, S&) { c.out.device = Device::kCuda; },
       {"out: expected a CPU tensor, given a CUDA tensor"}},
      {"FinalStateShape",
       kFwd,
       [](Call& c, S&) { c.final_state.shape[0] = 1; },
       {"final_state: expected shape (B, D, N) = (2, 4, 3), given (1, 4, 3)"}},
      {"FinalStateDtype",
       kFwd,
       [](Call& c, S&) { c.final_state.dtype = DType::kBF16; },
       {"final_state: expected dtype f32, given bf16"}},
      {"FinalStateStride",
       kFwd,
       [](Call& c, S&) { c.final_state.strides[2] = 5; },
       {"final_state: expected stride 1 on the last dimension, given stride 5"}},

      // ---- dout and dfinal_state (backward)
      {"DoutNull",
       kBwd,
       [](Call& c, S&) { c.dout = Tensor{}; },
       {"dout: expected a tensor of shape (B, D, L) = (2, 4, 9), given null"}},
      {"DoutShape",
       kBwd,
       [](Call& c, S&) { c.dout.shape[2] = 10; },
       {"dout: expected shape (B, D, L) = (2, 4, 9), given (2, 4, 10)"}},
      {"DoutDtype",
       kBwd,
       [](Call& c, S&) { c.dout.dtype = DType::kBF16; },
       {"dout: expected dtype f32, given bf16"}},
      {"DoutStride",
       kBwd,
       [](Call& c, S&) { c.dout.strides[2] = 2; },
       {"dout: expected stride 1 on the last dimension, given stride 2"}},
      {"DfinalStateShape",
       kBwd,
       [](Call& c, S&) { c.dfinal.shape[1] = 2; },
       {"dfinal_state: expected shape (B, D, N) = (2, 4, 3), given (2, 2, 3)"}},
      {"DfinalStateDtype",
       kBwd,
       [](Call& c, S&) { c.dfinal.dtype = DType::kBF16; },
       {"dfinal_state: expected dtype f32, given bf16"}},

      // ---- gradients: each one's shape (as its input) and dtype (its input's)
      {"DuShape",
       kBwd,
       [](Call& c, S&) { c.grads.du.shape[0] = 1; },
       {"du: expected shape (as u) = (2, 4, 9), given (1, 4, 9)"}},
      {"DuDtype",
       kBwd,
       [](Call& c, S&) { c.grads.du.dtype = DType::kBF16; },
       {"du: expected dtype f32, given bf16"}},
      {"DuStride",
       kBwd,
       [](Call& c, S&) { c.grads.du.strides[2] = 2; },
       {"du: expected stride 1 on the last dimension, given stride 2"}},
      {"DdeltaShape",
       kBwd,
       [](Call& c, S&) { c.grads.ddelta.shape[1] = 2; },
       {"ddelta: expected shape (as delta) = (2, 4, 9), given (2, 2, 9)"}},
      {"DdeltaDtype",
       kBwd,
       [](Call& c, S&) { c.grads.ddelta.dtype = DType::kF16; },
       {"ddelta: expected dtype f32, given f16"}},
      {"DAShape",
       kBwd,
       [](Call& c, S&) { c.grads.dA.shape[1] = 2; },
       {"dA: expected shape (as A) = (4, 3), given (4, 2)"}},
      {"DADtype",
       kBwd,
       [](Call& c, S&) { c.grads.dA.dtype = DType::kBF16; },
       {"dA: expected dtype f32, given bf16"}},
      {"DBOtherForm",
       kBwd,
       [](Call& c, S& s) {
         c.grads.dB = s.Make({4, 3});
       },
       {"dB: expected shape (as B) = (2, 3, 9), given (4, 3)"}},
      {"DBDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dB.dtype = DType::kBF16; },
       {"dB: expected dtype f32, given bf16"}},
      {"DCShape",
       kBwd,
       [](Call& c, S&) { c.grads.dC.shape[3] = 8; },
       {"dC: expected shape (as C) = (2, 2, 3, 9), given (2, 2, 3, 8)"}},
      {"DCDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dC.dtype = DType::kBF16; },
       {"dC: expected dtype f32, given bf16"}},
      {"DDShape",
       kBwd,
       [](Call& c, S&) { c.grads.dD.shape[0] = 5; },
       {"dD: expected shape (as D) = (4,), given (5,)"}},
      {"DDDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dD.dtype = DType::kBF16; },
       {"dD: expected dtype f32, given bf16"}},
      {"DzShape",
       kBwd,
       [](Call& c, S&) { c.grads.dz.shape[2] = 1; },
       {"dz: expected shape (as z) = (2, 4, 9), given (2, 4, 1)"}},
      {"DzDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dz.dtype = DType::kBF16; },
       {"dz: expected dtype f32, given bf16"}},
      {"DdeltaBiasShape",
       kBwd,
       [](Call& c, S&) { c.grads.ddelta_bias.shape[0] = 1; },
       {"ddelta_bias: expected shape (as delta_bias) = (4,), given (1,)"}},
      {"DdeltaBiasDtype",
       kBwd,
       [](Call& c, S&) { c.grads.ddelta_bias.dtype = DType::kF16; },
       {"ddelta_bias: expected dtype f32, given f16"}},
      {"DinitialStateShape",
       kBwd,
       [](Call& c, S&) { c.grads.dinitial_state.shape[2] = 4; },
       {"dinitial_state: expected shape (as initial_state) = (2, 4, 3), given (2, 4, 4)"}},
      {"DinitialStateDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dinitial_state.dtype = DType::kBF16; },
       {"dinitial_state: expected dtype f32, given bf16"}},

      // ---- chunk states (B, D, K, N), K = ceil(L / Q): Q = 64 gives K = 1, Q = 4 gives K = 3
      {"ChunkStatesShape",
       kFwd,
       [](Call& c, S&) { c.chunk_states.shape[2] = 2; },
       {"chunk_states: expected shape (B, D, K, N), K = ceil(L / Q) = (2, 4, 1, 3), given (2, 4, "
        "2, 3)"}},
      {"ChunkStatesShapeForTheChunkLength",
       kBwd,
       [](Call& c, S&) { c.options.chunk_length = 4; },
       {"chunk_states: expected shape (B, D, K, N), K = ceil(L / Q) = (2, 4, 3, 3), given (2, 4, "
        "1, 3)"}},
      {"ChunkStatesRank",
       kBwd,
       [](Call& c, S& s) {
         c.chunk_states = s.Make({2, 4, 3});
       },
       {"chunk_states", "(2, 4, 1, 3)", "given (2, 4, 3)"}},
      {"ChunkStatesOnCuda",
       kBwd,
       [](Call& c, S&) { c.chunk_states.device = Device::kCuda; },
       {"chunk_states: expected a CPU tensor, given a CUDA tensor"}},
      {"ChunkStatesWithTheCudaBackend",
       kFwd,
       [](Call& c, S&) {
         for (Tensor* t :
              {&c.in.u, &c.in.delta, &c.in.A, &c.in.B, &c.in.C, &c.in.D, &c.in.z, &c.in.delta_bias,
               &c.in.initial_state, &c.out, &c.final_state, &c.chunk_states}) {
           t->device = Device::kCuda;
         }
       },
       {"chunk_states: expected undefined on the CUDA backend (CPU only for now), given a CUDA "
        "tensor"}},
      {"ChunkStatesDtype",
       kFwd,
       [](Call& c, S&) { c.chunk_states.dtype = DType::kBF16; },
       {"chunk_states: expected dtype f32, given bf16"}},

      // ---- a gradient for an absent optional input
      {"DDWithoutD",
       kBwd,
       [](Call& c, S&) { c.in.D = Tensor{}; },
       {"dD: expected no tensor, since D is absent, given a tensor of shape (4,)"}},
      {"DzWithoutZ",
       kBwd,
       [](Call& c, S&) { c.in.z = Tensor{}; },
       {"dz: expected no tensor, since z is absent, given a tensor of shape (2, 4, 9)"}},
      {"DdeltaBiasWithoutDeltaBias",
       kBwd,
       [](Call& c, S&) { c.in.delta_bias = Tensor{}; },
       {"ddelta_bias: expected no tensor, since delta_bias is absent, given a tensor of shape "
        "(4,)"}},
      {"DinitialStateWithoutInitialState",
       kBwd,
       [](Call& c, S&) { c.in.initial_state = Tensor{}; },
       {"dinitial_state: expected no tensor, since initial_state is absent, given a tensor of "
        "shape (2, 4, 3)"}},
  };
}

INSTANTIATE_TEST_SUITE_P(SelectiveScan, ScanErrors, ::testing::ValuesIn(Rules()),
                         [](const ::testing::TestParamInfo<Rule>& info) {
                           return std::string(info.param.name);
                         });

TEST(ScanAlgorithmNames, ParseRejectsUnknownNames) {
  for (const char* bad : {"fastest", "", "Sequential", "log_space", "chunked "}) {
    ScanAlgorithm algorithm = ScanAlgorithm::kChunked;
    const Status s = ParseScanAlgorithm(bad, &algorithm);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(
                  "name: expected sequential, chunked, blelloch, hillis-steele or log-space"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(std::string("given \"") + bad + "\""), std::string::npos)
        << s.message();
    EXPECT_EQ(algorithm, ScanAlgorithm::kChunked) << "the output was written on error";
  }
}

TEST(ScanAlgorithmNames, ParseAcceptsEveryName) {
  for (int a = 0; a <= static_cast<int>(ScanAlgorithm::kLogSpace); ++a) {
    const ScanAlgorithm want = static_cast<ScanAlgorithm>(a);
    ScanAlgorithm got = a == 0 ? ScanAlgorithm::kLogSpace : ScanAlgorithm::kSequential;
    ASSERT_TRUE(ParseScanAlgorithm(ScanAlgorithmName(want), &got).ok()) << ScanAlgorithmName(want);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace ssmkit::testing

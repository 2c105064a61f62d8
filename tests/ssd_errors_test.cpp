// Bad input to the SSD scan: one test per rule of src/ops/ssd.cpp and src/ops/check.cpp, for
// every argument the rule applies to. Each starts from a valid call (B = 2, L = 9, H = 4,
// P = 3, G = 2, N = 5, every optional input present), breaks one thing, and expects
// kInvalidArgument with a message naming the argument and holding the expected and the given
// value, and every output (out, final_states and the nine gradients, filled with a sentinel
// byte pattern) bit-for-bit untouched.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ssd_fixture.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kB = 2, kL = 9, kH = 4, kP = 3, kG = 2, kN = 5;
constexpr uint8_t kSentinel = 0xA5;

// Everything one call passes; valid until a rule breaks it.
struct Call {
  SsdInputs in;
  Tensor out, final_states, dout, dfinal;
  SsdGrads grads;
  SsdOptions options;
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

class SsdCall : public ::testing::Test {
 protected:
  SsdCall() : rng_(FreshSeed()), prob_(MakeCase(), rng_) {
    const std::vector<int64_t> seq = prob_.SeqShape(), state = prob_.StateShape();
    outputs_ = {HostTensor(seq, DType::kF32),
                HostTensor(state, DType::kF32),
                HostTensor(seq, DType::kF32),
                HostTensor({kB, kL, kH}, DType::kF32),
                HostTensor({kH}, DType::kF32),
                HostTensor({kB, kL, kG, kN}, DType::kF32),
                HostTensor({kB, kL, kG, kN}, DType::kF32),
                HostTensor({kH}, DType::kF32),
                HostTensor(seq, DType::kF32),
                HostTensor({kH}, DType::kF32),
                HostTensor(state, DType::kF32)};
    FillSentinel();
    dout_ = HostTensor(seq, DType::kF32);
    dout_.Fill(rng_.NormalVec(dout_.numel()));
    dfinal_ = HostTensor(state, DType::kF32);
    dfinal_.Fill(rng_.NormalVec(dfinal_.numel()));
  }

  static SsdCase MakeCase() {
    SsdCase c;
    c.batch = kB;
    c.seqlen = kL;
    c.nheads = kH;
    c.headdim = kP;
    c.ngroups = kG;
    c.dstate = kN;
    c.has_seq_idx = true;
    return c;
  }

  // The valid call: forward into out / final_states, backward into all nine gradients.
  Call ValidCall(bool backward) {
    Call call;
    call.backward = backward;
    call.in = prob_.Inputs();
    call.out = outputs_[0].view();
    call.final_states = outputs_[1].view();
    call.dout = dout_.view();
    call.dfinal = dfinal_.view();
    SsdGrads& g = call.grads;
    Tensor* grads[] = {
        &g.dx, &g.ddt, &g.dA, &g.dB, &g.dC, &g.dD, &g.dz, &g.ddt_bias, &g.dinitial_states};
    for (int i = 0; i < 9; ++i) *grads[i] = outputs_[2 + i].view();
    return call;
  }

  static Status Run(const Call& call) {
    return call.backward ? SsdBackward(call.in, call.dout, call.dfinal, call.grads, call.options)
                         : SsdForward(call.in, call.out, call.final_states, call.options);
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
  SsdProblem prob_;
  std::vector<HostTensor> outputs_;  // out, final_states, then the gradients in SsdGrads order
  HostTensor dout_, dfinal_;
  Spare spare_;
};

class SsdErrors : public SsdCall, public ::testing::WithParamInterface<Rule> {};

// The starting point of every rule is accepted (so each failure below is the rule's own), and
// a call that succeeds does write its outputs (so the untouched check can see a write).
TEST_F(SsdCall, ValidCallsSucceed) {
  for (SsdAlgorithm a : {SsdAlgorithm::kAuto, SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    for (bool backward : {false, true}) {
      FillSentinel();
      Call call = ValidCall(backward);
      call.options.algorithm = a;
      const Status s = Run(call);
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_FALSE(OutputsUntouched());
    }
  }
}

TEST_P(SsdErrors, Rule) {
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
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<Rule> Rules() {
  using S = Spare;
  return {
      // ---- options
      {"AlgorithmAboveRange",
       kFwd,
       [](Call& c, S&) { c.options.algorithm = static_cast<SsdAlgorithm>(3); },
       {"ssd: options.algorithm: expected an SsdAlgorithm value 0..2, given 3"}},
      {"AlgorithmNegative",
       kFwd,
       [](Call& c, S&) { c.options.algorithm = static_cast<SsdAlgorithm>(-1); },
       {"options.algorithm: expected an SsdAlgorithm value 0..2, given -1"}},
      {"NegativeChunkSize",
       kFwd,
       [](Call& c, S&) { c.options.chunk_size = -4; },
       {"ssd: options.chunk_size: expected 0 (default) or a positive length, given -4"}},
      {"BackwardAlgorithmOutOfRange",
       kBwd,
       [](Call& c, S&) { c.options.algorithm = static_cast<SsdAlgorithm>(9); },
       {"options.algorithm:", "given 9"}},
      {"BackwardNegativeChunkSize",
       kBwd,
       [](Call& c, S&) { c.options.chunk_size = -1; },
       {"options.chunk_size:", "given -1"}},

      // ---- x: null, rank, every size >= 1, dtype, strides, device
      {"XNull",
       kFwd,
       [](Call& c, S&) { c.in.x.data = nullptr; },
       {"ssd: x: expected a tensor (B, L, H, P), given null"}},
      {"XRank",
       kFwd,
       [](Call& c, S&) { c.in.x.rank = 3; },
       {"x: expected rank 4, given rank 3 (2, 9, 4)"}},
      {"XZeroBatch",
       kFwd,
       [](Call& c, S&) { c.in.x.shape[0] = 0; },
       {"x: expected batch B >= 1, given B = 0"}},
      {"XZeroLength",
       kFwd,
       [](Call& c, S&) { c.in.x.shape[1] = 0; },
       {"x: expected sequence length L >= 1, given L = 0"}},
      {"XZeroHeads",
       kFwd,
       [](Call& c, S&) { c.in.x.shape[2] = 0; },
       {"x: expected heads H >= 1, given H = 0"}},
      {"XZeroHeadDim",
       kFwd,
       [](Call& c, S&) { c.in.x.shape[3] = 0; },
       {"x: expected head dim P >= 1, given P = 0"}},
      {"XDtype",
       kFwd,
       [](Call& c, S&) { c.in.x.dtype = DType::kF16; },
       {"x: expected dtype f32 or bf16, given f16"}},
      {"XLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.x.strides[3] = 2; },
       {"x: expected stride 1 on the last dimension, given stride 2"}},
      {"XNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.x.strides[0] = -108; },
       {"x: expected non-negative strides, given stride -108 on dimension 0"}},
      {"XOnCuda",
       kFwd,
       [](Call& c, S&) { c.in.x.device = Device::kCuda; },
       {"x: expected a CPU tensor, given a CUDA tensor"}},
      {"BackwardXNull", kBwd, [](Call& c, S&) { c.in.x.data = nullptr; }, {"x:", "given null"}},
      {"BackwardXZeroLength",
       kBwd,
       [](Call& c, S&) { c.in.x.shape[1] = 0; },
       {"x:", "given L = 0"}},

      // ---- dt
      {"DtNull",
       kFwd,
       [](Call& c, S&) { c.in.dt.data = nullptr; },
       {"dt: expected a tensor of shape (B, L, H) = (2, 9, 4), given null"}},
      {"DtShape",
       kFwd,
       [](Call& c, S&) { c.in.dt.shape[2] = 3; },
       {"dt: expected shape (B, L, H) = (2, 9, 4), given (2, 9, 3)"}},
      {"DtRank",
       kFwd,
       [](Call& c, S& s) {
         c.in.dt = s.Make({2, 9, 4, 1});
       },
       {"dt: expected shape (B, L, H) = (2, 9, 4), given (2, 9, 4, 1)"}},
      {"DtDtype",
       kFwd,
       [](Call& c, S&) { c.in.dt.dtype = DType::kI32; },
       {"dt: expected dtype f32 or bf16, given i32"}},
      {"DtLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.dt.strides[2] = 3; },
       {"dt: expected stride 1 on the last dimension, given stride 3"}},
      {"DtOnCuda",
       kFwd,
       [](Call& c, S&) { c.in.dt.device = Device::kCuda; },
       {"dt: expected a CPU tensor, given a CUDA tensor"}},

      // ---- A
      {"ANull",
       kFwd,
       [](Call& c, S&) { c.in.A.data = nullptr; },
       {"A: expected a tensor of shape (H) = (4,), given null"}},
      {"AShape",
       kFwd,
       [](Call& c, S&) { c.in.A.shape[0] = 5; },
       {"A: expected shape (H) = (4,), given (5,)"}},
      {"APerState",
       kFwd,
       [](Call& c, S& s) {
         c.in.A = s.Make({4, 5});
       },
       {"A: expected shape (H) = (4,), given (4, 5)"}},
      {"ADtype",
       kFwd,
       [](Call& c, S&) { c.in.A.dtype = DType::kBF16; },
       {"A: expected dtype f32, given bf16"}},
      {"AStride",
       kFwd,
       [](Call& c, S&) { c.in.A.strides[0] = 2; },
       {"A: expected stride 1 on the last dimension, given stride 2"}},

      // ---- B: null, rank, N >= 1, groups, shape, dtype, strides
      {"BNull",
       kFwd,
       [](Call& c, S&) { c.in.B.data = nullptr; },
       {"ssd: B: expected a tensor (B, L, G, N), given null"}},
      {"BRank",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 9, 10});
       },
       {"B: expected rank 4, given rank 3 (2, 9, 10)"}},
      {"BZeroState",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 9, 2, 0});
       },
       {"B: expected state size N >= 1, given N = 0"}},
      {"BGroupsNotDividingH",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 9, 3, 5});
       },
       {"B: expected a group count G dividing H = 4, given G = 3"}},
      {"BZeroGroups",
       kFwd,
       [](Call& c, S& s) {
         c.in.B = s.Make({2, 9, 0, 5});
       },
       {"B: expected a group count G dividing H = 4, given G = 0"}},
      {"BShapeLength",
       kFwd,
       [](Call& c, S&) { c.in.B.shape[1] = 8; },
       {"B: expected shape (B, L, G, N) = (2, 9, 2, 5), given (2, 8, 2, 5)"}},
      {"BShapeBatch",
       kFwd,
       [](Call& c, S&) { c.in.B.shape[0] = 1; },
       {"B: expected shape (B, L, G, N) = (2, 9, 2, 5), given (1, 9, 2, 5)"}},
      {"BDtype",
       kFwd,
       [](Call& c, S&) { c.in.B.dtype = DType::kF16; },
       {"B: expected dtype f32 or bf16, given f16"}},
      {"BLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.B.strides[3] = 2; },
       {"B: expected stride 1 on the last dimension, given stride 2"}},
      {"BNegativeStride",
       kFwd,
       [](Call& c, S&) { c.in.B.strides[1] = -10; },
       {"B: expected non-negative strides, given stride -10 on dimension 1"}},

      // ---- C
      {"CNull",
       kFwd,
       [](Call& c, S&) { c.in.C.data = nullptr; },
       {"C: expected a tensor of shape (B, L, G, N) = (2, 9, 2, 5), given null"}},
      {"CShapeState",
       kFwd,
       [](Call& c, S&) { c.in.C.shape[3] = 4; },
       {"C: expected shape (B, L, G, N) = (2, 9, 2, 5), given (2, 9, 2, 4)"}},
      {"CGroupsDifferFromB",
       kFwd,
       [](Call& c, S& s) {
         c.in.C = s.Make({2, 9, 1, 5});
       },
       {"C: expected shape (B, L, G, N) = (2, 9, 2, 5), given (2, 9, 1, 5)"}},
      {"CDtype",
       kFwd,
       [](Call& c, S&) { c.in.C.dtype = DType::kI64; },
       {"C: expected dtype f32 or bf16, given i64"}},
      {"COnCuda",
       kFwd,
       [](Call& c, S&) { c.in.C.device = Device::kCuda; },
       {"C: expected a CPU tensor, given a CUDA tensor"}},

      // ---- D (optional): (H) or (H, P)
      {"DRank",
       kFwd,
       [](Call& c, S& s) {
         c.in.D = s.Make({4, 3, 1});
       },
       {"D: expected rank 1 or 2, given rank 3 (4, 3, 1)"}},
      {"DPerHeadShape",
       kFwd,
       [](Call& c, S&) { c.in.D.shape[0] = 5; },
       {"D: expected shape (H) = (4,), given (5,)"}},
      {"DPerChannelShape",
       kFwd,
       [](Call& c, S& s) {
         c.in.D = s.Make({4, 2});
       },
       {"D: expected shape (H, P) = (4, 3), given (4, 2)"}},
      {"DDtype",
       kFwd,
       [](Call& c, S&) { c.in.D.dtype = DType::kBF16; },
       {"D: expected dtype f32, given bf16"}},

      // ---- z, dt_bias, initial_states, seq_idx (optional)
      {"ZShape",
       kFwd,
       [](Call& c, S&) { c.in.z.shape[2] = 5; },
       {"z: expected shape (B, L, H, P) = (2, 9, 4, 3), given (2, 9, 5, 3)"}},
      {"ZDtype",
       kFwd,
       [](Call& c, S&) { c.in.z.dtype = DType::kI32; },
       {"z: expected dtype f32 or bf16, given i32"}},
      {"ZLastDimStride",
       kFwd,
       [](Call& c, S&) { c.in.z.strides[3] = 4; },
       {"z: expected stride 1 on the last dimension, given stride 4"}},
      {"DtBiasShape",
       kFwd,
       [](Call& c, S&) { c.in.dt_bias.shape[0] = 8; },
       {"dt_bias: expected shape (H) = (4,), given (8,)"}},
      {"DtBiasDtype",
       kFwd,
       [](Call& c, S&) { c.in.dt_bias.dtype = DType::kF16; },
       {"dt_bias: expected dtype f32, given f16"}},
      {"InitialStatesShape",
       kFwd,
       [](Call& c, S&) { c.in.initial_states.shape[3] = 4; },
       {"initial_states: expected shape (B, H, P, N) = (2, 4, 3, 5), given (2, 4, 3, 4)"}},
      {"InitialStatesDtype",
       kFwd,
       [](Call& c, S&) { c.in.initial_states.dtype = DType::kBF16; },
       {"initial_states: expected dtype f32, given bf16"}},
      {"InitialStatesStride",
       kFwd,
       [](Call& c, S&) { c.in.initial_states.strides[3] = 2; },
       {"initial_states: expected stride 1 on the last dimension, given stride 2"}},
      {"SeqIdxShape",
       kFwd,
       [](Call& c, S&) { c.in.seq_idx.shape[1] = 8; },
       {"seq_idx: expected shape (B, L) = (2, 9), given (2, 8)"}},
      {"SeqIdxFloat",
       kFwd,
       [](Call& c, S&) { c.in.seq_idx.dtype = DType::kF32; },
       {"seq_idx: expected dtype i32, given f32"}},
      {"SeqIdxInt64",
       kFwd,
       [](Call& c, S&) { c.in.seq_idx.dtype = DType::kI64; },
       {"seq_idx: expected dtype i32, given i64"}},

      // ---- dt_limit
      {"DtLimitInverted",
       kFwd,
       [](Call& c, S&) { c.in.dt_min = 1.0f, c.in.dt_max = 0.5f; },
       {"ssd: dt_limit: expected dt_min <= dt_max (neither NaN), given (1.000000, 0.500000)"}},
      {"DtLimitNaN",
       kFwd,
       [](Call& c, S&) { c.in.dt_max = kNaN; },
       {"dt_limit: expected dt_min <= dt_max (neither NaN), given (0.000000, nan)"}},
      {"BackwardDtLimitNaN",
       kBwd,
       [](Call& c, S&) { c.in.dt_min = kNaN; },
       {"dt_limit:", "given (nan, "}},

      // ---- out and final_states (forward)
      {"OutNull",
       kFwd,
       [](Call& c, S&) { c.out = Tensor{}; },
       {"out: expected a tensor of shape (B, L, H, P) = (2, 9, 4, 3), given null"}},
      {"OutShape",
       kFwd,
       [](Call& c, S&) { c.out.shape[1] = 3; },
       {"out: expected shape (B, L, H, P) = (2, 9, 4, 3), given (2, 3, 4, 3)"}},
      {"OutDtypeNotX",
       kFwd,
       [](Call& c, S&) { c.out.dtype = DType::kBF16; },
       {"out: expected dtype f32, given bf16"}},
      {"OutDtypeNotBf16X",
       kFwd,
       [](Call& c, S&) { c.in.x.dtype = DType::kBF16; },
       {"out: expected dtype bf16, given f32"}},
      {"OutOnCuda",
       kFwd,
       [](Call& c, S&) { c.out.device = Device::kCuda; },
       {"out: expected a CPU tensor, given a CUDA tensor"}},
      {"FinalStatesShape",
       kFwd,
       [](Call& c, S&) { c.final_states.shape[0] = 1; },
       {"final_states: expected shape (B, H, P, N) = (2, 4, 3, 5), given (1, 4, 3, 5)"}},
      {"FinalStatesDtype",
       kFwd,
       [](Call& c, S&) { c.final_states.dtype = DType::kBF16; },
       {"final_states: expected dtype f32, given bf16"}},

      // ---- dout and dfinal_states (backward)
      {"DoutNull",
       kBwd,
       [](Call& c, S&) { c.dout = Tensor{}; },
       {"dout: expected a tensor of shape (B, L, H, P) = (2, 9, 4, 3), given null"}},
      {"DoutShape",
       kBwd,
       [](Call& c, S&) { c.dout.shape[3] = 4; },
       {"dout: expected shape (B, L, H, P) = (2, 9, 4, 3), given (2, 9, 4, 4)"}},
      {"DoutDtype",
       kBwd,
       [](Call& c, S&) { c.dout.dtype = DType::kBF16; },
       {"dout: expected dtype f32, given bf16"}},
      {"DfinalStatesShape",
       kBwd,
       [](Call& c, S&) { c.dfinal.shape[1] = 2; },
       {"dfinal_states: expected shape (B, H, P, N) = (2, 4, 3, 5), given (2, 2, 3, 5)"}},
      {"DfinalStatesDtype",
       kBwd,
       [](Call& c, S&) { c.dfinal.dtype = DType::kBF16; },
       {"dfinal_states: expected dtype f32, given bf16"}},

      // ---- gradients: each one's shape (as its input) and dtype (its input's)
      {"DxShape",
       kBwd,
       [](Call& c, S&) { c.grads.dx.shape[0] = 1; },
       {"dx: expected shape (as x) = (2, 9, 4, 3), given (1, 9, 4, 3)"}},
      {"DxDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dx.dtype = DType::kBF16; },
       {"dx: expected dtype f32, given bf16"}},
      {"DxStride",
       kBwd,
       [](Call& c, S&) { c.grads.dx.strides[3] = 2; },
       {"dx: expected stride 1 on the last dimension, given stride 2"}},
      {"DdtShape",
       kBwd,
       [](Call& c, S&) { c.grads.ddt.shape[1] = 2; },
       {"ddt: expected shape (as dt) = (2, 9, 4), given (2, 2, 4)"}},
      {"DdtDtype",
       kBwd,
       [](Call& c, S&) { c.grads.ddt.dtype = DType::kF16; },
       {"ddt: expected dtype f32, given f16"}},
      {"DAShape",
       kBwd,
       [](Call& c, S&) { c.grads.dA.shape[0] = 2; },
       {"dA: expected shape (as A) = (4,), given (2,)"}},
      {"DADtype",
       kBwd,
       [](Call& c, S&) { c.grads.dA.dtype = DType::kBF16; },
       {"dA: expected dtype f32, given bf16"}},
      {"DBShape",
       kBwd,
       [](Call& c, S&) { c.grads.dB.shape[2] = 1; },
       {"dB: expected shape (as B) = (2, 9, 2, 5), given (2, 9, 1, 5)"}},
      {"DBDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dB.dtype = DType::kBF16; },
       {"dB: expected dtype f32, given bf16"}},
      {"DCShape",
       kBwd,
       [](Call& c, S&) { c.grads.dC.shape[3] = 8; },
       {"dC: expected shape (as C) = (2, 9, 2, 5), given (2, 9, 2, 8)"}},
      {"DCDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dC.dtype = DType::kBF16; },
       {"dC: expected dtype f32, given bf16"}},
      {"DDShape",
       kBwd,
       [](Call& c, S&) { c.grads.dD.shape[0] = 5; },
       {"dD: expected shape (as D) = (4,), given (5,)"}},
      {"DDOtherForm",
       kBwd,
       [](Call& c, S& s) {
         c.grads.dD = s.Make({4, 3});
       },
       {"dD: expected shape (as D) = (4,), given (4, 3)"}},
      {"DDDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dD.dtype = DType::kBF16; },
       {"dD: expected dtype f32, given bf16"}},
      {"DzShape",
       kBwd,
       [](Call& c, S&) { c.grads.dz.shape[1] = 1; },
       {"dz: expected shape (as z) = (2, 9, 4, 3), given (2, 1, 4, 3)"}},
      {"DzDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dz.dtype = DType::kBF16; },
       {"dz: expected dtype f32, given bf16"}},
      {"DdtBiasShape",
       kBwd,
       [](Call& c, S&) { c.grads.ddt_bias.shape[0] = 1; },
       {"ddt_bias: expected shape (as dt_bias) = (4,), given (1,)"}},
      {"DdtBiasDtype",
       kBwd,
       [](Call& c, S&) { c.grads.ddt_bias.dtype = DType::kF16; },
       {"ddt_bias: expected dtype f32, given f16"}},
      {"DinitialStatesShape",
       kBwd,
       [](Call& c, S&) { c.grads.dinitial_states.shape[2] = 4; },
       {"dinitial_states: expected shape (as initial_states) = (2, 4, 3, 5), given (2, 4, 4, 5)"}},
      {"DinitialStatesDtype",
       kBwd,
       [](Call& c, S&) { c.grads.dinitial_states.dtype = DType::kBF16; },
       {"dinitial_states: expected dtype f32, given bf16"}},

      // ---- a gradient for an absent optional input
      {"DDWithoutD",
       kBwd,
       [](Call& c, S&) { c.in.D = Tensor{}; },
       {"dD: expected no tensor, since D is absent, given a tensor of shape (4,)"}},
      {"DzWithoutZ",
       kBwd,
       [](Call& c, S&) { c.in.z = Tensor{}; },
       {"dz: expected no tensor, since z is absent, given a tensor of shape (2, 9, 4, 3)"}},
      {"DdtBiasWithoutDtBias",
       kBwd,
       [](Call& c, S&) { c.in.dt_bias = Tensor{}; },
       {"ddt_bias: expected no tensor, since dt_bias is absent, given a tensor of shape (4,)"}},
      {"DinitialStatesWithoutInitialStates",
       kBwd,
       [](Call& c, S&) { c.in.initial_states = Tensor{}; },
       {"dinitial_states: expected no tensor, since initial_states is absent, given a tensor of "
        "shape (2, 4, 3, 5)"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Ssd, SsdErrors, ::testing::ValuesIn(Rules()),
                         [](const ::testing::TestParamInfo<Rule>& info) {
                           return std::string(info.param.name);
                         });

TEST(SsdAlgorithmNames, ParseRejectsUnknownNames) {
  for (const char* bad : {"fastest", "", "Chunked", "sequential "}) {
    SsdAlgorithm algorithm = SsdAlgorithm::kChunked;
    const Status s = ParseSsdAlgorithm(bad, &algorithm);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("name: expected auto, chunked or sequential"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(std::string("given \"") + bad + "\""), std::string::npos)
        << s.message();
    EXPECT_EQ(algorithm, SsdAlgorithm::kChunked) << "the output was written on error";
  }
}

TEST(SsdAlgorithmNames, ParseAcceptsEveryName) {
  for (int a = 0; a <= static_cast<int>(SsdAlgorithm::kSequential); ++a) {
    const SsdAlgorithm want = static_cast<SsdAlgorithm>(a);
    SsdAlgorithm got = a == 0 ? SsdAlgorithm::kSequential : SsdAlgorithm::kAuto;
    ASSERT_TRUE(ParseSsdAlgorithm(SsdAlgorithmName(want), &got).ok()) << SsdAlgorithmName(want);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace ssmkit::testing

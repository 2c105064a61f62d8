// Bad packed-sequence arguments (src/ops/varlen.cpp and the ops' own varlen rules) for the
// selective scan, SSD and causal conv1d. Each rule starts from a valid packed call (batch 1,
// L = 9, three sequences: cu_seqlens = [0, 2, 5, 9] and a seq_idx that agrees), breaks one
// thing, and expects a Status naming the argument with the expected and the given value, and
// every output (filled with a sentinel byte pattern) bit-for-bit untouched.
#include <cstring>
#include <deque>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "ssmkit/conv1d.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kL = 9, kS = 3;
constexpr uint8_t kSentinel = 0xA5;

// Storage for every tensor of the calls below, valid values in the inputs and the sentinel
// in the outputs.
class Tensors {
 public:
  Tensor In(std::initializer_list<int64_t> shape, DType dtype = DType::kF32) {
    return Make(shape, dtype, false);
  }
  Tensor Out(std::initializer_list<int64_t> shape, DType dtype = DType::kF32) {
    return Make(shape, dtype, true);
  }
  // Index tensors hold what the caller gives.
  Tensor Index(const std::vector<int64_t>& values, std::initializer_list<int64_t> shape,
               DType dtype) {
    HostTensor& t = store_.emplace_back(std::vector<int64_t>(shape), dtype);
    is_output_.push_back(false);
    t.Fill(std::vector<double>(values.begin(), values.end()));
    return t.view();
  }
  bool OutputsUntouched() const {
    for (size_t i = 0; i < store_.size(); ++i) {
      if (!is_output_[i]) continue;
      for (uint8_t byte : store_[i].bytes()) {
        if (byte != kSentinel) return false;
      }
    }
    return true;
  }

 private:
  Tensor Make(std::initializer_list<int64_t> shape, DType dtype, bool output) {
    HostTensor& t = store_.emplace_back(std::vector<int64_t>(shape), dtype);
    is_output_.push_back(output);
    if (output) {
      std::memset(t.data(), kSentinel, t.bytes().size());
    } else {
      t.Fill(std::vector<double>(t.numel(), 0.25));
    }
    return t.view();
  }
  std::deque<HostTensor> store_;  // stable addresses
  std::vector<bool> is_output_;
};

const std::vector<int64_t> kCu = {0, 2, 5, 9};
const std::vector<int64_t> kSeqIdx = {0, 0, 1, 1, 1, 2, 2, 2, 2};

// Breaks shared by the three ops: a change to seq_idx / cu_seqlens and the message.
struct PackedRule {
  const char* name;
  std::function<void(Tensor& seq_idx, Tensor& cu_seqlens, Tensors&)> breaks;
  std::vector<std::string> message;
  bool conv = true;  // applies to conv1d (which takes seq_idx only)
};

std::vector<PackedRule> PackedRules() {
  return {
      {"CuSeqlensNotIncreasing",
       [](Tensor&, Tensor& cu, Tensors& t) {
         cu = t.Index({0, 5, 5, 9}, {4}, DType::kI64);
       },
       {"cu_seqlens: expected strictly increasing offsets (every sequence length >= 1), given "
        "cu_seqlens[1] = 5, cu_seqlens[2] = 5"},
       false},
      {"CuSeqlensDecreasing",
       [](Tensor&, Tensor& cu, Tensors& t) {
         cu = t.Index({0, 6, 5, 9}, {4}, DType::kI32);
       },
       {"cu_seqlens[1] = 6, cu_seqlens[2] = 5"},
       false},
      {"CuSeqlensLastNotL",
       [](Tensor&, Tensor& cu, Tensors& t) {
         cu = t.Index({0, 2, 5, 8}, {4}, DType::kI64);
       },
       {"cu_seqlens: expected cu_seqlens[S] = L = 9, given cu_seqlens[3] = 8"},
       false},
      {"CuSeqlensFirstNotZero",
       [](Tensor&, Tensor& cu, Tensors& t) {
         cu = t.Index({1, 2, 5, 9}, {4}, DType::kI64);
       },
       {"cu_seqlens: expected cu_seqlens[0] = 0, given cu_seqlens[0] = 1"},
       false},
      {"CuSeqlensDtype",
       [](Tensor&, Tensor& cu, Tensors& t) { cu = t.In({4}, DType::kF32); },
       {"cu_seqlens: expected dtype i32 or i64, given f32"},
       false},
      {"CuSeqlensRank",
       [](Tensor&, Tensor& cu, Tensors& t) {
         cu = t.In({1, 4}, DType::kI64);
       },
       {"cu_seqlens: expected rank 1, given rank 2 (1, 4)"},
       false},
      {"CuSeqlensNoSequence",
       [](Tensor& seq_idx, Tensor& cu, Tensors& t) {
         cu = t.Index({0}, {1}, DType::kI64);
         seq_idx = Tensor{};
       },
       {"cu_seqlens: expected S + 1 >= 2 offsets (S >= 1 sequences), given (1,)"},
       false},
      {"CuSeqlensStride",
       [](Tensor&, Tensor& cu, Tensors&) { cu.strides[0] = 2; },
       {"cu_seqlens: expected stride 1 on the last dimension, given stride 2"},
       false},
      {"SeqIdxDecreasing",
       [](Tensor& seq_idx, Tensor& cu, Tensors& t) {
         seq_idx = t.Index({0, 0, 1, 1, 0, 2, 2, 2, 2}, {1, kL}, DType::kI32);
         cu = Tensor{};
       },
       {"seq_idx: expected values non-decreasing along L, given seq_idx[0, 3] = 1, seq_idx[0, 4] "
        "= 0"}},
      {"SeqIdxDtype",
       [](Tensor& seq_idx, Tensor&, Tensors& t) {
         seq_idx = t.Index(kSeqIdx, {1, kL}, DType::kI64);
       },
       {"seq_idx: expected dtype i32, given i64"}},
      {"SeqIdxShape",
       [](Tensor& seq_idx, Tensor&, Tensors& t) {
         seq_idx = t.In({1, kL - 1}, DType::kI32);
       },
       {"seq_idx: expected shape (B, L) = (1, 9), given (1, 8)"}},
      {"SeqIdxDisagreesWithCuSeqlens",
       [](Tensor& seq_idx, Tensor&, Tensors& t) {
         seq_idx = t.Index({0, 0, 0, 1, 1, 2, 2, 2, 2}, {1, kL}, DType::kI32);
       },
       {"seq_idx: expected a change exactly where cu_seqlens starts a sequence (position 2 starts "
        "one), given seq_idx[0, 1] = 0, seq_idx[0, 2] = 0"},
       false},
      {"SeqIdxOnCuda",
       [](Tensor& seq_idx, Tensor&, Tensors&) { seq_idx.device = Device::kCuda; },
       {"seq_idx: expected a CPU tensor, given a CUDA tensor"}},
      {"CuSeqlensOnCuda",
       [](Tensor&, Tensor& cu, Tensors&) { cu.device = Device::kCuda; },
       {"cu_seqlens: expected a CPU tensor, given a CUDA tensor"},
       false},
  };
}

// One rule of one op: a break of its valid call, and the Status it must give.
template <class Call>
struct Rule {
  const char* name;
  bool backward;
  std::function<void(Call&, Tensors&)> breaks;
  std::vector<std::string> message;  // substrings the status message must hold
  StatusCode code = StatusCode::kInvalidArgument;
};

template <class Call>
void PrintTo(const Rule<Call>& r, std::ostream* os) {
  *os << r.name;
}

template <class Call>
std::string RuleName(const ::testing::TestParamInfo<Rule<Call>>& info) {
  return std::string(info.param.backward ? "Backward" : "Forward") + info.param.name;
}

// The starting point of every rule is accepted and writes its outputs.
template <class Call>
void ExpectValidCallsSucceed(Call (*valid)(Tensors&, bool)) {
  for (bool backward : {false, true}) {
    Tensors t;
    const Status s = valid(t, backward).Run();
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_FALSE(t.OutputsUntouched());
  }
}

template <class Call>
void ExpectRejected(const Rule<Call>& rule, Call (*valid)(Tensors&, bool)) {
  Tensors t;
  Call call = valid(t, rule.backward);
  rule.breaks(call, t);
  const Status s = call.Run();
  EXPECT_EQ(s.code(), rule.code) << s.message();
  for (const std::string& piece : rule.message) {
    EXPECT_NE(s.message().find(piece), std::string::npos)
        << "missing \"" << piece << "\" in: " << s.message();
  }
  EXPECT_TRUE(t.OutputsUntouched()) << "an output was written by a call that failed";
}

// The shared packing rules for both directions of an op; `drop_per_sequence` removes the
// per-sequence tensors from a call whose break removed cu_seqlens.
template <class Call, class Drop>
void AddPackedRules(std::vector<Rule<Call>>* rules, bool takes_cu_seqlens, Drop drop_per_sequence) {
  for (const PackedRule& r : PackedRules()) {
    if (!takes_cu_seqlens && !r.conv) continue;
    for (bool backward : {false, true}) {
      rules->push_back({r.name, backward,
                        [r, drop_per_sequence](Call& c, Tensors& t) {
                          Tensor no_cu_seqlens;
                          Tensor& cu = c.CuSeqlens() ? *c.CuSeqlens() : no_cu_seqlens;
                          r.breaks(c.SeqIdx(), cu, t);
                          if (!cu.defined()) drop_per_sequence(c);
                        },
                        r.message});
    }
  }
}

// ---- selective scan (B = 1, D = 4, L = 9, N = 3)

struct ScanCall {
  SelectiveScanInputs in;
  SelectiveScanOutputs out;
  SelectiveScanOutputGrads dout;
  SelectiveScanGrads grads;
  bool backward = false;
  Status Run() const {
    return backward ? SelectiveScanBackward(in, dout, Tensor{}, grads)
                    : SelectiveScanForward(in, out);
  }
  Tensor& SeqIdx() { return in.seq_idx; }
  Tensor* CuSeqlens() { return &in.cu_seqlens; }
};

ScanCall ValidScan(Tensors& t, bool backward) {
  ScanCall c;
  c.backward = backward;
  c.in.u = t.In({1, 4, kL});
  c.in.delta = t.In({1, 4, kL});
  c.in.A = t.In({4, 3});
  c.in.B = t.In({1, 3, kL});
  c.in.C = t.In({1, 3, kL});
  c.in.initial_state = t.In({kS, 4, 3});
  c.in.seq_idx = t.Index(kSeqIdx, {1, kL}, DType::kI32);
  c.in.cu_seqlens = t.Index(kCu, {kS + 1}, DType::kI64);
  c.out = {t.Out({1, 4, kL}), t.Out({1, 4, 3}), Tensor{}, t.Out({kS, 4, 3})};
  c.dout = {t.In({1, 4, kL}), t.In({1, 4, 3}), t.In({kS, 4, 3})};
  c.grads.du = t.Out({1, 4, kL});
  c.grads.dinitial_state = t.Out({kS, 4, 3});
  return c;
}

std::vector<Rule<ScanCall>> ScanRules() {
  std::vector<Rule<ScanCall>> rules = {
      {"VarlenStatesWithoutCuSeqlens",
       false,
       [](ScanCall& c, Tensors&) {
         c.in.cu_seqlens = Tensor{};
         c.in.initial_state = Tensor{};
       },
       {"selective_scan: varlen_states: expected no tensor without cu_seqlens (one state per "
        "sequence), given a tensor (3, 4, 3)"}},
      {"VarlenStatesShape",
       false,
       [](ScanCall& c, Tensors& t) {
         c.out.varlen_states = t.Out({2, 4, 3});
       },
       {"varlen_states: expected shape (S, D, N) = (3, 4, 3), given (2, 4, 3)"}},
      {"VarlenStatesDtype",
       false,
       [](ScanCall& c, Tensors& t) {
         c.out.varlen_states = t.Out({kS, 4, 3}, DType::kBF16);
       },
       {"varlen_states: expected dtype f32, given bf16"}},
      {"DvarlenStatesShape",
       true,
       [](ScanCall& c, Tensors& t) {
         c.dout.dvarlen_states = t.In({kS, 4, 2});
       },
       {"dvarlen_states: expected shape (S, D, N) = (3, 4, 3), given (3, 4, 2)"}},
      {"DvarlenStatesWithoutCuSeqlens",
       true,
       [](ScanCall& c, Tensors&) {
         c.in.cu_seqlens = Tensor{};
         c.in.initial_state = Tensor{};
         c.grads.dinitial_state = Tensor{};
       },
       {"dvarlen_states: expected no tensor without cu_seqlens"}},
      {"InitialStateNeitherBatchNorSequences",
       false,
       [](ScanCall& c, Tensors& t) {
         c.in.initial_state = t.In({2, 4, 3});
       },
       {"initial_state: expected shape (B, D, N) (or (S, D, N) with cu_seqlens) = (1, 4, 3), "
        "given (2, 4, 3)"}},
      {"CuSeqlensWithBatchTwo",
       false,
       [](ScanCall& c, Tensors& t) {
         c.in.u = t.In({2, 4, kL});
         c.in.delta = t.In({2, 4, kL});
         c.in.B = t.In({2, 3, kL});
         c.in.C = t.In({2, 3, kL});
         c.in.seq_idx = Tensor{};
         c.out.out = t.Out({2, 4, kL});
         c.out.final_state = t.Out({2, 4, 3});
       },
       {"selective_scan: cu_seqlens: expected batch B = 1 (the sequences are packed along L), "
        "given B = 2"}},
  };
  AddPackedRules(&rules, true, [](ScanCall& c) {
    c.in.initial_state = Tensor{};
    c.out.varlen_states = Tensor{};
    c.dout.dvarlen_states = Tensor{};
    c.grads.dinitial_state = Tensor{};
  });
  return rules;
}

class ScanVarlenErrors : public ::testing::TestWithParam<Rule<ScanCall>> {};

TEST(ScanVarlenErrorsStart, ValidCallsSucceed) { ExpectValidCallsSucceed(&ValidScan); }

TEST_P(ScanVarlenErrors, Rule) { ExpectRejected(GetParam(), &ValidScan); }

INSTANTIATE_TEST_SUITE_P(SelectiveScan, ScanVarlenErrors, ::testing::ValuesIn(ScanRules()),
                         RuleName<ScanCall>);

// ---- SSD (B = 1, L = 9, H = 2, P = 2, G = 1, N = 4)

struct SsdCall {
  SsdInputs in;
  SsdOutputs out;
  SsdOutputGrads dout;
  SsdGrads grads;
  bool backward = false;
  Status Run() const { return backward ? SsdBackward(in, dout, grads) : SsdForward(in, out); }
  Tensor& SeqIdx() { return in.seq_idx; }
  Tensor* CuSeqlens() { return &in.cu_seqlens; }
};

SsdCall ValidSsd(Tensors& t, bool backward) {
  SsdCall c;
  c.backward = backward;
  c.in.x = t.In({1, kL, 2, 2});
  c.in.dt = t.In({1, kL, 2});
  c.in.A = t.In({2});
  c.in.B = t.In({1, kL, 1, 4});
  c.in.C = t.In({1, kL, 1, 4});
  c.in.initial_states = t.In({kS, 2, 2, 4});
  c.in.seq_idx = t.Index(kSeqIdx, {1, kL}, DType::kI32);
  c.in.cu_seqlens = t.Index(kCu, {kS + 1}, DType::kI32);
  c.out = {t.Out({1, kL, 2, 2}), t.Out({1, 2, 2, 4}), t.Out({kS, 2, 2, 4})};
  c.dout = {t.In({1, kL, 2, 2}), t.In({1, 2, 2, 4}), t.In({kS, 2, 2, 4})};
  c.grads.dx = t.Out({1, kL, 2, 2});
  c.grads.dinitial_states = t.Out({kS, 2, 2, 4});
  return c;
}

std::vector<Rule<SsdCall>> SsdRules() {
  std::vector<Rule<SsdCall>> rules = {
      {"VarlenStatesWithoutCuSeqlens",
       false,
       [](SsdCall& c, Tensors&) {
         c.in.cu_seqlens = Tensor{};
         c.in.initial_states = Tensor{};
       },
       {"ssd: varlen_states: expected no tensor without cu_seqlens (one state per sequence), "
        "given a tensor (3, 2, 2, 4)"}},
      {"VarlenStatesShape",
       false,
       [](SsdCall& c, Tensors& t) {
         c.out.varlen_states = t.Out({kS, 2, 2, 3});
       },
       {"varlen_states: expected shape (S, H, P, N) = (3, 2, 2, 4), given (3, 2, 2, 3)"}},
      {"DvarlenStatesShape",
       true,
       [](SsdCall& c, Tensors& t) {
         c.dout.dvarlen_states = t.In({1, 2, 2, 4});
       },
       {"dvarlen_states: expected shape (S, H, P, N) = (3, 2, 2, 4), given (1, 2, 2, 4)"}},
      {"InitialStatesNeitherBatchNorSequences",
       false,
       [](SsdCall& c, Tensors& t) {
         c.in.initial_states = t.In({2, 2, 2, 4});
       },
       {"initial_states: expected shape (B, H, P, N) (or (S, H, P, N) with cu_seqlens) = (1, 2, "
        "2, 4), given (2, 2, 2, 4)"}},
      {"CuSeqlensOnTheCudaBackend",
       false,
       [](SsdCall& c, Tensors&) {
         for (Tensor* x :
              {&c.in.x, &c.in.dt, &c.in.A, &c.in.B, &c.in.C, &c.in.initial_states, &c.in.seq_idx,
               &c.in.cu_seqlens, &c.out.out, &c.out.final_states, &c.out.varlen_states}) {
           x->device = Device::kCuda;
         }
       },
       {"ssd: cu_seqlens: not on the CUDA backend yet"},
       StatusCode::kUnsupported},
  };
  AddPackedRules(&rules, true, [](SsdCall& c) {
    c.in.initial_states = Tensor{};
    c.out.varlen_states = Tensor{};
    c.dout.dvarlen_states = Tensor{};
    c.grads.dinitial_states = Tensor{};
  });
  return rules;
}

class SsdVarlenErrors : public ::testing::TestWithParam<Rule<SsdCall>> {};

TEST(SsdVarlenErrorsStart, ValidCallsSucceed) { ExpectValidCallsSucceed(&ValidSsd); }

TEST_P(SsdVarlenErrors, Rule) { ExpectRejected(GetParam(), &ValidSsd); }

INSTANTIATE_TEST_SUITE_P(Ssd, SsdVarlenErrors, ::testing::ValuesIn(SsdRules()), RuleName<SsdCall>);

// ---- causal conv1d (B = 1, D = 3, L = 9, K = 4): seq_idx only

struct ConvCall {
  CausalConv1dInputs in;
  Tensor out, dout;
  CausalConv1dGrads grads;
  bool backward = false;
  Status Run() const {
    return backward ? CausalConv1dBackward(in, dout, Tensor{}, grads)
                    : CausalConv1dForward(in, out, Tensor{});
  }
  Tensor& SeqIdx() { return in.seq_idx; }
  Tensor* CuSeqlens() { return nullptr; }
};

ConvCall ValidConv(Tensors& t, bool backward) {
  ConvCall c;
  c.backward = backward;
  c.in.x = t.In({1, 3, kL});
  c.in.weight = t.In({3, 4});
  c.in.seq_idx = t.Index(kSeqIdx, {1, kL}, DType::kI32);
  c.out = t.Out({1, 3, kL});
  c.dout = t.In({1, 3, kL});
  c.grads.dx = t.Out({1, 3, kL});
  return c;
}

std::vector<Rule<ConvCall>> ConvRules() {
  std::vector<Rule<ConvCall>> rules;
  AddPackedRules(&rules, false, [](ConvCall&) {});
  return rules;
}

class ConvVarlenErrors : public ::testing::TestWithParam<Rule<ConvCall>> {};

TEST(ConvVarlenErrorsStart, ValidCallsSucceed) { ExpectValidCallsSucceed(&ValidConv); }

TEST_P(ConvVarlenErrors, Rule) { ExpectRejected(GetParam(), &ValidConv); }

INSTANTIATE_TEST_SUITE_P(CausalConv1d, ConvVarlenErrors, ::testing::ValuesIn(ConvRules()),
                         RuleName<ConvCall>);

}  // namespace
}  // namespace ssmkit::testing

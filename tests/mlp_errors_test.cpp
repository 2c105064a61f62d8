// Bad input to the MoE op and the weight-splitting views: one case per rule of src/ops/moe.cpp
// and the MoE's of src/ops/mlp_checks.cpp. Each must return kInvalidArgument with a message
// naming the argument and the expected and given values, and leave every output untouched. The
// MLP's rules are bad inputs of the op harness (tests/harness/cases/mlp.cpp).
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ssmkit/mlp.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kT = 3, kD = 5, kF = 4, kE = 4, kK = 2, kFs = 6;

// One MLP's weights and their gradients' storage.
struct Weights {
  HostTensor gate, up, down, gate_bias, up_bias, down_bias;
  HostTensor dgate, dup, ddown, dgate_bias, dup_bias, ddown_bias;
  Weights(Rng& rng, int64_t F, DType dtype)
      : gate({F, kD}, dtype),
        up({F, kD}, dtype),
        down({kD, F}, dtype),
        gate_bias({F}, DType::kF32),
        up_bias({F}, DType::kF32),
        down_bias({kD}, DType::kF32),
        dgate({F, kD}, DType::kF32),
        dup({F, kD}, DType::kF32),
        ddown({kD, F}, DType::kF32),
        dgate_bias({F}, DType::kF32),
        dup_bias({F}, DType::kF32),
        ddown_bias({kD}, DType::kF32) {
    for (HostTensor* t : {&gate, &up, &down, &gate_bias, &up_bias, &down_bias}) {
      t->Fill(rng.NormalVec(t->numel(), 0.3));
    }
  }
  MlpWeights Views() {
    return {gate.view(),      up.view(),      down.view(),
            gate_bias.view(), up_bias.view(), down_bias.view()};
  }
  MlpWeightGrads GradViews() {
    return {dgate.view(),      dup.view(),      ddown.view(),
            dgate_bias.view(), dup_bias.view(), ddown_bias.view()};
  }
  std::vector<HostTensor*> Grads() {
    return {&dgate, &dup, &ddown, &dgate_bias, &dup_bias, &ddown_bias};
  }
};

class MlpErrors : public ::testing::Test {
 protected:
  MlpErrors()
      : rng_(FreshSeed()),
        x_({kT, kD}, DType::kF32),
        out_({kT, kD}, DType::kF32),
        dout_({kT, kD}, DType::kF32),
        dx_({kT, kD}, DType::kF32),
        router_({kE, kD}, DType::kBF16),
        router_bias_({kE}, DType::kF32),
        logits_({kT, kE}, DType::kF32),
        counts_({kE}, DType::kI64),
        index_({kT, kK}, DType::kI32),
        top_weight_({kT, kK}, DType::kF32),
        dlogits_({kT, kE}, DType::kF32),
        drouter_({kE, kD}, DType::kF32),
        drouter_bias_({kE}, DType::kF32),
        shared_(rng_, kFs, DType::kF32) {
    for (HostTensor* t : {&x_, &dout_, &router_, &router_bias_, &dlogits_}) {
      t->Fill(rng_.NormalVec(t->numel()));
    }
    for (int64_t e = 0; e < kE; ++e) experts_.emplace_back(rng_, kF, DType::kF32);
    for (Weights& w : experts_) {
      expert_views_.push_back(w.Views());
      expert_grads_.push_back(w.GradViews());
    }
    moe_in_ = {x_.view(), router_.view(), router_bias_.view(), expert_views_, shared_.Views()};
    moe_out_ = {out_.view(), logits_.view(), counts_.view(), index_.view(), top_weight_.view()};
    moe_grads_ = {dx_.view(), drouter_.view(), drouter_bias_.view(), expert_grads_,
                  shared_.GradViews()};
    moe_options_.top_k = kK;
    dout_view_ = dout_.view();
    dlogits_view_ = dlogits_.view();
    // Every output gets a recognisable pattern; none may change on error.
    for (HostTensor* t : Outputs()) std::memset(t->data(), 0xA5, t->bytes().size());
    for (HostTensor* t : Outputs()) before_.push_back(t->bytes());
  }

  std::vector<HostTensor*> Outputs() {
    std::vector<HostTensor*> all = {&out_,   &dx_,         &logits_,  &counts_,
                                    &index_, &top_weight_, &drouter_, &drouter_bias_};
    for (HostTensor* t : shared_.Grads()) all.push_back(t);
    for (Weights& w : experts_) {
      for (HostTensor* t : w.Grads()) all.push_back(t);
    }
    return all;
  }

  void Expect(const Status& s, std::initializer_list<const char*> fragments,
              StatusCode code = StatusCode::kInvalidArgument) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), code) << s.message();
    for (const char* f : fragments) {
      EXPECT_NE(s.message().find(f), std::string::npos) << "'" << f << "' not in: " << s.message();
    }
    const std::vector<HostTensor*> outputs = Outputs();
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_EQ(outputs[i]->bytes(), before_[i]) << "output " << i << " written on error";
    }
  }

  Status MoeFwd() { return MoeForward(moe_in_, moe_out_, moe_options_); }
  Status MoeBwd() {
    return MoeBackward(moe_in_, dout_view_, dlogits_view_, moe_grads_, moe_options_);
  }

  Rng rng_;
  HostTensor x_, out_, dout_, dx_;
  HostTensor router_, router_bias_, logits_, counts_, index_, top_weight_, dlogits_, drouter_,
      drouter_bias_;
  Weights shared_;
  std::vector<Weights> experts_;
  std::vector<MlpWeights> expert_views_;
  std::vector<MlpWeightGrads> expert_grads_;
  std::vector<std::vector<uint8_t>> before_;
  Tensor dout_view_, dlogits_view_;
  MoeInputs moe_in_;
  MoeOutputs moe_out_;
  MoeOptions moe_options_;
  MoeGrads moe_grads_;
};

// The fixture's calls are valid (so each case below fails for its own reason only).
TEST_F(MlpErrors, ValidCallsSucceed) {
  EXPECT_TRUE(MoeFwd().ok()) << MoeFwd().message();
  EXPECT_TRUE(MoeBwd().ok()) << MoeBwd().message();
}

// ------------------------------------------------------------------ MoE forward

TEST_F(MlpErrors, RouterNull) {
  moe_in_.router_weight = Tensor{};
  Expect(MoeFwd(), {"moe: router_weight:", "null"});
}
TEST_F(MlpErrors, RouterWidth) {
  moe_in_.router_weight.shape[1] = kD - 1;
  Expect(MoeFwd(), {"moe: router_weight:", "(E, d) = (4, 5)", "(4, 4)"});
}
TEST_F(MlpErrors, RouterBiasShape) {
  moe_in_.router_bias.shape[0] = kE + 1;
  Expect(MoeFwd(), {"moe: router_bias:", "(E) = (4,)", "(5,)"});
}
TEST_F(MlpErrors, TopKZero) {
  moe_options_.top_k = 0;
  Expect(MoeFwd(), {"moe: options.top_k:", "1 <= k <= E = 4", "0"});
}
TEST_F(MlpErrors, TopKAboveE) {
  moe_options_.top_k = kE + 1;
  Expect(MoeFwd(), {"moe: options.top_k:", "1 <= k <= E = 4", "5"});
}
TEST_F(MlpErrors, Routing) {
  moe_options_.routing = static_cast<MoeRouting>(7);
  Expect(MoeFwd(), {"moe: options.routing:", "a MoeRouting value", "7"});
}
TEST_F(MlpErrors, NormalizeWithTopKSoftmax) {
  moe_options_.routing = MoeRouting::kTopKSoftmax;
  moe_options_.normalize_top_k = true;
  Expect(MoeFwd(), {"moe: options.normalize_top_k:", "false with kTopKSoftmax"});
}
// kSigmoidGroupTopK (Nemotron-H): the correction bias and the group options.
class MoeGroupErrors : public MlpErrors {
 protected:
  MoeGroupErrors() : score_bias_({kE}, DType::kF32) {
    score_bias_.Fill(rng_.NormalVec(kE, 0.1));
    moe_in_.score_correction_bias = score_bias_.view();
    moe_options_.routing = MoeRouting::kSigmoidGroupTopK;
    moe_options_.groups = 2;
    moe_options_.top_k_groups = 1;
    moe_options_.normalize_top_k = true;
    moe_options_.routed_scaling = 2.5f;
  }
  HostTensor score_bias_;
};
TEST_F(MoeGroupErrors, ValidCallsSucceed) {
  EXPECT_TRUE(MoeFwd().ok()) << MoeFwd().message();
  EXPECT_TRUE(MoeBwd().ok()) << MoeBwd().message();
}
TEST_F(MoeGroupErrors, ScoreBiasMissing) {
  moe_in_.score_correction_bias = Tensor{};
  Expect(MoeFwd(), {"moe: score_correction_bias:", "a tensor (E)", "null"});
}
TEST_F(MoeGroupErrors, ScoreBiasShape) {
  moe_in_.score_correction_bias.shape[0] = kE - 1;
  Expect(MoeFwd(), {"moe: score_correction_bias:", "(E) = (4,)", "(3,)"});
}
TEST_F(MoeGroupErrors, GroupsNotDividingE) {
  moe_options_.groups = 3;
  Expect(MoeFwd(), {"moe: options.groups:", "a divisor of E = 4", "3"});
}
TEST_F(MoeGroupErrors, GroupsOfOneExpert) {
  moe_options_.groups = 4;
  Expect(MoeFwd(), {"moe: options.groups:", ">= 2 experts per group", "4"});
}
TEST_F(MoeGroupErrors, TopKGroupsAboveGroups) {
  moe_options_.top_k_groups = 3;
  Expect(MoeBwd(), {"moe: options.top_k_groups:", "1 <= top_k_groups <= groups = 2", "3"});
}
TEST_F(MoeGroupErrors, TopKAboveKeptExperts) {
  moe_options_.top_k = 3;
  Expect(MoeFwd(), {"moe: options.top_k:", "<= the 2 experts of the top_k_groups = 1", "3"});
}
TEST_F(MoeGroupErrors, ScalingNotFinite) {
  moe_options_.routed_scaling = std::nanf("");
  Expect(MoeFwd(), {"moe: options.routed_scaling:", "a finite number"});
}
TEST_F(MoeGroupErrors, GroupsWithSoftmaxRouting) {
  moe_options_.routing = MoeRouting::kSoftmaxTopK;
  Expect(MoeFwd(), {"moe: options.groups:", "1, the default with softmax routing", "2"});
}
TEST_F(MoeGroupErrors, ScoreBiasWithSoftmaxRouting) {
  moe_options_ = MoeOptions{};
  moe_options_.top_k = kK;
  Expect(MoeBwd(), {"moe: score_correction_bias:", "no tensor with softmax routing", "(4,)"});
}

// expert_x (Nemotron-H's latent experts): the experts read it, out has its width, no shared
// expert, forward only. The experts' width d_x is the fixture's d here.
class MoeLatentErrors : public MlpErrors {
 protected:
  MoeLatentErrors() : expert_x_({kT, kD}, DType::kF32) {
    expert_x_.Fill(rng_.NormalVec(expert_x_.numel()));
    moe_in_.expert_x = expert_x_.view();
    moe_in_.shared_expert = MlpWeights{};
  }
  HostTensor expert_x_;
};
TEST_F(MoeLatentErrors, ValidCallSucceeds) { EXPECT_TRUE(MoeFwd().ok()) << MoeFwd().message(); }
TEST_F(MoeLatentErrors, Rows) {
  moe_in_.expert_x.shape[0] = kT + 1;
  Expect(MoeFwd(), {"moe: expert_x:", "(T, d_x) = (3, 5)", "(4, 5)"});
}
TEST_F(MoeLatentErrors, ExpertsOfAnotherWidth) {
  moe_in_.expert_x.shape[1] = kD - 1;
  Expect(MoeFwd(), {"moe: experts[0]", "4", "5"});
}
TEST_F(MoeLatentErrors, WithSharedExpert) {
  moe_in_.shared_expert = shared_.Views();
  Expect(MoeFwd(), {"moe: shared_expert:", "none with expert_x", "a shared expert"});
}
TEST_F(MoeLatentErrors, OutOverlapsExpertX) {
  moe_out_.out = moe_in_.expert_x;
  Expect(MoeFwd(), {"moe: outputs.out:", "not overlapping expert_x"});
}
TEST_F(MoeLatentErrors, Backward) {
  Expect(MoeBwd(), {"moe: expert_x:", "forward only"}, StatusCode::kUnsupported);
}

TEST_F(MlpErrors, ExpertCount) {
  moe_in_.experts = std::span<const MlpWeights>(expert_views_).first(kE - 1);
  Expect(MoeFwd(), {"moe: experts:", "E = 4 entries", "3"});
}
TEST_F(MlpErrors, ExpertDownDtype) {
  expert_views_[3].down.dtype = DType::kI32;
  Expect(MoeFwd(), {"moe: experts[3].down:", "dtype f32 or bf16 or f16", "i32"});
}
TEST_F(MlpErrors, ExpertHiddenWidthDiffers) {
  expert_views_[2].up.shape[0] = kF - 1;
  expert_views_[2].gate.shape[0] = kF - 1;
  expert_views_[2].down.shape[1] = kF - 1;
  expert_views_[2].down.strides[0] = kF - 1;
  expert_views_[2].gate_bias = expert_views_[2].up_bias = Tensor{};
  Expect(MoeFwd(), {"moe: experts[2]:", "the form of experts[0]", "F = 3"});
}
TEST_F(MlpErrors, ExpertWithoutGate) {
  expert_views_[1].gate = expert_views_[1].gate_bias = Tensor{};
  Expect(MoeFwd(), {"moe: experts[1]:", "the form of experts[0]"});
}
TEST_F(MlpErrors, SharedExpertPartial) {
  moe_in_.shared_expert.down = Tensor{};
  Expect(MoeFwd(), {"moe: shared_expert.down:", "null"});
}
TEST_F(MlpErrors, SharedExpertUngated) {
  moe_in_.shared_expert.gate = moe_in_.shared_expert.gate_bias = Tensor{};
  Expect(MoeFwd(), {"moe: shared_expert.gate:", "the experts are gated"});
}
TEST_F(MlpErrors, MoeMultiplier) {
  moe_options_.mlp.down_multiplier = std::nanf("");
  Expect(MoeFwd(), {"moe: options.mlp.down_multiplier:", "finite"});
}
TEST_F(MlpErrors, RouterLogitsShape) {
  moe_out_.router_logits.shape[1] = kE - 1;
  Expect(MoeFwd(), {"moe: outputs.router_logits:", "(T, E) = (3, 4)", "(3, 3)"});
}
TEST_F(MlpErrors, CountsDtype) {
  moe_out_.expert_counts.dtype = DType::kI32;
  Expect(MoeFwd(), {"moe: outputs.expert_counts:", "dtype i64", "i32"});
}
TEST_F(MlpErrors, TopKIndexDtype) {
  moe_out_.top_k_index.dtype = DType::kI64;
  Expect(MoeFwd(), {"moe: outputs.top_k_index:", "dtype i32", "i64"});
}
TEST_F(MlpErrors, TopKWeightShape) {
  moe_out_.top_k_weight.shape[1] = kK + 1;
  Expect(MoeFwd(), {"moe: outputs.top_k_weight:", "(T, k) = (3, 2)", "(3, 3)"});
}
TEST_F(MlpErrors, MoeOutOverlapsX) {
  moe_out_.out = moe_in_.x;
  Expect(MoeFwd(), {"moe: outputs.out:", "not overlapping x"});
}
TEST_F(MlpErrors, LogitsOverlapOut) {
  moe_out_.router_logits = moe_out_.out;
  moe_out_.router_logits.shape[1] = kE;
  Expect(MoeFwd(), {"moe: outputs.router_logits:", "not overlapping outputs.out"});
}
TEST_F(MlpErrors, ExpertOnCuda) {
  expert_views_[1].up.device = Device::kCuda;
  Expect(MoeFwd(), {"moe: experts[1].up:", "a CPU tensor", "a CUDA tensor"});
}

// ------------------------------------------------------------------ MoE backward

TEST_F(MlpErrors, ExpertGradCount) {
  moe_grads_.experts = std::span<const MlpWeightGrads>(expert_grads_).first(kE - 1);
  Expect(MoeBwd(), {"moe: grads.experts:", "0 or E = 4 entries", "3"});
}
TEST_F(MlpErrors, ExpertGradShape) {
  expert_grads_[2].dup.shape[0] = kF + 1;
  Expect(MoeBwd(), {"moe: grads.experts[2].dup:", "(as up) = (4, 5)", "(5, 5)"});
}
TEST_F(MlpErrors, DrouterBiasWithoutBias) {
  moe_in_.router_bias = Tensor{};
  Expect(MoeBwd(), {"moe: grads.drouter_bias:", "router_bias is absent"});
}
TEST_F(MlpErrors, DrouterWeightDtype) {
  moe_grads_.drouter_weight.dtype = DType::kBF16;
  Expect(MoeBwd(), {"moe: grads.drouter_weight:", "dtype f32", "bf16"});
}
TEST_F(MlpErrors, DrouterLogitsShape) {
  dlogits_view_.shape[0] = kT - 1;
  Expect(MoeBwd(), {"moe: drouter_logits:", "(T, E) = (3, 4)", "(2, 4)"});
}
TEST_F(MlpErrors, SharedGradWithoutShared) {
  moe_in_.shared_expert = MlpWeights{};
  Expect(MoeBwd(), {"moe: grads.shared_expert.dgate:", "gate is absent"});
}
TEST_F(MlpErrors, ExpertGradsOverlap) {
  expert_grads_[1].ddown = expert_grads_[0].ddown;
  Expect(MoeBwd(), {"moe: grads.experts[1].ddown:", "not overlapping grads.experts[0].ddown"});
}
TEST_F(MlpErrors, DxOverlapsExpertWeight) {
  moe_grads_.dx = expert_views_[2].up;
  moe_grads_.dx.shape = {kT, kD};
  moe_grads_.dx.dtype = DType::kF32;
  Expect(MoeBwd(), {"moe: grads.dx:", "not overlapping experts[2].up"});
}

// ------------------------------------------------------------------ views

TEST(MlpQuantized, ForwardTakesThemBackwardRefusesThem) {
  // q8_0 matrices of zero blocks (scale 0): the forward runs (output 0), the backward names the
  // first quantized weight.
  constexpr int64_t T = 2, d = 32, F = 4;
  HostTensor x({T, d}, DType::kF32), out({T, d}, DType::kF32), dout({T, d}, DType::kF32);
  std::vector<uint8_t> up(static_cast<size_t>(DTypeRowBytes(DType::kQ8_0, d) * F), 0);
  HostTensor down({d, F}, DType::kF32);
  MlpInputs in;
  in.x = x.view();
  in.weights.up = Tensor::Contiguous(up.data(), DType::kQ8_0, {F, d});
  in.weights.down = down.view();
  MlpOptions options;
  options.activation = MlpActivation::kRelu;
  const Status fwd = MlpForward(in, out.view(), options);
  EXPECT_TRUE(fwd.ok()) << fwd.message();
  const Status bwd = MlpBackward(in, dout.view(), MlpGrads{}, options);
  EXPECT_NE(bwd.message().find("mlp: weights.up: expected f32 | bf16 | f16 (the backward widens "
                               "float weights), given q8_0"),
            std::string::npos)
      << bwd.message();
}
TEST_F(MlpErrors, SplitGateUpOdd) {
  Tensor gate, up;
  Tensor fused = shared_.up.view();  // (6, d): 3 rows, odd
  fused.shape[0] = 3;
  const Status s = SplitGateUp(fused, &gate, &up);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("split_gate_up: fused: expected an even"), std::string::npos)
      << s.message();
}
TEST_F(MlpErrors, SplitFusedExpertsShapes) {
  HostTensor gate_up({kE, 2 * kF, kD}, DType::kBF16), down({kE, kD, kF}, DType::kBF16);
  std::vector<MlpWeights> views(kE);
  EXPECT_TRUE(SplitFusedExperts(gate_up.view(), down.view(), views).ok());
  Tensor bad_down = down.view();
  bad_down.shape[2] = kF + 1;
  Status s = SplitFusedExperts(gate_up.view(), bad_down, views);
  EXPECT_NE(s.message().find("split_fused_experts: down: expected shape (E, d, F) = (4, 5, 4)"),
            std::string::npos)
      << s.message();
  s = SplitFusedExperts(gate_up.view(), down.view(), std::span<MlpWeights>(views).first(2));
  EXPECT_NE(s.message().find("split_fused_experts: experts: expected E = 4 entries, given 2"),
            std::string::npos)
      << s.message();
  Tensor odd = gate_up.view();
  odd.shape[1] = 2 * kF - 1;
  s = SplitFusedExperts(odd, down.view(), views);
  EXPECT_NE(s.message().find("an even 2F"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ssmkit::testing

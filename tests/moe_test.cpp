// MoeForward / MoeBackward against the fp64 oracle at the shapes of the models that use them
// (each case labelled), both routing rules (Jamba's softmax then top-k, optionally
// renormalised; Granite's top-k then softmax), shared expert on and off, gated and ungated
// experts, Nemotron-H's sigmoid group-limited routing (correction bias, groups, scaling,
// renormalised or not; ties to the lower index) and latent experts (expert_x), f32 / bf16 / f16
// weights, per-expert tensors and slices of 3-D tensors, empty experts, every token on one expert,
// decode (T = 1) and prefill over several chunks; router logits, counts and the top-k outputs;
// gradients against the oracle and against fp64 central finite differences (the router's included,
// through the routing weights and an aux-loss gradient on the logits); every SIMD target;
// determinism; NaN confined to its token.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "mlp_fixture.hpp"
#include "ssmkit/mlp.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

using Act = MlpActivation;
constexpr MoeRouting kJamba = MoeRouting::kSoftmaxTopK;
constexpr MoeRouting kGranite = MoeRouting::kTopKSoftmax;
constexpr MoeRouting kNemotron = MoeRouting::kSigmoidGroupTopK;

struct MoeCase {
  const char* label;
  int64_t T, d, F, E, k;
  MoeRouting routing = kGranite;
  int64_t shared_F = 0;  // 0: no shared expert
  DType wdtype = DType::kF32;
  bool normalize = false;
  bool gated = true;
  Act act = Act::kSilu;
  bool bias = false;         // the experts' biases
  bool router_bias = false;  // also set when `forced` is
  bool fused = false;        // experts as slices of (E, 2F, d) / (E, d, F) tensors
  int64_t forced = -1;       // router_bias[forced] = 30: every token routed there first
  int64_t pad = 0;
  float dm = 1.0f;
  // kNemotron only (Grouped below sets them):
  int64_t groups = 1, top_k_groups = 1;
  float scaling = 1.0f;
  // > 0: the experts read expert_x of this width d_x (Nemotron-H's moe_latent_size) and out
  // is (T, d_x); forward only, no shared expert. Latent below sets it.
  int64_t latent = 0;

  int64_t ExpertWidth() const { return latent > 0 ? latent : d; }

  std::string Describe() const {
    return std::string(label) + ": T=" + std::to_string(T) + " d=" + std::to_string(d) +
           " F=" + std::to_string(F) + " E=" + std::to_string(E) + " k=" + std::to_string(k) +
           (routing == kJamba     ? " softmax-topk"
            : routing == kGranite ? " topk-softmax"
                                  : " sigmoid groups=" + std::to_string(groups) +
                                        " top_k_groups=" + std::to_string(top_k_groups) +
                                        " scaling=" + std::to_string(scaling)) +
           (normalize ? " normalized" : "") + " shared=" + std::to_string(shared_F) +
           " w=" + DTypeName(wdtype) + (gated ? " gated " : " ungated ") + ActName(act) +
           (bias ? " bias" : "") + (router_bias ? " router_bias" : "") + (fused ? " fused" : "") +
           " forced=" + std::to_string(forced) + " pad=" + std::to_string(pad) +
           (latent > 0 ? " latent=" + std::to_string(latent) : "");
  }
};

// c with Nemotron-H's routing: sigmoid scores, a correction bias, `groups` groups of which
// `top_k_groups` are kept, weights times `scaling`.
MoeCase Grouped(MoeCase c, int64_t groups, int64_t top_k_groups, float scaling) {
  c.routing = kNemotron;
  c.groups = groups;
  c.top_k_groups = top_k_groups;
  c.scaling = scaling;
  return c;
}

// c with experts of width d_x = latent reading expert_x.
MoeCase Latent(MoeCase c, int64_t latent) {
  c.latent = latent;
  return c;
}

struct MoeProblem {
  MoeCase c;
  std::vector<WeightSet> experts;
  WeightSet shared;
  HostTensor router, router_bias, score_bias, fused_gate_up, fused_down;
  std::vector<double> router_d, router_bias_d, score_bias_d;
  PaddedTensor x, expert_x;  // expert_x: (T, d_x), used when c.latent > 0
  std::vector<double> x_d, expert_x_d;
  std::vector<MlpWeights> views;

  // min_gap: the router is redrawn until no token's k-th and (k+1)-th fp64 logits are closer:
  // the f32 kernel and the fp64 oracle must select the same experts.
  MoeProblem(const MoeCase& mc, Rng& rng, double min_gap = 1e-5)
      : c(mc),
        x({mc.T, mc.d}, DType::kF32, mc.pad),
        expert_x({mc.T, mc.ExpertWidth()}, DType::kF32, mc.pad) {
    x_d = x.Fill(rng.NormalVec(c.T * c.d));
    if (c.latent > 0) expert_x_d = expert_x.Fill(rng.NormalVec(c.T * c.latent));
    for (int64_t e = 0; e < c.E; ++e) {
      experts.emplace_back(rng, c.ExpertWidth(), c.F, c.gated, c.bias, c.wdtype, /*lazy=*/true);
    }
    if (c.shared_F > 0) shared = WeightSet(rng, c.d, c.shared_F, c.gated, c.bias, c.wdtype);
    router = HostTensor({c.E, c.d}, c.wdtype);
    if (c.router_bias || c.forced >= 0) router_bias = HostTensor({c.E}, DType::kF32);
    if (c.routing == kNemotron) score_bias = HostTensor({c.E}, DType::kF32);
    for (int attempt = 0; attempt < 50; ++attempt) {
      router_d = router.Fill(rng.NormalVec(c.E * c.d, 1.0 / std::sqrt(static_cast<double>(c.d))));
      // Of the order of the sigmoids' spread, so that it changes which experts win.
      if (score_bias.numel() > 0) score_bias_d = score_bias.Fill(rng.NormalVec(c.E, 0.1));
      if (router_bias.numel() > 0) {
        std::vector<double> b = rng.NormalVec(c.E, 0.3);
        if (c.forced >= 0) b[c.forced] = 30.0;
        router_bias_d = router_bias.Fill(b);
      }
      if (MinSelectionGap() > min_gap) break;
    }
    if (c.fused) MakeFused();
    for (WeightSet& w : experts) views.push_back(w.Views());
    if (c.fused) {
      EXPECT_TRUE(SplitFusedExperts(fused_gate_up.view(), fused_down.view(), views).ok());
    }
  }

  void MaterializeAll() {
    for (WeightSet& w : experts) w.Materialize();
  }

  // The experts as slices of 3-D tensors holding the same values.
  void MakeFused() {
    MaterializeAll();
    fused_gate_up = HostTensor({c.E, 2 * c.F, c.ExpertWidth()}, c.wdtype);
    fused_down = HostTensor({c.E, c.ExpertWidth(), c.F}, c.wdtype);
    std::vector<double> gu, dn;
    for (const WeightSet& w : experts) {
      gu.insert(gu.end(), w.gate_d.begin(), w.gate_d.end());
      gu.insert(gu.end(), w.up_d.begin(), w.up_d.end());
      dn.insert(dn.end(), w.down_d.begin(), w.down_d.end());
    }
    fused_gate_up.Fill(gu);
    fused_down.Fill(dn);
  }

  // Token t's fp64 router logits.
  std::vector<double> Logits(int64_t t) const {
    std::vector<double> logits(c.E);
    for (int64_t e = 0; e < c.E; ++e) {
      double s = router_bias_d.empty() ? 0.0 : router_bias_d[e];
      for (int64_t i = 0; i < c.d; ++i) s += x_d[t * c.d + i] * router_d[e * c.d + i];
      logits[e] = s;
    }
    return logits;
  }

  // The gap between the n-th and (n+1)-th largest of v (n < v.size()), else 1.
  static double Gap(std::vector<double> v, int64_t n) {
    if (n >= static_cast<int64_t>(v.size())) return 1.0;
    std::sort(v.begin(), v.end(), std::greater<>());
    return v[n - 1] - v[n];
  }

  // The smallest gap, over tokens, at each selection the routing makes in fp64: the k-th and
  // (k+1)-th largest logits (softmax routings, monotone in them); for kNemotron the
  // top_k_groups-th and next group scores, and the k-th and (k+1)-th corrected scores in the
  // kept groups.
  double MinSelectionGap() const {
    double gap = 1e30;
    for (int64_t t = 0; t < c.T; ++t) {
      const std::vector<double> logits = Logits(t);
      if (c.routing != kNemotron) {
        gap = std::min(gap, Gap(logits, c.k));
        continue;
      }
      const int64_t per = c.E / c.groups;
      std::vector<double> choice(c.E), group_score(c.groups);
      for (int64_t e = 0; e < c.E; ++e)
        choice[e] = 1.0 / (1.0 + std::exp(-logits[e])) + score_bias_d[e];
      for (int64_t g = 0; g < c.groups; ++g) {
        std::vector<double> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(members.begin(), members.end(), std::greater<>());
        group_score[g] = members[0] + members[1];
      }
      gap = std::min(gap, Gap(group_score, c.top_k_groups));
      std::vector<double> order = group_score, kept;
      std::sort(order.begin(), order.end(), std::greater<>());
      for (int64_t g = 0; g < c.groups; ++g) {
        if (group_score[g] < order[c.top_k_groups - 1]) continue;
        kept.insert(kept.end(), choice.begin() + g * per, choice.begin() + (g + 1) * per);
      }
      gap = std::min(gap, Gap(kept, c.k));
    }
    return gap;
  }

  MoeInputs Inputs() {
    MoeInputs in;
    in.x = x.view();
    if (c.latent > 0) in.expert_x = expert_x.view();
    in.router_weight = router.view();
    if (router_bias.numel() > 0) in.router_bias = router_bias.view();
    in.experts = views;
    if (c.shared_F > 0) in.shared_expert = shared.Views();
    if (score_bias.numel() > 0) in.score_correction_bias = score_bias.view();
    return in;
  }
  MoeOptions Options() const {
    MoeOptions o;
    o.top_k = c.k;
    o.routing = c.routing;
    o.normalize_top_k = c.normalize;
    o.groups = c.groups;
    o.top_k_groups = c.top_k_groups;
    o.routed_scaling = c.scaling;
    o.mlp = {c.act, 1.0f, c.dm};
    return o;
  }
  ref::MoeShape Shape() const {
    ref::MoeShape s;
    s.d = c.d;
    s.E = c.E;
    s.k = c.k;
    s.routing = c.routing;
    s.normalize_top_k = c.normalize;
    s.groups = c.groups;
    s.top_k_groups = c.top_k_groups;
    s.routed_scaling = c.scaling;
    s.expert = {c.ExpertWidth(), c.F, c.gated, c.act, 1.0, c.dm};
    s.shared_F = c.shared_F;
    return s;
  }
  // The oracle's inputs. Only the experts some token selects are read, so only theirs are
  // converted to fp64 (a granite-4.0-h-tiny layer's 64 experts would take 1.2 GB).
  ref::MoeInputs Ref() {
    ref::MoeInputs in;
    in.x = x_d.data();
    in.expert_x = c.latent > 0 ? expert_x_d.data() : nullptr;
    in.router_weight = router_d.data();
    in.router_bias = router_bias_d.empty() ? nullptr : router_bias_d.data();
    in.score_bias = score_bias_d.empty() ? nullptr : score_bias_d.data();
    std::vector<int64_t> index(c.k);
    std::vector<double> weight(c.k);
    for (int64_t t = 0; t < c.T; ++t) {
      ref::MoeRoute(Shape(), Logits(t).data(), index.data(), weight.data(), in.score_bias);
      for (int64_t e : index) experts[e].Materialize();
    }
    for (const WeightSet& w : experts) in.experts.push_back(w.Ref());
    if (c.shared_F > 0) in.shared = shared.Ref();
    return in;
  }
};

constexpr double kTolerance = 1e-5;

struct ForwardResult {
  double out = 0, logits = 0, weights = 0;
  bool counts_equal = false, index_equal = false;
  std::vector<uint8_t> bits;
};

ForwardResult RunForward(const MoeCase& c, uint64_t seed) {
  Rng rng(seed);
  MoeProblem prob(c, rng);
  const int64_t dx = c.ExpertWidth();
  PaddedTensor out({c.T, dx}, DType::kF32, c.pad), logits({c.T, c.E}, DType::kF32, c.pad);
  HostTensor counts({c.E}, DType::kI64), index({c.T, c.k}, DType::kI32),
      weight({c.T, c.k}, DType::kF32);
  out.Poison();
  logits.Poison();
  std::fill(static_cast<int64_t*>(counts.data()), static_cast<int64_t*>(counts.data()) + c.E, -7);
  std::fill(static_cast<int32_t*>(index.data()), static_cast<int32_t*>(index.data()) + c.T * c.k,
            -7);
  weight.Poison();
  const MoeOutputs outputs{out.view(), logits.view(), counts.view(), index.view(), weight.view()};
  const Status s = MoeForward(prob.Inputs(), outputs, prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(out.PaddingUntouched() && logits.PaddingUntouched()) << "wrote between rows";

  std::vector<double> want(c.T * dx), want_logits(c.T * c.E), want_weight(c.T * c.k);
  std::vector<int64_t> want_counts(c.E), want_index(c.T * c.k);
  ref::MoeForward(prob.Shape(), c.T, prob.Ref(), want.data(), want_logits.data(),
                  want_counts.data(), want_index.data(), want_weight.data());
  ForwardResult r;
  r.out = RelativeError(out.ToDouble(), want);
  r.logits = RelativeError(logits.ToDouble(), want_logits);
  r.weights = RelativeError(weight.ToDouble(), want_weight);
  r.counts_equal = std::equal(want_counts.begin(), want_counts.end(),
                              static_cast<const int64_t*>(counts.data()));
  const int32_t* got_index = static_cast<const int32_t*>(index.data());
  r.index_equal = true;
  for (int64_t i = 0; i < c.T * c.k; ++i)
    r.index_equal = r.index_equal && got_index[i] == want_index[i];
  r.bits = out.Bytes();
  return r;
}

void ExpectForwardMatches(const MoeCase& c, uint64_t seed, double* worst = nullptr) {
  SCOPED_TRACE(c.Describe());
  const ForwardResult r = RunForward(c, seed);
  EXPECT_LE(r.out, kTolerance);
  EXPECT_LE(r.logits, kTolerance);
  EXPECT_LE(r.weights, kTolerance);
  EXPECT_TRUE(r.counts_equal);
  EXPECT_TRUE(r.index_equal);
  if (worst != nullptr) *worst = std::max({*worst, r.out, r.logits, r.weights});
}

const MoeCase kForwardCases[] = {
    // granite-4.0-h-tiny: 64 experts of 512, top-6, shared_mlp of 1024, d 1536 (its full layer:
    // 300 MB of bf16 weights; only the 6 selected experts are converted for the oracle)
    {"granite-4.0-h-tiny moe decode", 1, 1536, 512, 64, 6, kGranite, 1024, DType::kBF16},
    // the same routing at a quarter of the width, for batches and prefill
    {"granite-4.0-h-tiny moe (d/4, F/2) batch 3", 3, 384, 256, 64, 6, kGranite, 1024, DType::kBF16},
    {"granite-4.0-h-tiny moe (d/4, F/2) prefill", 12, 384, 256, 64, 6, kGranite, 1024},
    // granitemoe (no shared expert), 3-D input_linear / output_linear
    {"granitemoe fused experts", 9, 256, 128, 32, 8, kGranite, 0, DType::kBF16, false, true,
     Act::kSilu, false, false, true},
    // jamba (d 4096, F 14336 at 1/8 and 1/16): 16 experts, top-2 of the softmax, not
    // renormalised
    {"jamba moe (1/16) prefill", 20, 256, 896, 16, 2, kJamba},
    {"jamba moe (1/8) decode", 1, 512, 1792, 16, 2, kJamba, 0, DType::kBF16},
    // mixtral-style renormalised top-2
    {"softmax top-k renormalised", 33, 256, 512, 8, 2, kJamba, 0, DType::kF32, true},
    // ungated relu2 experts with a shared expert (Nemotron-H's expert form)
    {"ungated relu2 experts", 14, 256, 128, 16, 4, kGranite, 256, DType::kF16, false, false,
     Act::kRelu2, true},
    // odd sizes, every bias, padded rows, gelu, down multiplier
    {"odd sizes", 7, 37, 19, 5, 3, kJamba, 23, DType::kF32, true, true, Act::kGeluErf, true, true,
     false, -1, 2, 0.75f},
    {"k = E", 5, 24, 16, 3, 3, kGranite, 8},
    {"k = 1", 9, 40, 32, 6, 1, kJamba},
    // empty experts: 3 tokens, 2 experts each, 32 experts
    {"empty experts", 3, 64, 48, 32, 2, kGranite, 32, DType::kBF16},
    // every token routed to expert 3 (a large router bias)
    {"all tokens to one expert", 50, 48, 64, 8, 1, kJamba, 0, DType::kF32, false, true, Act::kSilu,
     false, true, false, 3},
    {"all tokens to one expert top-2", 40, 48, 64, 8, 2, kGranite, 16, DType::kF32, false, true,
     Act::kSilu, false, true, false, 5},
    // prefill over two chunks (2^22 / 8192 = 512 tokens each)
    {"prefill over two chunks", 600, 16, 8192, 4, 1, kGranite},
    // Nemotron-3-Nano-30B-A3B's MoE (d 2688, 128 ungated relu2 experts of 1856, top-6, shared
    // expert of 3712, one group, renormalised, scaling 2.5) at d/8, F/8
    Grouped({"nemotron-3-nano moe (d/8, F/8) decode", 1, 336, 232, 128, 6, kNemotron, 464,
             DType::kBF16, true, false, Act::kRelu2},
            1, 1, 2.5f),
    Grouped({"nemotron-3-nano moe (d/8, F/8) prefill", 24, 336, 232, 128, 6, kNemotron, 464,
             DType::kBF16, true, false, Act::kRelu2},
            1, 1, 2.5f),
    // group-limited (DeepSeek-V3's n_group 8, topk_group 4 at 64 experts), not renormalised
    Grouped({"sigmoid 8 groups keep 4", 17, 96, 64, 64, 8, kNemotron, 64, DType::kF32, false, false,
             Act::kRelu2},
            8, 4, 1.0f),
    Grouped({"sigmoid 4 groups keep 1, k = kept experts", 9, 48, 40, 16, 4, kNemotron, 0,
             DType::kF16, true, true, Act::kSilu, true, true},
            4, 1, 0.5f),
    Grouped({"sigmoid over two chunks", 600, 16, 8192, 4, 1, kNemotron}, 2, 1, 1.5f),
    // Nemotron-H's latent experts (moe_latent_size): the router reads x (d), the experts a
    // narrower expert_x (d_x = d/4), out the routed sum at d_x; decode, a batch, and prefill
    // over two chunks with padded rows
    Latent(Grouped({"latent experts decode", 1, 512, 96, 16, 4, kNemotron, 0, DType::kBF16, true,
                    false, Act::kRelu2},
                   4, 2, 2.5f),
           128),
    Latent(Grouped({"latent experts batch 5, gated, fused", 5, 256, 48, 8, 3, kNemotron, 0,
                    DType::kF32, true, true, Act::kSilu, true, false, true},
                   4, 2, 1.5f),
           40),
    Latent(Grouped({"latent experts over two chunks", 700, 64, 4096, 4, 2, kNemotron, 0,
                    DType::kF32, false, false, Act::kRelu2, false, false, false, -1, 3},
                   2, 1, 1.0f),
           24),
};

TEST(MoeForward, MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  double worst = 0.0;
  for (const MoeCase& c : kForwardCases) ExpectForwardMatches(c, seed, &worst);
  std::printf("  worst relative error, forward: %.3g\n", worst);
}

TEST(MoeForward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    ExpectForwardMatches({"targets", 6, 29, 21, 6, 2, kJamba, 13, DType::kBF16, true, true,
                          Act::kGeluTanh, true, true},
                         seed);
    ExpectForwardMatches({"targets decode", 1, 29, 21, 6, 3, kGranite, 13}, seed);
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(MoeForward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const MoeCase c{"prefill", 64, 256, 256, 16, 4, kGranite, 512, DType::kBF16};
  EXPECT_EQ(RunForward(c, seed).bits, RunForward(c, seed).bits);
}

// A NaN in token 2's x makes token 2's output NaN and no other token's.
TEST(MoeForward, NanStaysInItsToken) {
  Rng rng(FreshSeed());
  const MoeCase c{"nan", 6, 32, 24, 8, 2, kJamba, 16};
  MoeProblem prob(c, rng);
  Tensor x = prob.x.view();
  static_cast<float*>(x.data)[2 * x.strides[0] + 7] = std::nanf("");
  HostTensor out({c.T, c.d}, DType::kF32);
  out.Poison();
  ASSERT_TRUE(MoeForward(prob.Inputs(), {out.view()}, prob.Options()).ok());
  const std::vector<double> o = out.ToDouble();
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t i = 0; i < c.d; ++i)
      EXPECT_EQ(std::isnan(o[t * c.d + i]), t == 2) << t << " " << i;
  }
}

// ------------------------------------------------------------------ backward

struct MoeGradsStorage {
  PaddedTensor dx;
  HostTensor drouter_weight, drouter_bias;
  std::vector<WeightGrads> experts;
  std::vector<MlpWeightGrads> expert_views;
  WeightGrads shared;

  explicit MoeGradsStorage(MoeProblem& prob)
      : dx({prob.c.T, prob.c.d}, DType::kF32, prob.c.pad),
        drouter_weight({prob.c.E, prob.c.d}, DType::kF32),
        shared(prob.shared) {
    dx.Poison();
    drouter_weight.Poison();
    if (prob.router_bias.numel() > 0) {
      drouter_bias = HostTensor({prob.c.E}, DType::kF32);
      drouter_bias.Poison();
    }
    for (const WeightSet& w : prob.experts) experts.emplace_back(w);
    for (WeightGrads& g : experts) expert_views.push_back(g.Views());
  }
  MoeGrads Views(const MoeProblem& prob) {
    MoeGrads g;
    g.dx = dx.view();
    g.drouter_weight = drouter_weight.view();
    if (drouter_bias.numel() > 0) g.drouter_bias = drouter_bias.view();
    g.experts = expert_views;
    if (prob.c.shared_F > 0) g.shared_expert = shared.Views();
    return g;
  }
};

struct MoeRefGrads {
  std::vector<double> dx, drouter_weight, drouter_bias;
  std::vector<RefWeightGrads> experts;
  RefWeightGrads shared;
  explicit MoeRefGrads(const MoeProblem& p)
      : dx(p.c.T * p.c.d),
        drouter_weight(p.c.E * p.c.d),
        drouter_bias(p.c.E),
        shared(p.c.shared_F > 0 ? p.shared : p.experts[0]) {
    for (const WeightSet& w : p.experts) experts.emplace_back(w);
  }
  ref::MoeGrads Views(const MoeProblem& p) {
    ref::MoeGrads g;
    g.dx = dx.data();
    g.drouter_weight = drouter_weight.data();
    g.drouter_bias = drouter_bias.data();
    for (RefWeightGrads& e : experts) g.experts.push_back(e.Views());
    if (p.c.shared_F > 0) g.shared = shared.Views();
    return g;
  }
};

// The fast backward against the oracle's: the worst relative error over every gradient.
double BackwardError(const MoeCase& c, uint64_t seed, bool aux, std::string* which,
                     std::vector<uint8_t>* bits = nullptr) {
  Rng rng(seed);
  MoeProblem prob(c, rng);
  PaddedTensor dout({c.T, c.d}, DType::kF32, c.pad);
  const std::vector<double> dout_d = dout.Fill(rng.NormalVec(c.T * c.d));
  HostTensor dlogits({c.T, c.E}, DType::kF32);
  const std::vector<double> dlogits_d = dlogits.Fill(rng.NormalVec(c.T * c.E, 0.1));
  MoeGradsStorage fast(prob);
  const Status s = MoeBackward(prob.Inputs(), dout.view(), aux ? dlogits.view() : Tensor{},
                               fast.Views(prob), prob.Options());
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(fast.dx.PaddingUntouched());
  MoeRefGrads want(prob);
  ref::MoeBackward(prob.Shape(), c.T, prob.Ref(), dout_d.data(), aux ? dlogits_d.data() : nullptr,
                   want.Views(prob));
  double worst = 0.0;
  auto track = [&](const std::string& name, double err) {
    if (!(err <= worst)) {
      worst = err;
      *which = name;
    }
  };
  track("dx", RelativeError(fast.dx.ToDouble(), want.dx));
  track("drouter_weight", RelativeError(fast.drouter_weight.ToDouble(), want.drouter_weight));
  if (fast.drouter_bias.numel() > 0) {
    track("drouter_bias", RelativeError(fast.drouter_bias.ToDouble(), want.drouter_bias));
  }
  for (int64_t e = 0; e < c.E; ++e) {
    std::string name;
    const double err = WorstGradError(fast.experts[e], want.experts[e], &name);
    track("experts[" + std::to_string(e) + "]." + name, err);
  }
  if (c.shared_F > 0) {
    std::string name;
    track("shared." + name, WorstGradError(fast.shared, want.shared, &name));
  }
  if (bits != nullptr) {
    *bits = fast.dx.Bytes();
    const auto& r = fast.drouter_weight.bytes();
    bits->insert(bits->end(), r.begin(), r.end());
    for (WeightGrads& g : fast.experts) {
      for (HostTensor* t : g.All()) bits->insert(bits->end(), t->bytes().begin(), t->bytes().end());
    }
  }
  return worst;
}

const MoeCase kBackwardCases[] = {
    // granite-4.0-h-tiny's routing (64 experts, top-6, shared expert) at d/4, F/4
    {"granite-4.0-h-tiny moe (d/4, F/4) train", 6, 384, 128, 64, 6, kGranite, 256},
    {"granite-4.0-h-tiny moe (d/4, F/4) train bf16 weights", 2, 384, 128, 64, 6, kGranite, 256,
     DType::kBF16},
    {"jamba moe scaled train", 16, 256, 896, 16, 2, kJamba},
    {"softmax top-k renormalised", 20, 128, 256, 8, 2, kJamba, 64, DType::kF32, true},
    {"granitemoe fused experts", 8, 96, 64, 8, 3, kGranite, 0, DType::kF16, false, true, Act::kSilu,
     false, false, true},
    {"ungated relu2 experts", 10, 64, 48, 8, 2, kGranite, 32, DType::kF32, false, false,
     Act::kRelu2, true, true},
    {"odd sizes", 7, 37, 19, 5, 3, kJamba, 23, DType::kF32, true, true, Act::kGeluErf, true, true,
     false, -1, 2, 0.75f},
    {"empty experts", 3, 48, 40, 32, 2, kGranite, 24},
    {"all tokens to one expert", 30, 32, 40, 8, 1, kJamba, 0, DType::kF32, false, true, Act::kSilu,
     false, true, false, 3},
    {"decode", 1, 64, 96, 8, 2, kJamba, 32},
    {"train over two chunks", 600, 16, 8192, 4, 1, kGranite},
    Grouped({"nemotron-3-nano moe (d/16, F/16) train", 6, 168, 116, 128, 6, kNemotron, 232,
             DType::kF32, true, false, Act::kRelu2},
            1, 1, 2.5f),
    Grouped({"sigmoid 4 groups keep 2 train", 12, 64, 48, 16, 3, kNemotron, 32, DType::kBF16, true,
             false, Act::kRelu2, true, true},
            4, 2, 2.5f),
    Grouped({"sigmoid not renormalised decode", 1, 64, 48, 8, 2, kNemotron, 0}, 2, 1, 1.0f),
};

TEST(MoeBackward, MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  double worst = 0.0;
  for (const MoeCase& c : kBackwardCases) {
    for (bool aux : {false, true}) {
      SCOPED_TRACE(c.Describe() + (aux ? " +drouter_logits" : ""));
      std::string which;
      const double err = BackwardError(c, seed, aux, &which);
      EXPECT_LE(err, 2 * kTolerance) << which;
      worst = std::max(worst, err);
    }
  }
  std::printf("  worst relative error, backward: %.3g\n", worst);
}

TEST(MoeBackward, EverySimdTarget) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const int targets = ForEachSimdTarget([&] {
    const MoeCase c{"targets",      6,    29,  21, 6, 2, kJamba, 13, DType::kBF16, true, true,
                    Act::kGeluTanh, true, true};
    std::string which;
    EXPECT_LE(BackwardError(c, seed, true, &which), 2 * kTolerance) << which;
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(MoeBackward, DeterministicForAThreadCount) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const MoeCase c{"prefill", 48, 128, 128, 16, 4, kJamba, 256};
  std::string which;
  std::vector<uint8_t> a, b;
  BackwardError(c, seed, true, &which, &a);
  BackwardError(c, seed, true, &which, &b);
  EXPECT_EQ(a, b);
}

// Every gradient against central finite differences of the fp64 forward, loss =
// sum(out * probe) + sum(router_logits * logit_probe): the oracle's tightly, the fast path's
// within f32 rounding. The routing must not change under the perturbations, so the router is
// drawn with a selection gap far above the step.
TEST(MoeBackward, FiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  for (MoeRouting routing : {kJamba, kGranite, kNemotron}) {
    for (bool normalize : {false, true}) {
      if (normalize && routing == kGranite) continue;
      for (bool gated : {true, false}) {
        MoeCase c{"fd",    4,    6,           5,         4,     2,
                  routing, 3,    DType::kF32, normalize, gated, gated ? Act::kSilu : Act::kRelu2,
                  true,    true, false,       -1,        0,     0.75f};
        if (routing == kNemotron) c = Grouped(c, 2, 1, 2.5f);
        SCOPED_TRACE(c.Describe());
        Rng rng(seed + n++);
        // Central differences with step 1e-6 must not change the routing.
        MoeProblem prob(c, rng, /*min_gap=*/1e-3);
        ASSERT_GT(prob.MinSelectionGap(), 1e-3);
        prob.MaterializeAll();
        HostTensor dout({c.T, c.d}, DType::kF32), dlogits({c.T, c.E}, DType::kF32);
        const std::vector<double> probe = dout.Fill(rng.NormalVec(c.T * c.d));
        const std::vector<double> logit_probe = dlogits.Fill(rng.NormalVec(c.T * c.E, 0.5));
        ref::MoeInputs in = prob.Ref();
        // Every parameter the loss depends on, as a mutable copy the loss reads.
        std::vector<std::vector<double>> values;
        std::vector<std::string> names;
        auto add = [&](const std::string& name, const std::vector<double>& v) {
          if (v.empty()) return;
          values.push_back(v);
          names.push_back(name);
        };
        add("x", prob.x_d);
        add("router_weight", prob.router_d);
        add("router_bias", prob.router_bias_d);
        for (int64_t e = 0; e < c.E; ++e) {
          const WeightSet& w = prob.experts[e];
          const std::string p = "experts[" + std::to_string(e) + "].";
          add(p + "gate", w.gate_d);
          add(p + "up", w.up_d);
          add(p + "down", w.down_d);
          add(p + "gate_bias", w.gate_bias_d);
          add(p + "up_bias", w.up_bias_d);
          add(p + "down_bias", w.down_bias_d);
        }
        for (const auto& [name, v] : {std::pair{"shared.gate", &prob.shared.gate_d},
                                      {"shared.up", &prob.shared.up_d},
                                      {"shared.down", &prob.shared.down_d},
                                      {"shared.gate_bias", &prob.shared.gate_bias_d},
                                      {"shared.up_bias", &prob.shared.up_bias_d},
                                      {"shared.down_bias", &prob.shared.down_bias_d}}) {
          add(name, *v);
        }
        // Rebinds `in` to `values` (same order as added).
        auto bind = [&] {
          size_t i = 0;
          in.x = values[i++].data();
          in.router_weight = values[i++].data();
          in.router_bias = values[i++].data();
          auto take = [&](bool present) { return present ? values[i++].data() : nullptr; };
          auto bind_weights = [&](ref::MlpWeights& w) {
            w.gate = take(gated);
            w.up = take(true);
            w.down = take(true);
            w.gate_bias = take(gated);
            w.up_bias = take(true);
            w.down_bias = take(true);
          };
          for (ref::MlpWeights& w : in.experts) bind_weights(w);
          bind_weights(in.shared);
        };
        bind();
        // The loss, or with `magnitude` the sum of its terms' absolute values.
        auto loss = [&](bool magnitude = false) {
          std::vector<double> out(c.T * c.d), logits(c.T * c.E);
          ref::MoeForward(prob.Shape(), c.T, in, out.data(), logits.data(), nullptr, nullptr,
                          nullptr);
          double sum = 0.0;
          for (size_t i = 0; i < out.size(); ++i)
            sum += magnitude ? std::abs(out[i] * probe[i]) : out[i] * probe[i];
          for (size_t i = 0; i < logits.size(); ++i)
            sum += magnitude ? std::abs(logits[i] * logit_probe[i]) : logits[i] * logit_probe[i];
          return sum;
        };
        // Each central difference carries the loss's rounding, ~eps * magnitude / step: a
        // gradient whose entries are that small (an expert to which relu^2 gives near-zero
        // activations: 2.7% of seeds failed a purely relative 1e-6) is held to it instead.
        constexpr double kStep = 1e-6;
        const double fd_noise = 1e-15 * loss(true) / kStep;
        auto within = [&](const std::vector<double>& got, const std::vector<double>& fd,
                          double rel) {
          double diff = 0.0, norm = 0.0;
          for (size_t i = 0; i < fd.size(); ++i) {
            if (!std::isfinite(got[i])) return false;
            diff += (got[i] - fd[i]) * (got[i] - fd[i]);
            norm += fd[i] * fd[i];
          }
          return std::sqrt(diff) <= rel * std::sqrt(norm) + fd_noise * std::sqrt(fd.size());
        };
        MoeRefGrads want(prob);
        ref::MoeBackward(prob.Shape(), c.T, in, probe.data(), logit_probe.data(), want.Views(prob));
        MoeGradsStorage fast(prob);
        ASSERT_TRUE(MoeBackward(prob.Inputs(), dout.view(), dlogits.view(), fast.Views(prob),
                                prob.Options())
                        .ok());
        // The analytic gradients in the order of `values`.
        std::vector<std::pair<std::vector<double>, std::vector<double>>> grads;  // oracle, fast
        grads.push_back({want.dx, fast.dx.ToDouble()});
        grads.push_back({want.drouter_weight, fast.drouter_weight.ToDouble()});
        grads.push_back({want.drouter_bias, fast.drouter_bias.ToDouble()});
        auto add_grads = [&](RefWeightGrads& r, WeightGrads& f) {
          if (gated) grads.push_back({r.dgate, f.dgate.ToDouble()});
          grads.push_back({r.dup, f.dup.ToDouble()});
          grads.push_back({r.ddown, f.ddown.ToDouble()});
          if (gated) grads.push_back({r.dgate_bias, f.dgate_bias.ToDouble()});
          grads.push_back({r.dup_bias, f.dup_bias.ToDouble()});
          grads.push_back({r.ddown_bias, f.ddown_bias.ToDouble()});
        };
        for (int64_t e = 0; e < c.E; ++e) add_grads(want.experts[e], fast.experts[e]);
        add_grads(want.shared, fast.shared);
        ASSERT_EQ(grads.size(), values.size());
        for (size_t v = 0; v < values.size(); ++v) {
          std::vector<double> fd(values[v].size());
          for (size_t i = 0; i < fd.size(); ++i)
            fd[i] = CentralDifference(values[v], i, kStep, [&] { return loss(); });
          EXPECT_TRUE(within(grads[v].first, fd, 1e-6))
              << names[v] << " (oracle): relative error " << RelativeError(grads[v].first, fd);
          EXPECT_TRUE(within(grads[v].second, fd, 1e-4))
              << names[v] << " (fast): relative error " << RelativeError(grads[v].second, fd);
        }
      }
    }
  }
  EXPECT_EQ(n, 10);
}

// kNemotron with every score tied (a zero router, a zero correction bias): the groups and the
// experts go to the lower index, as the header says, and the weights are the equal sigmoids.
TEST(MoeForward, SigmoidTiesGoToTheLowerIndex) {
  Rng rng(FreshSeed());
  MoeCase c = Grouped({"ties", 3, 16, 8, 8, 3, kNemotron, 0, DType::kF32, true}, 4, 2, 2.0f);
  MoeProblem prob(c, rng);
  prob.router.Fill(std::vector<double>(c.E * c.d, 0.0));
  prob.score_bias.Fill(std::vector<double>(c.E, 0.0));
  HostTensor out({c.T, c.d}, DType::kF32), index({c.T, c.k}, DType::kI32),
      weight({c.T, c.k}, DType::kF32);
  out.Poison();
  weight.Poison();
  ASSERT_TRUE(
      MoeForward(prob.Inputs(), {out.view(), {}, {}, index.view(), weight.view()}, prob.Options())
          .ok());
  const int32_t* got = static_cast<const int32_t*>(index.data());
  const std::vector<double> w = weight.ToDouble();
  for (int64_t t = 0; t < c.T; ++t) {
    // groups {0,1} {2,3} {4,5} {6,7}: groups 0 and 1 kept, experts 0, 1, 2 chosen.
    for (int64_t j = 0; j < c.k; ++j) {
      EXPECT_EQ(got[t * c.k + j], j) << t;
      EXPECT_NEAR(w[t * c.k + j], 2.0 / 3.0, 1e-7) << t;  // 0.5 / 1.5, times 2
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing

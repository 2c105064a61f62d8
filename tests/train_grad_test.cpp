// The whole-model gradient check: every parameter tensor of tiny Mamba-1, Mamba-2 and hybrid
// (Mamba-2 + attention + MLP, GraniteMoeHybrid's muP multipliers) language models, the f32
// trainer's analytic gradient against fp64 central finite differences of the
// fp64 reference model (tests/train_ref_model.hpp) at the same parameter values. The loss is
// the summed next-token cross-entropy of a random token batch; parameters start from mamba_ssm's
// initialisation and are then perturbed so that no tensor sits at a special point (norm weights
// of exactly 1, D of exactly 1).
//
// Why this tolerance: the finite differences are of an fp64 function (step 1e-5, truncation
// and rounding both ~1e-10 relative), so what remains is the f32 trainer's own rounding,
// measured at 1e-7..6e-6 per tensor. A wrong term in any backward gives errors of order 1.
// A_log and dt_bias are per-head sums over every position of terms of both signs; when they
// cancel, the f32 rounding of the terms does not, and the relative error of such a tensor has
// been measured at up to 1.0e-4 (about 1 run in 32). So each tensor's bound is raised to a few
// times its own rounding noise, measured by re-running the trainer with other loss scales:
// the gradients divided by the scale are equal in exact arithmetic, so what differs is
// rounding. Over 40 runs of the four checks, every error above 1e-5 was at most 0.95 times
// that noise. The noise itself must stay at rounding level (kMaxNoise), so a loss-scale bug
// cannot widen the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ssmkit/threads.hpp"
#include "test_util.hpp"
#include "train/init.hpp"
#include "train/lm.hpp"
#include "train_ref_model.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kGradTolerance = 5e-5;
constexpr double kNoiseFactor = 8.0;
constexpr double kMaxNoise = 1e-3;

ModelConfig TinyConfig(ModelArch arch) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_layer = 2;
  c.vocab_size = c.config_vocab_size = 16;
  c.d_inner = 16;
  c.d_state = 4;
  c.d_conv = 4;
  c.norm_eps = 1e-5f;
  c.tie_embeddings = true;
  if (arch == ModelArch::kMamba1) {
    c.dt_rank = 2;
  } else {
    c.nheads = 4;
    c.headdim = 4;
    c.ngroups = 1;
    c.chunk_size = 4;
  }
  return c;
}

// A GraniteMoeHybrid of three layers (Mamba-2, attention, Mamba-2, each followed by the SwiGLU
// MLP), grouped-query attention, every multiplier away from 1; rope or none ("nope").
ModelConfig TinyHybridConfig(bool rope) {
  ModelConfig c = TinyConfig(ModelArch::kMamba2);
  c.family = "granitemoehybrid";
  c.n_layer = 3;
  c.tie_embeddings = false;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 1;
  c.attention.head_dim = 4;
  c.attention.scale = 0.3f;
  c.attention.rotary_dim = rope ? 4 : 0;
  c.attention.rope_theta = 100.0;  // a short period, so that 7 positions turn far
  c.ffn.intermediate = c.ffn.shared_intermediate = 12;
  c.multipliers.embedding = 2.5f;
  c.multipliers.residual = 0.6f;
  c.multipliers.logits = 0.7f;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    c.blocks.push_back({i == 1 ? BlockKind::kAttention : BlockKind::kMamba2, i});
    c.blocks.push_back({BlockKind::kMlp, i});
  }
  return c;
}

struct Problem {
  ModelConfig config;
  std::unique_ptr<train::TrainModel> model;
  std::vector<int32_t> tokens;
  int64_t batch = 2, seqlen = 7;
};

Problem MakeProblem(const ModelConfig& config, uint64_t seed) {
  Problem p;
  p.config = config;
  const Status st = train::TrainModel::Create(p.config, &p.model);
  EXPECT_TRUE(st.ok()) << st.message();
  std::span<float> w = p.model->params();
  train::InitParams(p.config, p.model->table(), seed, w.data());
  Rng rng(seed);
  // Perturb: a few percent on every parameter, more on the matrices so the tiny model's
  // logits are not all near zero.
  for (const train::ParamInfo& info : p.model->table().params()) {
    const double spread = info.weight_decay ? 0.3 : 0.05;
    for (int64_t i = 0; i < info.numel; ++i) {
      w[info.offset + i] += static_cast<float>(
          spread * rng.Normal() * (info.weight_decay ? 1.0 : std::abs(w[info.offset + i]) + 0.1));
    }
  }
  for (int64_t i = 0; i < p.batch * (p.seqlen + 1); ++i) {
    p.tokens.push_back(
        static_cast<int32_t>(rng.Uniform(0, static_cast<double>(p.config.vocab_size))));
  }
  return p;
}

// The largest relative difference, tensor by tensor, between the gradients at loss scale 1
// (`grads`) and those at other loss scales divided by the scale.
std::vector<double> RoundingNoise(Problem& p, std::span<const float> grads) {
  const std::vector<train::ParamInfo>& params = p.model->table().params();
  std::vector<double> noise(params.size(), 0.0);
  for (const float scale : {3.0f, 0.3f, 7.0f}) {
    p.model->ZeroGrads();
    double loss = 0.0;
    EXPECT_TRUE(p.model->ForwardBackward(p.tokens, p.batch, p.seqlen, scale, &loss).ok());
    const std::span<const float> scaled = p.model->grads();
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<double> a, b;
      for (int64_t i = 0; i < params[k].numel; ++i) {
        const size_t at = static_cast<size_t>(params[k].offset + i);
        a.push_back(scaled[at] / scale);
        b.push_back(grads[at]);
      }
      noise[k] = std::max(noise[k], RelativeError(a, b));
    }
  }
  return noise;
}

void CheckGradients(const ModelConfig& config) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Problem p = MakeProblem(config, seed);
  ASSERT_NE(p.model, nullptr);
  p.model->ZeroGrads();
  double loss32 = 0.0;
  const Status st = p.model->ForwardBackward(p.tokens, p.batch, p.seqlen, 1.0f, &loss32);
  ASSERT_TRUE(st.ok()) << st.message();

  std::vector<double> w(p.model->params().begin(), p.model->params().end());
  const RefModel ref(p.config, p.model->table());
  const double loss64 = ref.Loss(w, p.tokens, p.batch, p.seqlen);
  EXPECT_NEAR(loss32, loss64, 1e-5 * std::abs(loss64)) << "f32 forward vs fp64 reference";

  const std::vector<float> grads(p.model->grads().begin(), p.model->grads().end());
  const std::vector<double> noise = RoundingNoise(p, grads);
  const std::vector<train::ParamInfo>& params = p.model->table().params();
  for (size_t k = 0; k < params.size(); ++k) {
    const train::ParamInfo& info = params[k];
    std::vector<double> got, fd;
    for (int64_t i = 0; i < info.numel; ++i) {
      const size_t at = static_cast<size_t>(info.offset + i);
      const double step = 1e-5 * std::max(1.0, std::abs(w[at]));
      fd.push_back(
          CentralDifference(w, at, step, [&] { return ref.Loss(w, p.tokens, p.batch, p.seqlen); }));
      got.push_back(grads[at]);
    }
    const double err = RelativeError(got, fd);
    std::printf("  %-44s %6lld values  rel err %.2e  rounding noise %.2e\n", info.name.c_str(),
                static_cast<long long>(info.numel), err, noise[k]);
    EXPECT_LT(noise[k], kMaxNoise) << info.name << ": gradients not linear in the loss scale";
    EXPECT_LT(err, std::max(kGradTolerance, kNoiseFactor * noise[k])) << info.name;
  }
}

void CheckGradients(ModelArch arch, bool tie) {
  ModelConfig c = TinyConfig(arch);
  c.tie_embeddings = tie;
  CheckGradients(c);
}

TEST(TrainGrad, Mamba1EveryParameterVsFiniteDifferences) {
  CheckGradients(ModelArch::kMamba1, true);
}
TEST(TrainGrad, Mamba2EveryParameterVsFiniteDifferences) {
  CheckGradients(ModelArch::kMamba2, true);
}
TEST(TrainGrad, Mamba1UntiedHeadVsFiniteDifferences) { CheckGradients(ModelArch::kMamba1, false); }
TEST(TrainGrad, Mamba2UntiedHeadVsFiniteDifferences) { CheckGradients(ModelArch::kMamba2, false); }
TEST(TrainGrad, HybridRopeEveryParameterVsFiniteDifferences) {
  CheckGradients(TinyHybridConfig(true));
}
TEST(TrainGrad, HybridNopeTiedEveryParameterVsFiniteDifferences) {
  ModelConfig c = TinyHybridConfig(false);
  c.tie_embeddings = true;
  CheckGradients(c);
}

// Two half-scaled micro-batches accumulate to the gradient of their union: accumulation is a
// sum, and the loss scale enters linearly.
TEST(TrainGrad, AccumulationEqualsTheWholeBatch) {
  for (const ModelConfig& config :
       {TinyConfig(ModelArch::kMamba1), TinyConfig(ModelArch::kMamba2), TinyHybridConfig(true)}) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Problem p = MakeProblem(config, seed);
    const int64_t row = p.seqlen + 1;
    double loss = 0.0, a = 0.0, b = 0.0;
    p.model->ZeroGrads();
    ASSERT_TRUE(p.model->ForwardBackward(p.tokens, p.batch, p.seqlen, 0.5f, &loss).ok());
    const std::vector<float> whole(p.model->grads().begin(), p.model->grads().end());
    p.model->ZeroGrads();
    const std::span<const int32_t> all(p.tokens);
    ASSERT_TRUE(p.model->ForwardBackward(all.subspan(0, row), 1, p.seqlen, 0.5f, &a).ok());
    ASSERT_TRUE(p.model->ForwardBackward(all.subspan(row, row), 1, p.seqlen, 0.5f, &b).ok());
    const std::span<const float> parts = p.model->grads();
    EXPECT_NEAR(a + b, loss, 1e-5 * loss);
    std::vector<double> w(whole.begin(), whole.end()), g(parts.begin(), parts.end());
    EXPECT_LT(RelativeError(g, w), 1e-5);
  }
}

}  // namespace
}  // namespace ssmkit::testing

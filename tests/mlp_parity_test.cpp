// Parity with transformers: the feed-forward blocks of GraniteMoeHybrid (MoE + shared_mlp),
// Jamba (MoE), Falcon-H1, Nemotron-H and Zamba2 (with its LoRA adapter), as transformers 5.24
// computes them in f32 on random weights, recorded with torch's gradients by
// scripts/make_mlp_fixtures.py in tests/fixtures/mlp/. Our ops, fed the checkpoint tensors under
// their transformers names and layouts (3-D experts, fused gate/up), must give the same output,
// router logits and gradients (x, every weight, the router through the routing weights and an
// aux-loss gradient on the logits) within f32 rounding.
#include <cmath>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "ssmkit/mlp.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kTolerance = 1e-5;

class Fixture {
 public:
  explicit Fixture(const std::string& name) {
    const std::string path = std::string(SSMKIT_FIXTURES_DIR) + "/mlp/" + name + ".safetensors";
    const Status s = SafetensorsCheckpoint::OpenFile(path, &file_);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  // The recorded tensor `name` (f32, contiguous).
  Tensor Get(const std::string& name) const {
    const SafetensorsTensor* t = file_.Find(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->view() : Tensor{};
  }
  std::vector<double> Values(const std::string& name) const {
    const Tensor t = Get(name);
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<const float*>(t.data)[i];
    return v;
  }
  int64_t Dim(const std::string& name, int d) const { return Get(name).shape[d]; }

 private:
  SafetensorsCheckpoint file_;
};

// An f32 output buffer shaped like `like`, NaN-poisoned.
HostTensor OutputLike(const Tensor& like) {
  HostTensor t(std::vector<int64_t>(like.shape.begin(), like.shape.begin() + like.rank),
               DType::kF32);
  t.Poison();
  return t;
}

void ExpectClose(const HostTensor& got, const Fixture& f, const std::string& name) {
  const double err = RelativeError(got.ToDouble(), f.Values(name));
  EXPECT_LE(err, kTolerance) << name;
}

// GraniteMoeHybrid and Jamba: 3-D experts, router, (Granite) the fused shared_mlp.
void CheckMoe(const std::string& file, const std::string& prefix, MoeRouting routing, int64_t k,
              bool shared) {
  SCOPED_TRACE(file);
  const Fixture f(file);
  const Tensor x = f.Get("x");
  const int64_t T = x.shape[0], d = x.shape[1];
  const Tensor gate_up = f.Get(prefix + "experts.gate_up_proj");
  const int64_t E = gate_up.shape[0];
  std::vector<MlpWeights> experts(E);
  ASSERT_TRUE(SplitFusedExperts(gate_up, f.Get(prefix + "experts.down_proj"), experts).ok());
  MoeInputs in{x, f.Get(prefix + "router.weight"), Tensor{}, experts, MlpWeights{}};
  if (shared) {
    ASSERT_TRUE(SplitGateUp(f.Get("shared_mlp.input_linear.weight"), &in.shared_expert.gate,
                            &in.shared_expert.up)
                    .ok());
    in.shared_expert.down = f.Get("shared_mlp.output_linear.weight");
  }
  MoeOptions options;
  options.top_k = k;
  options.routing = routing;

  HostTensor out({T, d}, DType::kF32), logits({T, E}, DType::kF32);
  out.Poison();
  logits.Poison();
  ASSERT_TRUE(MoeForward(in, {out.view(), logits.view()}, options).ok());
  ExpectClose(out, f, "out");
  ExpectClose(logits, f, "router_logits");

  HostTensor dx = OutputLike(x), drouter = OutputLike(in.router_weight);
  HostTensor dgate_up = OutputLike(gate_up),
             ddown = OutputLike(f.Get(prefix + "experts.down_proj"));
  std::vector<MlpWeights> grad_views(E);
  ASSERT_TRUE(SplitFusedExperts(dgate_up.view(), ddown.view(), grad_views).ok());
  std::vector<MlpWeightGrads> expert_grads;
  for (const MlpWeights& g : grad_views) expert_grads.push_back({g.gate, g.up, g.down});
  MoeGrads grads{dx.view(), drouter.view(), Tensor{}, expert_grads, MlpWeightGrads{}};
  HostTensor dshared_in, dshared_out;
  if (shared) {
    dshared_in = OutputLike(f.Get("shared_mlp.input_linear.weight"));
    dshared_out = OutputLike(f.Get("shared_mlp.output_linear.weight"));
    ASSERT_TRUE(
        SplitGateUp(dshared_in.view(), &grads.shared_expert.dgate, &grads.shared_expert.dup).ok());
    grads.shared_expert.ddown = dshared_out.view();
  }
  const Status s = MoeBackward(in, f.Get("dout"), f.Get("drouter_logits"), grads, options);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectClose(dx, f, "grad.x");
  ExpectClose(drouter, f, "grad." + prefix + "router.weight");
  ExpectClose(dgate_up, f, "grad." + prefix + "experts.gate_up_proj");
  ExpectClose(ddown, f, "grad." + prefix + "experts.down_proj");
  if (shared) {
    ExpectClose(dshared_in, f, "grad.shared_mlp.input_linear.weight");
    ExpectClose(dshared_out, f, "grad.shared_mlp.output_linear.weight");
  }
}

TEST(MlpParity, GraniteMoeHybridMoeAndSharedMlp) {
  CheckMoe("granitemoehybrid_moe", "block_sparse_moe.", MoeRouting::kTopKSoftmax, 3, true);
}

TEST(MlpParity, JambaSparseMoeBlock) {
  CheckMoe("jamba_moe", "", MoeRouting::kSoftmaxTopK, 2, false);
}

// Falcon-H1 (gated silu, multipliers, biases) and Nemotron-H (ungated relu2, biases): separate
// gate_proj / up_proj / down_proj with biases.
void CheckDenseMlp(const std::string& file, bool gated, const MlpOptions& options) {
  SCOPED_TRACE(file);
  const Fixture f(file);
  const Tensor x = f.Get("x");
  MlpInputs in;
  in.x = x;
  in.weights.up = f.Get("up_proj.weight");
  in.weights.up_bias = f.Get("up_proj.bias");
  in.weights.down = f.Get("down_proj.weight");
  in.weights.down_bias = f.Get("down_proj.bias");
  if (gated) {
    in.weights.gate = f.Get("gate_proj.weight");
    in.weights.gate_bias = f.Get("gate_proj.bias");
  }
  HostTensor out = OutputLike(x);
  ASSERT_TRUE(MlpForward(in, out.view(), options).ok());
  ExpectClose(out, f, "out");

  HostTensor dx = OutputLike(x), dup = OutputLike(in.weights.up),
             dup_bias = OutputLike(in.weights.up_bias), ddown = OutputLike(in.weights.down),
             ddown_bias = OutputLike(in.weights.down_bias), dgate, dgate_bias;
  MlpGrads grads;
  grads.dx = dx.view();
  grads.weights = {Tensor{}, dup.view(),      ddown.view(),
                   Tensor{}, dup_bias.view(), ddown_bias.view()};
  if (gated) {
    dgate = OutputLike(in.weights.gate);
    dgate_bias = OutputLike(in.weights.gate_bias);
    grads.weights.dgate = dgate.view();
    grads.weights.dgate_bias = dgate_bias.view();
  }
  ASSERT_TRUE(MlpBackward(in, f.Get("dout"), grads, options).ok());
  ExpectClose(dx, f, "grad.x");
  ExpectClose(dup, f, "grad.up_proj.weight");
  ExpectClose(dup_bias, f, "grad.up_proj.bias");
  ExpectClose(ddown, f, "grad.down_proj.weight");
  ExpectClose(ddown_bias, f, "grad.down_proj.bias");
  if (gated) {
    ExpectClose(dgate, f, "grad.gate_proj.weight");
    ExpectClose(dgate_bias, f, "grad.gate_proj.bias");
  }
}

TEST(MlpParity, FalconH1Mlp) {
  CheckDenseMlp("falcon_h1_mlp", true, {MlpActivation::kSilu, 0.8125f, 0.5625f});
}

TEST(MlpParity, NemotronHMlp) { CheckDenseMlp("nemotron_h_mlp", false, {MlpActivation::kRelu2}); }

// Zamba2: fused gate_up_proj (with bias), gelu, and the block's LoRA adapter
// B (A x) (A (r, d), B (2F, r)) added to gate and up: computed here, passed as gate_add / up_add
// (two column views of one (T, 2F) buffer), and its gradients taken from dgate_add / dup_add.
TEST(MlpParity, Zamba2MlpWithAdapter) {
  const Fixture f("zamba2_mlp");
  const Tensor x = f.Get("x");
  const int64_t T = x.shape[0], d = x.shape[1];
  const std::vector<double> xv = f.Values("x"),
                            A = f.Values("gate_up_proj_adapter_list.1.0.weight"),
                            B = f.Values("gate_up_proj_adapter_list.1.1.weight");
  const int64_t r = f.Dim("gate_up_proj_adapter_list.1.0.weight", 0);
  const int64_t F2 = f.Dim("gate_up_proj_adapter_list.1.1.weight", 0), F = F2 / 2;
  // ax = x A^T (T, r); adapter = ax B^T (T, 2F).
  std::vector<double> ax(T * r, 0.0);
  HostTensor adapter({T, F2}, DType::kF32);
  std::vector<double> adapter_v(T * F2, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t i = 0; i < d; ++i) ax[t * r + j] += xv[t * d + i] * A[j * d + i];
    }
    for (int64_t c = 0; c < F2; ++c) {
      for (int64_t j = 0; j < r; ++j) adapter_v[t * F2 + c] += ax[t * r + j] * B[c * r + j];
    }
  }
  adapter.Fill(adapter_v);
  auto columns = [&](HostTensor& m, int64_t first) {  // (T, F) columns of a (T, 2F) matrix
    Tensor v = m.view();
    v.data = static_cast<float*>(m.data()) + first;
    v.shape[1] = F;
    return v;
  };
  MlpInputs in;
  in.x = x;
  ASSERT_TRUE(SplitGateUp(f.Get("gate_up_proj.weight"), &in.weights.gate, &in.weights.up).ok());
  ASSERT_TRUE(
      SplitGateUp(f.Get("gate_up_proj.bias"), &in.weights.gate_bias, &in.weights.up_bias).ok());
  in.weights.down = f.Get("down_proj.weight");
  in.weights.down_bias = f.Get("down_proj.bias");
  in.gate_add = columns(adapter, 0);
  in.up_add = columns(adapter, F);
  const MlpOptions options{MlpActivation::kGeluErf};
  HostTensor out = OutputLike(x);
  ASSERT_TRUE(MlpForward(in, out.view(), options).ok());
  ExpectClose(out, f, "out");

  HostTensor dx = OutputLike(x), dadapter({T, F2}, DType::kF32),
             dgate_up = OutputLike(f.Get("gate_up_proj.weight")),
             dgate_up_bias = OutputLike(f.Get("gate_up_proj.bias")),
             ddown = OutputLike(in.weights.down), ddown_bias = OutputLike(in.weights.down_bias);
  dadapter.Poison();
  MlpGrads grads;
  grads.dx = dx.view();
  grads.dgate_add = columns(dadapter, 0);
  grads.dup_add = columns(dadapter, F);
  ASSERT_TRUE(SplitGateUp(dgate_up.view(), &grads.weights.dgate, &grads.weights.dup).ok());
  ASSERT_TRUE(
      SplitGateUp(dgate_up_bias.view(), &grads.weights.dgate_bias, &grads.weights.dup_bias).ok());
  grads.weights.ddown = ddown.view();
  grads.weights.ddown_bias = ddown_bias.view();
  ASSERT_TRUE(MlpBackward(in, f.Get("dout"), grads, options).ok());
  ExpectClose(dgate_up, f, "grad.gate_up_proj.weight");
  ExpectClose(dgate_up_bias, f, "grad.gate_up_proj.bias");
  ExpectClose(ddown, f, "grad.down_proj.weight");
  ExpectClose(ddown_bias, f, "grad.down_proj.bias");
  // Through the adapter: dB = dadapter^T ax, dax = dadapter B, dA = dax^T x, dx += dax A.
  const std::vector<double> dad = dadapter.ToDouble();
  std::vector<double> dx_total = dx.ToDouble(), dA(r * d, 0.0), dB(F2 * r, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < r; ++j) {
      double dax = 0.0;
      for (int64_t c = 0; c < F2; ++c) {
        dax += dad[t * F2 + c] * B[c * r + j];
        dB[c * r + j] += dad[t * F2 + c] * ax[t * r + j];
      }
      for (int64_t i = 0; i < d; ++i) {
        dA[j * d + i] += dax * xv[t * d + i];
        dx_total[t * d + i] += dax * A[j * d + i];
      }
    }
  }
  EXPECT_LE(RelativeError(dx_total, f.Values("grad.x")), kTolerance) << "grad.x";
  EXPECT_LE(RelativeError(dA, f.Values("grad.gate_up_proj_adapter_list.1.0.weight")), kTolerance);
  EXPECT_LE(RelativeError(dB, f.Values("grad.gate_up_proj_adapter_list.1.1.weight")), kTolerance);
}

}  // namespace
}  // namespace ssmkit::testing

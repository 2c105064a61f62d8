#include "model/feed_forward_block.hpp"

#include "model/views.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/mlp.hpp"

namespace ssmkit::model {
namespace {

MlpOptions Options(const ModelConfig& c) {
  MlpOptions o;
  // Validated with the config: the name is one MlpActivationFromName knows.
  (void)MlpActivationFromName(c.ffn.activation, &o.activation);
  o.gate_multiplier = c.multipliers.mlp_gate;
  o.down_multiplier = c.multipliers.mlp_down;
  return o;
}

MoeOptions RoutingOptions(const ModelConfig& c) {
  MoeOptions o;
  o.top_k = c.ffn.top_k;
  o.routing = c.ffn.sigmoid_groups      ? MoeRouting::kSigmoidGroupTopK
              : c.ffn.topk_then_softmax ? MoeRouting::kTopKSoftmax
                                        : MoeRouting::kSoftmaxTopK;
  o.normalize_top_k = c.ffn.normalize_top_k;
  if (c.ffn.sigmoid_groups) {
    o.groups = c.ffn.groups;
    o.top_k_groups = c.ffn.top_k_groups;
    o.routed_scaling = c.ffn.routed_scaling;
  }
  o.mlp = Options(c);
  return o;
}

// NemotronHMoE with moe_latent_size:
//   out = fc2_latent_proj(routed(fc1_latent_proj(x); routing of x)) + shared(x)
// The op runs the routed experts on the latent rows (expert_x) and returns their sum at d_x;
// the projections are linear layers (so a GGUF file's quantized ones multiply as any other)
// and the shared expert an MLP on x.
Status LatentMoeForward(const ModelConfig& c, const FeedForwardWeights& w, int64_t T,
                        const float* x, const MoeActs& a, float* out) {
  const int64_t d = c.d_model, dx = c.ffn.latent;
  const Tensor rows_x = Rows(x, T, d, d);
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({rows_x, w.latent_down, w.latent_down_bias}, Rows(a.latent, T, dx, dx)));
  MoeInputs in;
  in.x = rows_x;
  in.expert_x = Rows(a.latent, T, dx, dx);
  in.router_weight = w.router;
  in.experts = w.experts;
  in.score_correction_bias = w.score_correction_bias;
  MoeOutputs outputs;
  outputs.out = Rows(a.routed, T, dx, dx);
  SSMKIT_RETURN_IF_ERROR(MoeForward(in, outputs, RoutingOptions(c)));
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({outputs.out, w.latent_up, w.latent_up_bias}, Rows(out, T, d, d)));
  if (!w.shared_expert.up.defined()) return Status::Ok();
  SSMKIT_RETURN_IF_ERROR(
      MlpForward({rows_x, w.shared_expert, {}, {}}, Rows(a.shared, T, d, d), Options(c)));
  for (int64_t i = 0; i < T * d; ++i) out[i] += a.shared[i];
  return Status::Ok();
}

}  // namespace

int64_t MlpFloats(const ModelConfig& c, int64_t T) {
  return c.adapter_rank > 0 ? T * (c.adapter_rank + 2 * c.ffn.intermediate) : 0;
}

int64_t MoeFloats(const ModelConfig& c, int64_t T) {
  return c.ffn.latent > 0 ? T * (2 * c.ffn.latent + c.d_model) : 0;
}

MoeActs CarveMoe(const ModelConfig& c, int64_t T, float* base) {
  MoeActs a;
  a.latent = base;
  a.routed = a.latent + T * c.ffn.latent;
  a.shared = a.routed + T * c.ffn.latent;
  return a;
}

MlpActs CarveMlp(const ModelConfig& c, int64_t T, float* base) {
  MlpActs a;
  a.low = base;
  a.gate_up = base + T * c.adapter_rank;
  return a;
}

Status MlpBlockForward(const ModelConfig& c, const FeedForwardWeights& w, int64_t T, const float* x,
                       const MlpActs& a, float* out) {
  const int64_t d = c.d_model, F = c.ffn.intermediate;
  MlpInputs in;
  in.x = Rows(x, T, d, d);
  in.weights = w.mlp;
  if (w.gate_up_adapter.defined()) {
    const int64_t r = c.adapter_rank;
    SSMKIT_RETURN_IF_ERROR(
        LinearForward({in.x, w.gate_up_adapter.a, Tensor{}}, Rows(a.low, T, r, r)));
    SSMKIT_RETURN_IF_ERROR(LinearForward({Rows(a.low, T, r, r), w.gate_up_adapter.b, Tensor{}},
                                         Rows(a.gate_up, T, 2 * F, 2 * F)));
    in.gate_add = Rows(a.gate_up, T, F, 2 * F);
    in.up_add = Rows(a.gate_up + F, T, F, 2 * F);
  }
  return MlpForward(in, Rows(out, T, d, d), Options(c));
}

Status MoeBlockForward(const ModelConfig& c, const FeedForwardWeights& w, int64_t T, const float* x,
                       const MoeActs& a, float* out) {
  if (c.ffn.latent > 0) return LatentMoeForward(c, w, T, x, a, out);
  const int64_t d = c.d_model;
  MoeInputs in;
  in.x = Rows(x, T, d, d);
  in.router_weight = w.router;
  in.experts = w.experts;
  in.shared_expert = w.shared_expert;
  in.score_correction_bias = w.score_correction_bias;
  MoeOutputs outputs;
  outputs.out = Rows(out, T, d, d);
  return MoeForward(in, outputs, RoutingOptions(c));
}

}  // namespace ssmkit::model

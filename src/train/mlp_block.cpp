#include "train/mlp_block.hpp"

#include "ssmkit/mlp.hpp"
#include "train/views.hpp"

namespace ssmkit::train {
namespace {

MlpInputs MlpInputsOf(const BlockArgs& a, const float* normed) {
  const int64_t M = a.tokens(), d = a.config->d_model, F = a.config->ffn.intermediate;
  const float* W_in = a.P(a.layer.mlp_in);  // (2F, d): rows [gate (F), up (F)]
  MlpInputs in;
  in.x = F32Contiguous(normed, {M, d});
  in.weights.gate = F32Contiguous(W_in, {F, d});
  in.weights.up = F32Contiguous(W_in + F * d, {F, d});
  in.weights.down = F32Contiguous(a.P(a.layer.mlp_out), {d, F});
  return in;
}

Status MlpOptionsOf(const BlockArgs& a, MlpOptions* o) {
  return MlpActivationFromName(a.config->ffn.activation, &o->activation);
}

}  // namespace

Status MlpBlockForward(const BlockArgs& a, const float* normed, MlpSaved*, MlpScratch*,
                       float* out) {
  MlpOptions o;
  SSMKIT_RETURN_IF_ERROR(MlpOptionsOf(a, &o));
  return MlpForward(MlpInputsOf(a, normed), F32Contiguous(out, {a.tokens(), a.config->d_model}), o);
}

Status MlpBlockBackward(const BlockArgs& a, const float* normed, const MlpSaved&, const float* dout,
                        MlpScratch* w, float* dnormed) {
  const int64_t M = a.tokens(), d = a.config->d_model, F = a.config->ffn.intermediate;
  MlpOptions o;
  SSMKIT_RETURN_IF_ERROR(MlpOptionsOf(a, &o));
  Resize(w->dgate_up, 2 * F * d);
  Resize(w->ddown, d * F);
  MlpGrads g;
  g.dx = F32Contiguous(dnormed, {M, d});
  g.weights.dgate = F32Contiguous(w->dgate_up.data(), {F, d});
  g.weights.dup = F32Contiguous(w->dgate_up.data() + F * d, {F, d});
  g.weights.ddown = F32Contiguous(w->ddown.data(), {d, F});
  SSMKIT_RETURN_IF_ERROR(MlpBackward(MlpInputsOf(a, normed), F32Contiguous(dout, {M, d}), g, o));
  AddInto(a.G(a.layer.mlp_in), w->dgate_up.data(), 2 * F * d);
  AddInto(a.G(a.layer.mlp_out), w->ddown.data(), d * F);
  return Status::Ok();
}

}  // namespace ssmkit::train

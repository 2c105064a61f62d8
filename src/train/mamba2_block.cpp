#include "train/mamba2_block.hpp"

#include "ssmkit/conv1d.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/ssd.hpp"
#include "train/gemm.hpp"
#include "train/views.hpp"

namespace ssmkit::train {
namespace {

struct Dims {
  int64_t Bt, L, M, d, D, H, P, G, N, C, I, K;
};

Dims DimsOf(const BlockArgs& a) {
  const ModelConfig& c = *a.config;
  return {a.batch,   a.seqlen,  a.tokens(), c.d_model,    c.d_inner,       c.nheads,
          c.headdim, c.ngroups, c.d_state,  c.conv_dim(), c.in_proj_dim(), c.d_conv};
}

CausalConv1dInputs ConvInputs(const BlockArgs& a, const Dims& s, const float* xbc_t) {
  CausalConv1dInputs in;
  in.x = F32Contiguous(xbc_t, {s.Bt, s.C, s.L});
  in.weight = F32Contiguous(a.P(a.layer.conv_w), {s.C, s.K});
  in.bias = F32Contiguous(a.P(a.layer.conv_b), {s.C});
  in.activation = Conv1dActivation::kSilu;
  return in;
}

SsdInputs SsdInputsOf(const BlockArgs& a, const Dims& s, const Mamba2Saved& v, const float* A) {
  const float* xbc = v.xbc.data();
  SsdInputs in;
  in.x = View(xbc, {s.Bt, s.L, s.H, s.P}, {s.L * s.C, s.C, s.P, 1});
  in.dt = View(v.zxbcdt.data() + s.D + s.C, {s.Bt, s.L, s.H}, {s.L * s.I, s.I, 1});
  in.A = F32Contiguous(A, {s.H});
  in.B = View(xbc + s.D, {s.Bt, s.L, s.G, s.N}, {s.L * s.C, s.C, s.N, 1});
  in.C = View(xbc + s.D + s.G * s.N, {s.Bt, s.L, s.G, s.N}, {s.L * s.C, s.C, s.N, 1});
  in.D = F32Contiguous(a.P(a.layer.D), {s.H});
  in.dt_bias = F32Contiguous(a.P(a.layer.dt_bias), {s.H});
  in.dt_softplus = true;
  in.dt_min = a.config->dt_min;
  in.dt_max = a.config->dt_max;
  return in;
}

RmsNormInputs GatedNormInputs(const BlockArgs& a, const Dims& s, const Mamba2Saved& v) {
  RmsNormInputs in;
  in.x = F32Contiguous(v.y.data(), {s.M, s.D});
  in.weight = F32Contiguous(a.P(a.layer.gated_norm), {s.D});
  in.z = View(v.zxbcdt.data(), {s.M, s.D}, {s.I, 1});
  return in;
}

RmsNormOptions GatedNormOptions(const BlockArgs& a, const Dims& s) {
  RmsNormOptions o;
  o.eps = a.config->norm_eps;
  o.group_size = s.D / s.G;
  o.norm_before_gate = false;
  return o;
}

}  // namespace

Status Mamba2Forward(const BlockArgs& a, const float* normed, Mamba2Saved* v, Mamba2Scratch* w,
                     float* out) {
  const Dims s = DimsOf(a);
  Resize(v->zxbcdt, s.M * s.I);
  Resize(v->xbc_t, s.M * s.C);
  Resize(v->xbc, s.M * s.C);
  Resize(v->y, s.M * s.D);
  Resize(v->yn, s.M * s.D);
  Resize(w->conv_t, s.M * s.C);
  Resize(w->A, s.H);

  // in_proj in its three parts: z and dt token-major into zxbcdt's columns, xBC channel-major
  // per sequence, the layout the conv takes (no transpose on the way in).
  const float* W_in = a.P(a.layer.in_proj);  // (I, d): rows [z (D), xBC (C), dt (H)]
  ParallelGemm(false, true, s.M, s.D, s.d, 1.0f, normed, s.d, W_in, s.d, 0.0f, v->zxbcdt.data(),
               s.I);
  ParallelGemm(false, true, s.M, s.H, s.d, 1.0f, normed, s.d, W_in + (s.D + s.C) * s.d, s.d, 0.0f,
               v->zxbcdt.data() + s.D + s.C, s.I);
  for (int64_t b = 0; b < s.Bt; ++b) {
    ParallelGemm(false, true, s.C, s.L, s.d, 1.0f, W_in + s.D * s.d, s.d, normed + b * s.L * s.d,
                 s.d, 0.0f, v->xbc_t.data() + b * s.C * s.L, s.L);
  }
  SSMKIT_RETURN_IF_ERROR(CausalConv1dForward(
      ConvInputs(a, s, v->xbc_t.data()), F32Contiguous(w->conv_t.data(), {s.Bt, s.C, s.L}), {}));
  ToTokens(w->conv_t.data(), s.Bt, s.L, s.C, v->xbc.data(), s.C);
  NegExp(a.P(a.layer.A_log), s.H, w->A.data());
  SSMKIT_RETURN_IF_ERROR(SsdForward(SsdInputsOf(a, s, *v, w->A.data()),
                                    F32Contiguous(v->y.data(), {s.Bt, s.L, s.H, s.P}), {}));
  SSMKIT_RETURN_IF_ERROR(RmsNormForward(
      GatedNormInputs(a, s, *v), F32Contiguous(v->yn.data(), {s.M, s.D}), GatedNormOptions(a, s)));
  ParallelGemm(false, true, s.M, s.d, s.D, 1.0f, v->yn.data(), s.D, a.P(a.layer.out_proj), s.D,
               0.0f, out, s.d);
  return Status::Ok();
}

Status Mamba2Backward(const BlockArgs& a, const float* normed, const Mamba2Saved& v,
                      const float* dout, Mamba2Scratch* w, float* dnormed) {
  const Dims s = DimsOf(a);
  const LayerOffsets& o = a.layer;
  Resize(w->dyn, s.M * s.D);
  Resize(w->dy, s.M * s.D);
  Resize(w->dzxbcdt, s.M * s.I);
  Resize(w->dxbc, s.M * s.C);
  Resize(w->dxbc_t, s.M * s.C);
  Resize(w->dpre_t, s.M * s.C);
  Resize(w->A, s.H);
  Resize(w->dA, s.H);
  Resize(w->dD, s.H);
  Resize(w->ddt_bias, s.H);
  Resize(w->dnorm, s.D);
  Resize(w->dconv_w, s.C * s.K);
  Resize(w->dconv_b, s.C);

  // out_proj.
  ParallelGemm(true, false, s.d, s.D, s.M, 1.0f, dout, s.d, v.yn.data(), s.D, 1.0f, a.G(o.out_proj),
               s.D);
  ParallelGemm(false, false, s.M, s.D, s.d, 1.0f, dout, s.d, a.P(o.out_proj), s.D, 0.0f,
               w->dyn.data(), s.D);

  // Gated norm: dz lands in dzxbcdt's z columns.
  RmsNormGrads ng;
  ng.dx = F32Contiguous(w->dy.data(), {s.M, s.D});
  ng.dweight = F32Contiguous(w->dnorm.data(), {s.D});
  ng.dz = View(w->dzxbcdt.data(), {s.M, s.D}, {s.I, 1});
  SSMKIT_RETURN_IF_ERROR(RmsNormBackward(GatedNormInputs(a, s, v),
                                         F32Contiguous(w->dyn.data(), {s.M, s.D}), ng,
                                         GatedNormOptions(a, s)));
  AddInto(a.G(o.gated_norm), w->dnorm.data(), s.D);

  // SSD: dx, dB, dC land in dxbc; ddt in dzxbcdt's dt columns.
  NegExp(a.P(o.A_log), s.H, w->A.data());
  SsdGrads g;
  float* dxbc = w->dxbc.data();
  g.dx = View(dxbc, {s.Bt, s.L, s.H, s.P}, {s.L * s.C, s.C, s.P, 1});
  g.ddt = View(w->dzxbcdt.data() + s.D + s.C, {s.Bt, s.L, s.H}, {s.L * s.I, s.I, 1});
  g.dA = F32Contiguous(w->dA.data(), {s.H});
  g.dB = View(dxbc + s.D, {s.Bt, s.L, s.G, s.N}, {s.L * s.C, s.C, s.N, 1});
  g.dC = View(dxbc + s.D + s.G * s.N, {s.Bt, s.L, s.G, s.N}, {s.L * s.C, s.C, s.N, 1});
  g.dD = F32Contiguous(w->dD.data(), {s.H});
  g.ddt_bias = F32Contiguous(w->ddt_bias.data(), {s.H});
  SSMKIT_RETURN_IF_ERROR(SsdBackward(SsdInputsOf(a, s, v, w->A.data()),
                                     F32Contiguous(w->dy.data(), {s.Bt, s.L, s.H, s.P}), {}, g));
  AccumulateDALog(w->dA.data(), w->A.data(), s.H, a.G(o.A_log));
  AddInto(a.G(o.D), w->dD.data(), s.H);
  AddInto(a.G(o.dt_bias), w->ddt_bias.data(), s.H);

  // conv1d (with its silu), channel-major; its dx goes back into dzxbcdt's xBC columns.
  ToChannels(dxbc, s.C, s.Bt, s.L, s.C, w->dxbc_t.data());
  CausalConv1dGrads cg;
  cg.dx = F32Contiguous(w->dpre_t.data(), {s.Bt, s.C, s.L});
  cg.dweight = F32Contiguous(w->dconv_w.data(), {s.C, s.K});
  cg.dbias = F32Contiguous(w->dconv_b.data(), {s.C});
  SSMKIT_RETURN_IF_ERROR(CausalConv1dBackward(
      ConvInputs(a, s, v.xbc_t.data()), F32Contiguous(w->dxbc_t.data(), {s.Bt, s.C, s.L}), {}, cg));
  AddInto(a.G(o.conv_w), w->dconv_w.data(), s.C * s.K);
  AddInto(a.G(o.conv_b), w->dconv_b.data(), s.C);

  // in_proj, part by part as in the forward: dz and ddt sit in dzxbcdt's columns, dxBC in the
  // conv's channel-major dpre_t.
  const float* W_in = a.P(o.in_proj);
  float* dW_in = a.G(o.in_proj);
  const float* dz = w->dzxbcdt.data();
  const float* ddt = w->dzxbcdt.data() + s.D + s.C;
  ParallelGemm(false, false, s.M, s.d, s.D, 1.0f, dz, s.I, W_in, s.d, 0.0f, dnormed, s.d);
  ParallelGemm(false, false, s.M, s.d, s.H, 1.0f, ddt, s.I, W_in + (s.D + s.C) * s.d, s.d, 1.0f,
               dnormed, s.d);
  ParallelGemm(true, false, s.D, s.d, s.M, 1.0f, dz, s.I, normed, s.d, 1.0f, dW_in, s.d);
  ParallelGemm(true, false, s.H, s.d, s.M, 1.0f, ddt, s.I, normed, s.d, 1.0f,
               dW_in + (s.D + s.C) * s.d, s.d);
  for (int64_t b = 0; b < s.Bt; ++b) {
    const float* dpre_b = w->dpre_t.data() + b * s.C * s.L;
    ParallelGemm(true, false, s.L, s.d, s.C, 1.0f, dpre_b, s.L, W_in + s.D * s.d, s.d, 1.0f,
                 dnormed + b * s.L * s.d, s.d);
    ParallelGemm(false, false, s.C, s.d, s.L, 1.0f, dpre_b, s.L, normed + b * s.L * s.d, s.d, 1.0f,
                 dW_in + s.D * s.d, s.d);
  }
  return Status::Ok();
}

}  // namespace ssmkit::train

#include "train/mamba1_block.hpp"

#include "ssmkit/conv1d.hpp"
#include "ssmkit/selective_scan.hpp"
#include "train/gemm.hpp"
#include "train/views.hpp"

namespace ssmkit::train {
namespace {

struct Dims {
  int64_t Bt, L, d, D, N, R, K, X;  // X = R + 2N, the rows of x_proj
};

Dims DimsOf(const BlockArgs& a) {
  const ModelConfig& c = *a.config;
  return {a.batch,   a.seqlen,  c.d_model, c.d_inner,
          c.d_state, c.dt_rank, c.d_conv,  c.dt_rank + 2 * c.d_state};
}

CausalConv1dInputs ConvInputs(const BlockArgs& a, const Dims& s, const float* xz) {
  CausalConv1dInputs in;
  in.x = View(xz, {s.Bt, s.D, s.L}, {2 * s.D * s.L, s.L, 1});  // the x half of xz
  in.weight = F32Contiguous(a.P(a.layer.conv_w), {s.D, s.K});
  in.bias = F32Contiguous(a.P(a.layer.conv_b), {s.D});
  in.activation = Conv1dActivation::kSilu;
  return in;
}

SelectiveScanInputs ScanInputs(const BlockArgs& a, const Dims& s, const Mamba1Saved& v,
                               const float* A) {
  SelectiveScanInputs in;
  in.u = F32Contiguous(v.xc.data(), {s.Bt, s.D, s.L});
  in.delta = F32Contiguous(v.dt.data(), {s.Bt, s.D, s.L});
  in.A = F32Contiguous(A, {s.D, s.N});
  in.B = View(v.xdbl.data() + s.R * s.L, {s.Bt, s.N, s.L}, {s.X * s.L, s.L, 1});
  in.C = View(v.xdbl.data() + (s.R + s.N) * s.L, {s.Bt, s.N, s.L}, {s.X * s.L, s.L, 1});
  in.D = F32Contiguous(a.P(a.layer.D), {s.D});
  in.z = View(v.xz.data() + s.D * s.L, {s.Bt, s.D, s.L}, {2 * s.D * s.L, s.L, 1});
  in.delta_bias = F32Contiguous(a.P(a.layer.dt_bias), {s.D});
  in.delta_softplus = true;
  return in;
}

Tensor ChunkStates(const Mamba1Saved& v, const Dims& s) {
  return F32Contiguous(v.chunk_states.data(), {s.Bt, s.D, SelectiveScanChunkCount(s.L), s.N});
}

}  // namespace

Status Mamba1Forward(const BlockArgs& a, const float* normed, Mamba1Saved* v,
                     Mamba1Scratch* scratch, float* out) {
  const Dims s = DimsOf(a);
  Resize(v->xz, s.Bt * 2 * s.D * s.L);
  Resize(v->xc, s.Bt * s.D * s.L);
  Resize(v->xdbl, s.Bt * s.X * s.L);
  Resize(v->dt, s.Bt * s.D * s.L);
  Resize(v->y, s.Bt * s.D * s.L);
  Resize(scratch->A, s.D * s.N);
  const float* W_in = a.P(a.layer.in_proj);    // (2D, d)
  const float* W_x = a.P(a.layer.x_proj);      // (X, D)
  const float* W_dt = a.P(a.layer.dt_proj);    // (D, R)
  const float* W_out = a.P(a.layer.out_proj);  // (d, D)

  for (int64_t b = 0; b < s.Bt; ++b) {
    ParallelGemm(false, true, 2 * s.D, s.L, s.d, 1.0f, W_in, s.d, normed + b * s.L * s.d, s.d, 0.0f,
                 v->xz.data() + b * 2 * s.D * s.L, s.L);
  }
  SSMKIT_RETURN_IF_ERROR(CausalConv1dForward(ConvInputs(a, s, v->xz.data()),
                                             F32Contiguous(v->xc.data(), {s.Bt, s.D, s.L}), {}));
  for (int64_t b = 0; b < s.Bt; ++b) {
    float* xdbl = v->xdbl.data() + b * s.X * s.L;
    ParallelGemm(false, false, s.X, s.L, s.D, 1.0f, W_x, s.D, v->xc.data() + b * s.D * s.L, s.L,
                 0.0f, xdbl, s.L);
    ParallelGemm(false, false, s.D, s.L, s.R, 1.0f, W_dt, s.R, xdbl, s.L, 0.0f,
                 v->dt.data() + b * s.D * s.L, s.L);
  }
  NegExp(a.P(a.layer.A_log), s.D * s.N, scratch->A.data());
  const int64_t chunks = SelectiveScanChunkCount(s.L);
  Resize(v->chunk_states, s.Bt * s.D * chunks * s.N);
  SSMKIT_RETURN_IF_ERROR(SelectiveScanForward(ScanInputs(a, s, *v, scratch->A.data()),
                                              F32Contiguous(v->y.data(), {s.Bt, s.D, s.L}), {},
                                              ChunkStates(*v, s)));
  for (int64_t b = 0; b < s.Bt; ++b) {
    ParallelGemm(true, true, s.L, s.d, s.D, 1.0f, v->y.data() + b * s.D * s.L, s.L, W_out, s.D,
                 0.0f, out + b * s.L * s.d, s.d);
  }
  return Status::Ok();
}

Status Mamba1Backward(const BlockArgs& a, const float* normed, const Mamba1Saved& v,
                      const float* dout, Mamba1Scratch* w, float* dnormed) {
  const Dims s = DimsOf(a);
  Resize(w->dy, s.Bt * s.D * s.L);
  Resize(w->dxz, s.Bt * 2 * s.D * s.L);
  Resize(w->dxc, s.Bt * s.D * s.L);
  Resize(w->ddt, s.Bt * s.D * s.L);
  Resize(w->dxdbl, s.Bt * s.X * s.L);
  Resize(w->A, s.D * s.N);
  Resize(w->dA, s.D * s.N);
  Resize(w->dD, s.D);
  Resize(w->ddt_bias, s.D);
  Resize(w->dconv_b, s.D);
  Resize(w->dconv_w, s.D * s.K);
  const LayerOffsets& o = a.layer;
  const float* W_in = a.P(o.in_proj);
  const float* W_x = a.P(o.x_proj);
  const float* W_dt = a.P(o.dt_proj);
  const float* W_out = a.P(o.out_proj);

  // out_proj: dW_out += dout[b]^T y[b]^T; dy[b] = W_out^T dout[b]^T.
  for (int64_t b = 0; b < s.Bt; ++b) {
    const float* dout_b = dout + b * s.L * s.d;
    ParallelGemm(true, true, s.d, s.D, s.L, 1.0f, dout_b, s.d, v.y.data() + b * s.D * s.L, s.L,
                 1.0f, a.G(o.out_proj), s.D);
    ParallelGemm(true, true, s.D, s.L, s.d, 1.0f, W_out, s.D, dout_b, s.d, 0.0f,
                 w->dy.data() + b * s.D * s.L, s.L);
  }

  // The scan: its dB, dC land in dxdbl's B and C rows and dz in dxz's z half.
  NegExp(a.P(o.A_log), s.D * s.N, w->A.data());
  SelectiveScanGrads g;
  g.du = F32Contiguous(w->dxc.data(), {s.Bt, s.D, s.L});
  g.ddelta = F32Contiguous(w->ddt.data(), {s.Bt, s.D, s.L});
  g.dA = F32Contiguous(w->dA.data(), {s.D, s.N});
  g.dB = View(w->dxdbl.data() + s.R * s.L, {s.Bt, s.N, s.L}, {s.X * s.L, s.L, 1});
  g.dC = View(w->dxdbl.data() + (s.R + s.N) * s.L, {s.Bt, s.N, s.L}, {s.X * s.L, s.L, 1});
  g.dD = F32Contiguous(w->dD.data(), {s.D});
  g.dz = View(w->dxz.data() + s.D * s.L, {s.Bt, s.D, s.L}, {2 * s.D * s.L, s.L, 1});
  g.ddelta_bias = F32Contiguous(w->ddt_bias.data(), {s.D});
  SSMKIT_RETURN_IF_ERROR(SelectiveScanBackward(ScanInputs(a, s, v, w->A.data()),
                                               F32Contiguous(w->dy.data(), {s.Bt, s.D, s.L}), {},
                                               ChunkStates(v, s), g));
  AccumulateDALog(w->dA.data(), w->A.data(), s.D * s.N, a.G(o.A_log));
  AddInto(a.G(o.D), w->dD.data(), s.D);
  AddInto(a.G(o.dt_bias), w->ddt_bias.data(), s.D);

  // dt_proj and x_proj: dt_in's gradient fills dxdbl's first R rows; xc collects W_x^T dxdbl.
  for (int64_t b = 0; b < s.Bt; ++b) {
    const float* ddt_b = w->ddt.data() + b * s.D * s.L;
    float* dxdbl_b = w->dxdbl.data() + b * s.X * s.L;
    const float* xdbl_b = v.xdbl.data() + b * s.X * s.L;
    ParallelGemm(true, false, s.R, s.L, s.D, 1.0f, W_dt, s.R, ddt_b, s.L, 0.0f, dxdbl_b, s.L);
    ParallelGemm(false, true, s.D, s.R, s.L, 1.0f, ddt_b, s.L, xdbl_b, s.L, 1.0f, a.G(o.dt_proj),
                 s.R);
    ParallelGemm(true, false, s.D, s.L, s.X, 1.0f, W_x, s.D, dxdbl_b, s.L, 1.0f,
                 w->dxc.data() + b * s.D * s.L, s.L);
    ParallelGemm(false, true, s.X, s.D, s.L, 1.0f, dxdbl_b, s.L, v.xc.data() + b * s.D * s.L, s.L,
                 1.0f, a.G(o.x_proj), s.D);
  }

  // conv1d (with its silu): dx lands in dxz's x half.
  CausalConv1dGrads cg;
  cg.dx = View(w->dxz.data(), {s.Bt, s.D, s.L}, {2 * s.D * s.L, s.L, 1});
  cg.dweight = F32Contiguous(w->dconv_w.data(), {s.D, s.K});
  cg.dbias = F32Contiguous(w->dconv_b.data(), {s.D});
  SSMKIT_RETURN_IF_ERROR(CausalConv1dBackward(
      ConvInputs(a, s, v.xz.data()), F32Contiguous(w->dxc.data(), {s.Bt, s.D, s.L}), {}, cg));
  AddInto(a.G(o.conv_w), w->dconv_w.data(), s.D * s.K);
  AddInto(a.G(o.conv_b), w->dconv_b.data(), s.D);

  // in_proj: dnormed[b] = dxz[b]^T W_in; dW_in += dxz[b] normed[b].
  for (int64_t b = 0; b < s.Bt; ++b) {
    const float* dxz_b = w->dxz.data() + b * 2 * s.D * s.L;
    ParallelGemm(true, false, s.L, s.d, 2 * s.D, 1.0f, dxz_b, s.L, W_in, s.d, 0.0f,
                 dnormed + b * s.L * s.d, s.d);
    ParallelGemm(false, false, 2 * s.D, s.d, s.L, 1.0f, dxz_b, s.L, normed + b * s.L * s.d, s.d,
                 1.0f, a.G(o.in_proj), s.d);
  }
  return Status::Ok();
}

}  // namespace ssmkit::train

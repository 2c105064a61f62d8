#include "train/attention_block.hpp"

#include <algorithm>
#include <cmath>

#include "ssmkit/attention.hpp"
#include "ssmkit/rope.hpp"
#include "train/gemm.hpp"
#include "train/views.hpp"

namespace ssmkit::train {
namespace {

struct Dims {
  int64_t Bt, L, M, d, Ha, Hk, E, W;
};

Dims DimsOf(const BlockArgs& a) {
  const AttentionConfig& c = a.config->attention;
  return {a.batch,     a.seqlen,       a.tokens(), a.config->d_model,
          c.num_heads, c.num_kv_heads, c.head_dim, (c.num_heads + 2 * c.num_kv_heads) * c.head_dim};
}

// q, k and v of sequence-major rows (M, W): (Bt, L, heads, E) views.
Tensor Heads(const float* row0, const Dims& s, int64_t heads) {
  return View(row0, {s.Bt, s.L, heads, s.E}, {s.L * s.W, s.W, s.E, 1});
}

AttentionInputs AttentionInputsOf(const Dims& s, const float* qkv) {
  return {Heads(qkv, s, s.Ha), Heads(qkv + s.Ha * s.E, s, s.Hk),
          Heads(qkv + (s.Ha + s.Hk) * s.E, s, s.Hk), Tensor{}};
}

AttentionOptions AttentionOptionsOf(const BlockArgs& a, const Dims& s) {
  const float scale = a.config->attention.scale;
  AttentionOptions o;
  o.scale = scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(s.E));
  return o;
}

RopeOptions RopeOptionsOf(const BlockArgs& a) {
  RopeOptions o;
  o.theta = a.config->attention.rope_theta;
  o.rotary_dim = a.config->attention.rotary_dim;
  return o;
}

// Rotates the q and k columns of rows (M, W) in place; q and k in separate calls, as their
// rows interleave in one buffer.
Status RotateQk(const BlockArgs& a, const Dims& s, const std::vector<int32_t>& positions,
                float* qkv) {
  if (a.config->attention.rotary_dim <= 0) return Status::Ok();
  const Tensor pos = Tensor::Contiguous(positions.data(), DType::kI32, {s.Bt, s.L});
  const Tensor q = Heads(qkv, s, s.Ha), k = Heads(qkv + s.Ha * s.E, s, s.Hk);
  const RopeOptions o = RopeOptionsOf(a);
  SSMKIT_RETURN_IF_ERROR(RopeForward({q, Tensor{}, pos, Tensor{}}, q, Tensor{}, o));
  return RopeForward({Tensor{}, k, pos, Tensor{}}, Tensor{}, k, o);
}

void FillPositions(const Dims& s, std::vector<int32_t>* positions) {
  positions->resize(static_cast<size_t>(s.M));
  for (int64_t t = 0; t < s.M; ++t) (*positions)[t] = static_cast<int32_t>(t % s.L);
}

}  // namespace

Status AttentionBlockForward(const BlockArgs& a, const float* normed, AttentionSaved* v,
                             AttentionScratch* w, float* out) {
  const Dims s = DimsOf(a);
  const int64_t HE = s.Ha * s.E;
  Resize(v->qkv, s.M * s.W);
  Resize(v->att, s.M * HE);
  Resize(v->lse, s.Bt * s.Ha * s.L);
  FillPositions(s, &w->positions);
  ParallelGemm(false, true, s.M, s.W, s.d, 1.0f, normed, s.d, a.P(a.layer.qkv), s.d, 0.0f,
               v->qkv.data(), s.W);
  SSMKIT_RETURN_IF_ERROR(RotateQk(a, s, w->positions, v->qkv.data()));
  SSMKIT_RETURN_IF_ERROR(AttentionForward(
      AttentionInputsOf(s, v->qkv.data()), F32Contiguous(v->att.data(), {s.Bt, s.L, s.Ha, s.E}),
      F32Contiguous(v->lse.data(), {s.Bt, s.Ha, s.L}), AttentionOptionsOf(a, s)));
  ParallelGemm(false, true, s.M, s.d, HE, 1.0f, v->att.data(), HE, a.P(a.layer.o_proj), HE, 0.0f,
               out, s.d);
  return Status::Ok();
}

Status AttentionBlockBackward(const BlockArgs& a, const float* normed, const AttentionSaved& v,
                              const float* dout, AttentionScratch* w, float* dnormed) {
  const Dims s = DimsOf(a);
  const int64_t HE = s.Ha * s.E;
  Resize(w->datt, s.M * HE);
  Resize(w->dq, s.M * HE);
  Resize(w->dk, s.M * s.Hk * s.E);
  Resize(w->dv, s.M * s.Hk * s.E);
  Resize(w->dqkv, s.M * s.W);
  FillPositions(s, &w->positions);

  // o_proj.
  ParallelGemm(true, false, s.d, HE, s.M, 1.0f, dout, s.d, v.att.data(), HE, 1.0f,
               a.G(a.layer.o_proj), HE);
  ParallelGemm(false, false, s.M, HE, s.d, 1.0f, dout, s.d, a.P(a.layer.o_proj), HE, 0.0f,
               w->datt.data(), HE);

  // Attention: dq, dk and dv into buffers of their own (the op refuses gradients that
  // interleave in one), dq and dk rotated back, then the three packed as dqkv's rows.
  AttentionGrads g;
  g.dq = F32Contiguous(w->dq.data(), {s.Bt, s.L, s.Ha, s.E});
  g.dk = F32Contiguous(w->dk.data(), {s.Bt, s.L, s.Hk, s.E});
  g.dv = F32Contiguous(w->dv.data(), {s.Bt, s.L, s.Hk, s.E});
  SSMKIT_RETURN_IF_ERROR(AttentionBackward(
      AttentionInputsOf(s, v.qkv.data()), F32Contiguous(v.att.data(), {s.Bt, s.L, s.Ha, s.E}),
      F32Contiguous(v.lse.data(), {s.Bt, s.Ha, s.L}),
      F32Contiguous(w->datt.data(), {s.Bt, s.L, s.Ha, s.E}), g, AttentionOptionsOf(a, s)));
  if (a.config->attention.rotary_dim > 0) {
    const Tensor pos = Tensor::Contiguous(w->positions.data(), DType::kI32, {s.Bt, s.L});
    SSMKIT_RETURN_IF_ERROR(RopeBackward({g.dq, g.dk, pos, Tensor{}}, g.dq, g.dk, RopeOptionsOf(a)));
  }
  float* dqkv = w->dqkv.data();
  const int64_t KE = s.Hk * s.E;
  for (int64_t t = 0; t < s.M; ++t) {
    std::copy_n(w->dq.data() + t * HE, HE, dqkv + t * s.W);
    std::copy_n(w->dk.data() + t * KE, KE, dqkv + t * s.W + HE);
    std::copy_n(w->dv.data() + t * KE, KE, dqkv + t * s.W + HE + KE);
  }

  // The fused q, k, v projection.
  ParallelGemm(true, false, s.W, s.d, s.M, 1.0f, dqkv, s.W, normed, s.d, 1.0f, a.G(a.layer.qkv),
               s.d);
  ParallelGemm(false, false, s.M, s.d, s.W, 1.0f, dqkv, s.W, a.P(a.layer.qkv), s.d, 0.0f, dnormed,
               s.d);
  return Status::Ok();
}

}  // namespace ssmkit::train

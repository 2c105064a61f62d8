#include "model/attention_block.hpp"

#include <algorithm>
#include <cmath>

#include "model/views.hpp"
#include "ssmkit/attention.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/rope.hpp"

namespace ssmkit::model {
namespace {

int64_t InputDim(const ModelConfig& c) {
  return c.attention.input_dim > 0 ? c.attention.input_dim : c.d_model;
}

int64_t RowWidth(const AttentionConfig& a) {
  return (a.num_heads + 2 * a.num_kv_heads) * a.head_dim;
}

// dst (T, cols) with row stride ld += x (T, X) A^T B^T, through low (T, r) and delta (T, cols).
Status AddLowRank(const Adapter& ad, int64_t T, const float* x, int64_t X, float* low, float* delta,
                  float* dst, int64_t cols, int64_t ld) {
  if (!ad.defined()) return Status::Ok();
  const int64_t r = ad.a.shape[0];
  SSMKIT_RETURN_IF_ERROR(LinearForward({Rows(x, T, X, X), ad.a, Tensor{}}, Rows(low, T, r, r)));
  SSMKIT_RETURN_IF_ERROR(
      LinearForward({Rows(low, T, r, r), ad.b, Tensor{}}, Rows(delta, T, cols, cols)));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < cols; ++j) dst[t * ld + j] += delta[t * cols + j];
  }
  return Status::Ok();
}

}  // namespace

int64_t AttentionFloats(const ModelConfig& c, int64_t T) {
  const AttentionConfig& a = c.attention;
  const int64_t adapters = c.attention_adapters ? c.adapter_rank + a.num_heads * a.head_dim : 0;
  return T * (RowWidth(a) + a.num_heads * a.head_dim + adapters);
}

AttentionActs CarveAttention(const ModelConfig& c, int64_t T, float* base) {
  const AttentionConfig& a = c.attention;
  AttentionActs acts;
  acts.qkv = base;
  acts.att = acts.qkv + T * RowWidth(a);
  acts.low = acts.att + T * a.num_heads * a.head_dim;
  acts.delta = acts.low + T * (c.attention_adapters ? c.adapter_rank : 0);
  return acts;
}

Status AttentionBlockForward(const ModelConfig& c, const AttentionWeights& w, const SeqBatch& batch,
                             const float* x, const AttentionActs& a, const KvCache& kv,
                             int64_t layer, const KvBatch& rows, float* out) {
  const AttentionConfig& ac = c.attention;
  const int64_t T = batch.T, X = InputDim(c), d = c.d_model;
  const int64_t Ha = ac.num_heads, Hk = ac.num_kv_heads, E = ac.head_dim, W = RowWidth(ac);
  float* q = a.qkv;
  float* k = q + Ha * E;
  float* v = k + Hk * E;
  const Tensor in = Rows(x, T, X, X);
  SSMKIT_RETURN_IF_ERROR(LinearForward({in, w.q, w.q_bias}, Rows(q, T, Ha * E, W)));
  SSMKIT_RETURN_IF_ERROR(LinearForward({in, w.k, w.k_bias}, Rows(k, T, Hk * E, W)));
  SSMKIT_RETURN_IF_ERROR(LinearForward({in, w.v, w.v_bias}, Rows(v, T, Hk * E, W)));
  SSMKIT_RETURN_IF_ERROR(AddLowRank(w.q_adapter, T, x, X, a.low, a.delta, q, Ha * E, W));
  SSMKIT_RETURN_IF_ERROR(AddLowRank(w.k_adapter, T, x, X, a.low, a.delta, k, Hk * E, W));
  SSMKIT_RETURN_IF_ERROR(AddLowRank(w.v_adapter, T, x, X, a.low, a.delta, v, Hk * E, W));

  if (ac.rotary_dim > 0) {
    // Every token at once, as one sequence of T rows with its own position ids. q and k in
    // separate calls: their rows interleave in one buffer, which the op's overlap check (by
    // address range) would refuse as one call's two outputs.
    const Tensor positions = Tensor::Contiguous(batch.positions, DType::kI32, {1, T});
    RopeOptions ro;
    ro.theta = ac.rope_theta;
    ro.rotary_dim = ac.rotary_dim;
    const Tensor qt = View(q, {1, T, Ha, E}, {T * W, W, E, 1});
    const Tensor kt = View(k, {1, T, Hk, E}, {T * W, W, E, 1});
    SSMKIT_RETURN_IF_ERROR(RopeForward({qt, Tensor{}, positions, Tensor{}}, qt, Tensor{}, ro));
    SSMKIT_RETURN_IF_ERROR(RopeForward({Tensor{}, kt, positions, Tensor{}}, Tensor{}, kt, ro));
  }
  AttentionOptions options;
  options.scale = (ac.scale > 0.0f ? ac.scale : 1.0f / std::sqrt(static_cast<float>(E))) *
                  c.multipliers.key;  // k * key_multiplier, folded into q . k
  options.window = ac.window;
  const int64_t Bk = kv.blocks_per_slot();
  if (batch.decode) {
    const int64_t n = batch.n;
    const PagedKv cache = kv.View(layer, Tensor::Contiguous(rows.tables, DType::kI32, {n, Bk}),
                                  Tensor::Contiguous(rows.lens, DType::kI32, {n}));
    SSMKIT_RETURN_IF_ERROR(PagedKvAppend(View(k, {n, 1, Hk, E}, {W, W, E, 1}),
                                         View(v, {n, 1, Hk, E}, {W, W, E, 1}), cache));
    SSMKIT_RETURN_IF_ERROR(AttentionPagedForward(View(q, {n, 1, Ha, E}, {W, W, E, 1}), cache,
                                                 View(a.att, {n, 1, Ha, E}, {Ha * E, Ha * E, E, 1}),
                                                 options));
  } else {
    for (int64_t i = 0; i < batch.n; ++i) {
      const int64_t o = batch.offset[i], L = batch.length(i);
      const Tensor qi = View(q + o * W, {1, L, Ha, E}, {L * W, W, E, 1});
      const Tensor ki = View(k + o * W, {1, L, Hk, E}, {L * W, W, E, 1});
      const Tensor vi = View(v + o * W, {1, L, Hk, E}, {L * W, W, E, 1});
      const Tensor oi = View(a.att + o * Ha * E, {1, L, Ha, E}, {L * Ha * E, Ha * E, E, 1});
      const PagedKv cache =
          kv.View(layer, Tensor::Contiguous(rows.tables + i * Bk, DType::kI32, {1, Bk}),
                  Tensor::Contiguous(rows.lens + i, DType::kI32, {1}));
      SSMKIT_RETURN_IF_ERROR(PagedKvAppend(ki, vi, cache));
      if (batch.start[i] == 0) {
        // A fresh sequence: its keys and values are all here, dense.
        SSMKIT_RETURN_IF_ERROR(AttentionForward({qi, ki, vi, Tensor{}}, oi, Tensor{}, options));
      } else {
        SSMKIT_RETURN_IF_ERROR(AttentionPagedForward(qi, cache, oi, options));
      }
    }
  }
  return LinearForward({Rows(a.att, T, Ha * E, Ha * E), w.o, w.o_bias}, Rows(out, T, d, d));
}

}  // namespace ssmkit::model

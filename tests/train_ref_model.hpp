// An fp64 reference of the training model's forward (src/train/lm.hpp), written plainly on the
// ops' fp64 oracles (src/ref) with loops for the projections, the embedding, the multipliers
// and the loss. It reads the same flat parameter layout (ParamTable), so a test can evaluate
// the loss at any point of parameter space in double: the function finite differences are
// taken of.
// Dimension legend: Bt batch, L length, M = Bt * L, d d_model, V vocab, D d_inner, N state,
// R dt_rank, K conv width, H heads, P head dim, G groups, C conv channels, I in_proj rows,
// Ha / Hk attention query / key-value heads, E attention head dim, W = (Ha + 2 Hk) E, F MLP
// hidden width.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ref/attention_ref.hpp"
#include "ref/conv1d_ref.hpp"
#include "ref/mlp_ref.hpp"
#include "ref/norm_ref.hpp"
#include "ref/rope_ref.hpp"
#include "ref/selective_scan_ref.hpp"
#include "ref/ssd_ref.hpp"
#include "ssmkit/model.hpp"
#include "train/param_table.hpp"

namespace ssmkit::testing {

class RefModel {
 public:
  RefModel(const ModelConfig& c, const train::ParamTable& t) : c_(c), t_(t) {}

  // Summed next-token cross-entropy over the Bt * L positions; tokens (Bt, L + 1).
  double Loss(const std::vector<double>& p, const std::vector<int32_t>& tokens, int64_t Bt,
              int64_t L) const {
    std::vector<int32_t> in, target;
    for (int64_t b = 0; b < Bt; ++b) {
      for (int64_t l = 0; l < L; ++l) {
        in.push_back(tokens[b * (L + 1) + l]);
        target.push_back(tokens[b * (L + 1) + l + 1]);
      }
    }
    const std::vector<double> logits = Logits(p, in, Bt, L);
    const int64_t V = c_.vocab_size;
    double loss = 0.0;
    for (int64_t m = 0; m < Bt * L; ++m) {
      double mx = logits[m * V];
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[m * V + v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[m * V + v] - mx);
      loss += mx + std::log(sum) - logits[m * V + target[m]];
    }
    return loss;
  }

  // (M, V) logits of the inputs (Bt, L).
  std::vector<double> Logits(const std::vector<double>& p, const std::vector<int32_t>& in,
                             int64_t Bt, int64_t L) const {
    const int64_t d = c_.d_model, M = Bt * L, V = c_.vocab_size;
    const Multipliers& mult = c_.multipliers;
    const std::vector<BlockSpec> blocks = c_.block_list();
    const int64_t n = static_cast<int64_t>(blocks.size());
    std::vector<double> h(M * d), resid, normed(M * d), resid_out(M * d);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t e = 0; e < d; ++e) {
        h[m * d + e] = p[t_.embedding() + in[m] * d + e] * static_cast<double>(mult.embedding);
      }
    }
    ref::NormShape ns;
    ns.rows = M;
    ns.features = d;
    ns.eps = c_.norm_eps;
    for (int64_t i = 0; i <= n; ++i) {
      const bool last = i == n;
      ref::AddRmsNormInputs ni;
      ni.x = h.data();
      ni.residual = resid.empty() ? nullptr : resid.data();
      ni.weight = p.data() + (last ? t_.norm_f() : t_.blocks()[i].norm);
      ref::AddRmsNormForward(ns, ni, normed.data(), resid_out.data());
      resid = resid_out;
      if (last) break;
      const train::LayerOffsets& o = t_.blocks()[i];
      switch (blocks[i].kind) {
        case BlockKind::kMamba1:
          h = Mamba1(p, o, normed, Bt, L);
          break;
        case BlockKind::kMamba2:
          h = Mamba2(p, o, normed, Bt, L);
          break;
        case BlockKind::kAttention:
          h = Attention(p, o, normed, Bt, L);
          break;
        default:
          h = Mlp(p, o, normed, M);
      }
      for (double& v : h) v *= static_cast<double>(mult.residual);
    }
    std::vector<double> logits = Linear(normed, M, d, p.data() + t_.lm_head(), V);
    for (double& v : logits) v *= static_cast<double>(mult.logits);
    return logits;
  }

 private:
  // (rows, out) = x (rows, in) W^T, W (out, in).
  static std::vector<double> Linear(const std::vector<double>& x, int64_t rows, int64_t in,
                                    const double* W, int64_t out) {
    std::vector<double> y(rows * out, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double acc = 0.0;
        for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * W[o * in + k];
        y[r * out + o] = acc;
      }
    }
    return y;
  }

  // Columns [c0, c0 + n) of token-major (Bt * L, ld) as channel-major (Bt, n, L).
  static std::vector<double> Channels(const std::vector<double>& x, int64_t ld, int64_t c0,
                                      int64_t n, int64_t Bt, int64_t L) {
    std::vector<double> y(Bt * n * L);
    for (int64_t b = 0; b < Bt; ++b) {
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t l = 0; l < L; ++l) y[(b * n + c) * L + l] = x[(b * L + l) * ld + c0 + c];
      }
    }
    return y;
  }

  static std::vector<double> Tokens(const std::vector<double>& x, int64_t n, int64_t Bt,
                                    int64_t L) {
    std::vector<double> y(Bt * L * n);
    for (int64_t b = 0; b < Bt; ++b) {
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t l = 0; l < L; ++l) y[(b * L + l) * n + c] = x[(b * n + c) * L + l];
      }
    }
    return y;
  }

  std::vector<double> Conv(const std::vector<double>& p, const train::LayerOffsets& o,
                           const std::vector<double>& x, int64_t channels, int64_t Bt,
                           int64_t L) const {
    ref::Conv1dShape cs;
    cs.batch = Bt;
    cs.dim = channels;
    cs.seqlen = L;
    cs.width = c_.d_conv;
    cs.silu = true;
    ref::Conv1dInputs ci;
    ci.x = x.data();
    ci.weight = p.data() + o.conv_w;
    ci.bias = p.data() + o.conv_b;
    std::vector<double> out(x.size());
    ref::CausalConv1dForward(cs, ci, out.data(), nullptr);
    return out;
  }

  std::vector<double> Mamba1(const std::vector<double>& p, const train::LayerOffsets& o,
                             const std::vector<double>& normed, int64_t Bt, int64_t L) const {
    const int64_t d = c_.d_model, D = c_.d_inner, N = c_.d_state, R = c_.dt_rank, M = Bt * L;
    const int64_t X = R + 2 * N;
    const std::vector<double> xz = Linear(normed, M, d, p.data() + o.in_proj, 2 * D);
    const std::vector<double> xc = Conv(p, o, Channels(xz, 2 * D, 0, D, Bt, L), D, Bt, L);
    const std::vector<double> xdbl = Linear(Tokens(xc, D, Bt, L), M, D, p.data() + o.x_proj, X);
    std::vector<double> dt_in(M * R);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t r = 0; r < R; ++r) dt_in[m * R + r] = xdbl[m * X + r];
    }
    const std::vector<double> dt = Linear(dt_in, M, R, p.data() + o.dt_proj, D);
    std::vector<double> A(D * N);
    for (int64_t i = 0; i < D * N; ++i) A[i] = -std::exp(p[o.A_log + i]);
    const std::vector<double> Bm = Channels(xdbl, X, R, N, Bt, L);
    const std::vector<double> Cm = Channels(xdbl, X, R + N, N, Bt, L);
    const std::vector<double> dtc = Channels(dt, D, 0, D, Bt, L);
    const std::vector<double> z = Channels(xz, 2 * D, D, D, Bt, L);
    ref::ScanShape ss;
    ss.batch = Bt;
    ss.dim = D;
    ss.seqlen = L;
    ss.dstate = N;
    ss.delta_softplus = true;
    const ref::ScanInputs si{.u = xc.data(),
                             .delta = dtc.data(),
                             .A = A.data(),
                             .B = Bm.data(),
                             .C = Cm.data(),
                             .D = p.data() + o.D,
                             .z = z.data(),
                             .delta_bias = p.data() + o.dt_bias};
    std::vector<double> y(Bt * D * L);
    ref::SelectiveScanForward(ss, si, y.data(), nullptr);
    return Linear(Tokens(y, D, Bt, L), M, D, p.data() + o.out_proj, d);
  }

  std::vector<double> Mamba2(const std::vector<double>& p, const train::LayerOffsets& o,
                             const std::vector<double>& normed, int64_t Bt, int64_t L) const {
    const int64_t d = c_.d_model, D = c_.d_inner, N = c_.d_state, H = c_.nheads, G = c_.ngroups;
    const int64_t C = c_.conv_dim(), I = c_.in_proj_dim(), M = Bt * L;
    const std::vector<double> zxbcdt = Linear(normed, M, d, p.data() + o.in_proj, I);
    const std::vector<double> xbc =
        Tokens(Conv(p, o, Channels(zxbcdt, I, D, C, Bt, L), C, Bt, L), C, Bt, L);
    std::vector<double> x(M * D), Bm(M * G * N), Cm(M * G * N), dt(M * H), z(M * D);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t i = 0; i < D; ++i) x[m * D + i] = xbc[m * C + i];
      for (int64_t i = 0; i < G * N; ++i) {
        Bm[m * G * N + i] = xbc[m * C + D + i];
        Cm[m * G * N + i] = xbc[m * C + D + G * N + i];
      }
      for (int64_t h = 0; h < H; ++h) dt[m * H + h] = zxbcdt[m * I + D + C + h];
      for (int64_t i = 0; i < D; ++i) z[m * D + i] = zxbcdt[m * I + i];
    }
    std::vector<double> A(H);
    for (int64_t h = 0; h < H; ++h) A[h] = -std::exp(p[o.A_log + h]);
    ref::SsdShape ss;
    ss.batch = Bt;
    ss.seqlen = L;
    ss.nheads = H;
    ss.headdim = c_.headdim;
    ss.ngroups = G;
    ss.dstate = N;
    ss.dt_softplus = true;
    ss.dt_min = c_.dt_min;
    ss.dt_max = c_.dt_max;
    const ref::SsdInputs si{.x = x.data(),
                            .dt = dt.data(),
                            .A = A.data(),
                            .B = Bm.data(),
                            .C = Cm.data(),
                            .D = p.data() + o.D,
                            .dt_bias = p.data() + o.dt_bias};
    std::vector<double> y(M * D), yn(M * D);
    ref::SsdForward(ss, si, y.data(), nullptr);
    ref::NormShape ns;
    ns.rows = M;
    ns.features = D;
    ns.group_size = D / G;
    ns.eps = c_.norm_eps;
    ns.norm_before_gate = false;
    ref::RmsNormInputs ni;
    ni.x = y.data();
    ni.weight = p.data() + o.gated_norm;
    ni.z = z.data();
    ref::RmsNormForward(ns, ni, yn.data());
    return Linear(yn, M, D, p.data() + o.out_proj, d);
  }

  std::vector<double> Attention(const std::vector<double>& p, const train::LayerOffsets& o,
                                const std::vector<double>& normed, int64_t Bt, int64_t L) const {
    const AttentionConfig& a = c_.attention;
    const int64_t d = c_.d_model, M = Bt * L, Ha = a.num_heads, Hk = a.num_kv_heads, E = a.head_dim,
                  W = (Ha + 2 * Hk) * E;
    const std::vector<double> qkv = Linear(normed, M, d, p.data() + o.qkv, W);
    std::vector<double> q(M * Ha * E), k(M * Hk * E), v(M * Hk * E);
    std::vector<int32_t> positions(M);
    for (int64_t m = 0; m < M; ++m) {
      positions[m] = static_cast<int32_t>(m % L);
      for (int64_t j = 0; j < Ha * E; ++j) q[m * Ha * E + j] = qkv[m * W + j];
      for (int64_t j = 0; j < Hk * E; ++j) {
        k[m * Hk * E + j] = qkv[m * W + Ha * E + j];
        v[m * Hk * E + j] = qkv[m * W + (Ha + Hk) * E + j];
      }
    }
    if (a.rotary_dim > 0) {
      ref::RopeShape rs;
      rs.batch = Bt;
      rs.len = L;
      rs.head_dim = E;
      rs.rotary_dim = a.rotary_dim;
      rs.theta = a.rope_theta;
      rs.heads = Ha;
      std::vector<double> rotated(q.size());
      ref::Rope(rs, q.data(), positions.data(), nullptr, false, rotated.data());
      q = rotated;
      rs.heads = Hk;
      rotated.resize(k.size());
      ref::Rope(rs, k.data(), positions.data(), nullptr, false, rotated.data());
      k = rotated;
    }
    ref::AttentionShape as;
    as.batch = Bt;
    as.q_len = as.kv_len = L;
    as.heads = Ha;
    as.kv_heads = Hk;
    as.head_dim = as.v_head_dim = E;
    as.scale = a.scale > 0.0f ? a.scale : 1.0 / std::sqrt(static_cast<double>(E));
    std::vector<double> att(M * Ha * E);
    ref::AttentionForward(as, q.data(), k.data(), v.data(), nullptr, att.data(), nullptr);
    return Linear(att, M, Ha * E, p.data() + o.o_proj, d);
  }

  std::vector<double> Mlp(const std::vector<double>& p, const train::LayerOffsets& o,
                          const std::vector<double>& normed, int64_t M) const {
    const int64_t d = c_.d_model, F = c_.ffn.intermediate;
    ref::MlpShape ms;
    ms.d = d;
    ms.F = F;
    if (!MlpActivationFromName(c_.ffn.activation, &ms.activation).ok()) {
      return std::vector<double>(M * d, std::nan(""));  // fails any comparison
    }
    ref::MlpWeights w;
    w.gate = p.data() + o.mlp_in;
    w.up = w.gate + F * d;
    w.down = p.data() + o.mlp_out;
    std::vector<double> out(M * d);
    ref::MlpForward(ms, M, normed.data(), w, nullptr, nullptr, out.data());
    return out;
  }

  ModelConfig c_;
  const train::ParamTable& t_;
};

}  // namespace ssmkit::testing

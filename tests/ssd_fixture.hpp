// Random SSD problems for the tests: inputs held both as the kernel's tensors (HostTensor,
// any dtype) and as the exact stored values in double for the fp64 oracle.
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ref/ssd_ref.hpp"
#include "ssmkit/op_tensors.hpp"
#include "ssmkit/ssd.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {

struct SsdCase {
  int64_t batch = 2, seqlen = 24, nheads = 4, headdim = 8, ngroups = 2, dstate = 16;
  bool has_D = true, d_per_channel = false, has_z = true, has_dt_bias = true, has_h0 = true;
  bool has_seq_idx = false, softplus = true;
  float dt_min = 0.0f, dt_max = std::numeric_limits<float>::infinity();
  DType dtype = DType::kF32;     // of x, dt, B, C, z
  double big_dt_fraction = 0.0;  // share of dt pushed above 20 (softplus identity branch)
  double seq_break = 0.2;        // chance that a position starts a new sequence (with seq_idx)

  std::string Name() const {
    return "B" + std::to_string(batch) + " L" + std::to_string(seqlen) + " H" +
           std::to_string(nheads) + " P" + std::to_string(headdim) + " G" +
           std::to_string(ngroups) + " N" + std::to_string(dstate) +
           (has_D ? (d_per_channel ? " D(H,P)" : " D(H)") : "") + (has_z ? " z" : "") +
           (has_dt_bias ? " bias" : "") + (has_h0 ? " h0" : "") + (has_seq_idx ? " seq_idx" : "") +
           (softplus ? " softplus" : "") + (dtype == DType::kBF16 ? " bf16" : "");
  }
};

// One problem: tensors for the kernel, doubles for the oracle.
struct SsdProblem {
  SsdCase c;
  HostTensor x, dt, A, B, C, D, z, dt_bias, h0, seq_idx;
  std::vector<double> x_d, dt_d, A_d, B_d, C_d, D_d, z_d, dt_bias_d, h0_d;
  std::vector<int32_t> seq_idx_v;

  SsdProblem(const SsdCase& sc, Rng& rng) : c(sc) {
    const int64_t Bn = c.batch, L = c.seqlen, H = c.nheads, P = c.headdim, G = c.ngroups,
                  N = c.dstate;
    x = HostTensor({Bn, L, H, P}, c.dtype);
    x_d = x.Fill(rng.NormalVec(Bn * L * H * P));
    // dt sits around softplus^-1(dt) for dt log-uniform in [1e-3, 0.2] (dt itself without
    // softplus), as in a trained Mamba-2 layer.
    std::vector<double> dt_v(Bn * L * H);
    for (auto& v : dt_v) {
      const double d = std::exp(rng.Uniform(std::log(1e-3), std::log(0.2)));
      v = c.softplus ? std::log(std::expm1(d)) : d;
      if (c.big_dt_fraction > 0 && rng.Uniform(0, 1) < c.big_dt_fraction)
        v = rng.Uniform(20.5, 22.0);
    }
    std::vector<double> bias_v;
    if (c.has_dt_bias) {
      // Without softplus dt + bias must stay positive, as the decay exp(dt A) < 1 assumes.
      bias_v = c.softplus ? rng.UniformVec(H, -0.5, 0.5) : rng.UniformVec(H, 0.0, 0.02);
    }
    KeepClearOfDtLimits(dt_v, bias_v, rng);
    dt = HostTensor({Bn, L, H}, c.dtype);
    dt_d = dt.Fill(dt_v);
    std::vector<double> a_v(H);
    for (auto& v : a_v) v = -std::exp(rng.Uniform(0.0, std::log(16.0)));  // Mamba-2: A in [-16, -1]
    A = HostTensor({H}, DType::kF32);
    A_d = A.Fill(a_v);
    B = HostTensor({Bn, L, G, N}, c.dtype);
    B_d = B.Fill(rng.NormalVec(B.numel()));
    C = HostTensor({Bn, L, G, N}, c.dtype);
    C_d = C.Fill(rng.NormalVec(C.numel()));
    if (c.has_D) {
      D = c.d_per_channel ? HostTensor({H, P}, DType::kF32) : HostTensor({H}, DType::kF32);
      D_d = D.Fill(rng.NormalVec(D.numel()));
    }
    if (c.has_z) {
      z = HostTensor({Bn, L, H, P}, c.dtype);
      z_d = z.Fill(rng.NormalVec(z.numel()));
    }
    if (c.has_dt_bias) {
      dt_bias = HostTensor({H}, DType::kF32);
      dt_bias_d = dt_bias.Fill(bias_v);
    }
    if (c.has_h0) {
      h0 = HostTensor({Bn, H, P, N}, DType::kF32);
      h0_d = h0.Fill(rng.NormalVec(h0.numel()));
    }
    if (c.has_seq_idx) {
      seq_idx = HostTensor({Bn, L}, DType::kI32);
      seq_idx_v.resize(Bn * L);
      for (int64_t b = 0; b < Bn; ++b) {
        int32_t id = 0;
        for (int64_t l = 0; l < L; ++l) {
          if (l > 0 && rng.Uniform(0, 1) < c.seq_break) ++id;
          seq_idx_v[b * L + l] = id;
        }
      }
      std::vector<double> as_double(seq_idx_v.begin(), seq_idx_v.end());
      seq_idx.Fill(as_double);
    }
  }

  // dt_limit clamps dt, a kink in the loss: a central difference straddling it measures
  // neither side's derivative. Each raw dt whose effective dt (softplus(dt + bias)) lies
  // within 5% of dt_min or dt_max (more than bf16 rounding of the raw value moves it) is
  // drawn again from the same distribution.
  void KeepClearOfDtLimits(std::vector<double>& dt_v, const std::vector<double>& bias_v,
                           Rng& rng) const {
    const int64_t H = c.nheads;
    auto near = [](double v, double limit) {
      return std::isfinite(limit) && limit > 0 && std::abs(v - limit) < 0.05 * limit;
    };
    for (size_t i = 0; i < dt_v.size(); ++i) {
      for (int tries = 0; tries < 1000; ++tries) {
        double eff = dt_v[i] + (bias_v.empty() ? 0.0 : bias_v[i % H]);
        if (c.softplus && eff <= 20.0) eff = std::log1p(std::exp(eff));
        if (!near(eff, c.dt_min) && !near(eff, c.dt_max)) break;
        const double d = std::exp(rng.Uniform(std::log(1e-3), std::log(0.2)));
        dt_v[i] = c.softplus ? std::log(std::expm1(d)) : d;
      }
    }
  }

  SsdInputs Inputs() {
    SsdInputs in;
    in.x = x.view();
    in.dt = dt.view();
    in.A = A.view();
    in.B = B.view();
    in.C = C.view();
    if (c.has_D) in.D = D.view();
    if (c.has_z) in.z = z.view();
    if (c.has_dt_bias) in.dt_bias = dt_bias.view();
    if (c.has_h0) in.initial_states = h0.view();
    if (c.has_seq_idx) in.seq_idx = seq_idx.view();
    in.dt_softplus = c.softplus;
    in.dt_min = c.dt_min;
    in.dt_max = c.dt_max;
    return in;
  }

  ref::SsdShape Shape() const {
    ref::SsdShape s;
    s.batch = c.batch;
    s.seqlen = c.seqlen;
    s.nheads = c.nheads;
    s.headdim = c.headdim;
    s.ngroups = c.ngroups;
    s.dstate = c.dstate;
    s.d_per_channel = c.d_per_channel;
    s.dt_softplus = c.softplus;
    s.dt_min = c.dt_min;
    s.dt_max = c.dt_max;
    return s;
  }

  ref::SsdInputs RefInputs() const {
    ref::SsdInputs in;
    in.x = x_d.data();
    in.dt = dt_d.data();
    in.A = A_d.data();
    in.B = B_d.data();
    in.C = C_d.data();
    in.D = c.has_D ? D_d.data() : nullptr;
    in.z = c.has_z ? z_d.data() : nullptr;
    in.dt_bias = c.has_dt_bias ? dt_bias_d.data() : nullptr;
    in.h0 = c.has_h0 ? h0_d.data() : nullptr;
    in.seq_idx = c.has_seq_idx ? seq_idx_v.data() : nullptr;
    return in;
  }

  int64_t SeqSize() const { return c.batch * c.seqlen * c.nheads * c.headdim; }
  int64_t StateSize() const { return c.batch * c.nheads * c.headdim * c.dstate; }
  std::vector<int64_t> SeqShape() const { return {c.batch, c.seqlen, c.nheads, c.headdim}; }
  std::vector<int64_t> StateShape() const { return {c.batch, c.nheads, c.headdim, c.dstate}; }

  // The oracle's forward: out (B, L, H, P) and final states (B, H, P, N).
  void Reference(std::vector<double>* out, std::vector<double>* final_states) const {
    out->assign(SeqSize(), 0.0);
    final_states->assign(StateSize(), 0.0);
    ref::SsdForward(Shape(), RefInputs(), out->data(), final_states->data());
  }
};

// Runs the fast forward into poisoned outputs; returns the status.
inline Status RunForward(SsdProblem& prob, const SsdOptions& options, std::vector<double>* out,
                         std::vector<double>* final_states) {
  HostTensor o(prob.SeqShape(), prob.c.dtype), f(prob.StateShape(), DType::kF32);
  o.Poison();
  f.Poison();
  const Status s = SsdForward(prob.Inputs(), o.view(), final_states ? f.view() : Tensor{}, options);
  *out = o.ToDouble();
  if (final_states) *final_states = f.ToDouble();
  return s;
}

inline SsdOptions Algo(SsdAlgorithm algorithm, int64_t chunk_size = 0) {
  SsdOptions o;
  o.algorithm = algorithm;
  o.chunk_size = chunk_size;
  return o;
}

// The gradients of SsdGrads, in the order of its list (ssmkit/op_tensors.hpp: dx ...
// dinitial_states), which the tests' arrays of gradients follow.
inline constexpr int kNumSsdGrads = std::size(SsdTensors::grads);

inline const char* SsdGradName(int i) { return SsdTensors::grads[i].name; }

}  // namespace ssmkit::testing

// Random selective-scan problems for the tests: inputs held both as the kernel's tensors
// (HostTensor, any dtype) and as the exact stored values in double for the fp64 oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "ref/selective_scan_ref.hpp"
#include "ssmkit/selective_scan.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {

// The form of B or C: constant (D, N), variable (B, N, L), or grouped (B, G, N, L).
enum class BCForm { kConstant, kVariable, kGrouped };

struct ScanCase {
  int64_t batch = 1, dim = 4, seqlen = 16, dstate = 4, groups = 1;  // groups for kGrouped
  BCForm b_form = BCForm::kVariable, c_form = BCForm::kVariable;
  bool has_D = true, has_z = true, has_delta_bias = true, has_h0 = true, softplus = true;
  DType dtype = DType::kF32;  // of u, delta, z, B, C
  double big_delta_fraction = 0.0;  // share of deltas pushed above 20 (softplus identity branch)
};

inline std::vector<int64_t> BCShape(const ScanCase& c, BCForm form) {
  switch (form) {
    case BCForm::kConstant: return {c.dim, c.dstate};
    case BCForm::kVariable: return {c.batch, c.dstate, c.seqlen};
    case BCForm::kGrouped: return {c.batch, c.groups, c.dstate, c.seqlen};
  }
  return {};
}

// One problem: tensors for the kernel, doubles for the oracle.
struct ScanProblem {
  ScanCase c;
  HostTensor u, delta, A, B, C, D, z, delta_bias, h0;
  std::vector<double> u_d, delta_d, A_d, B_d, C_d, D_d, z_d, delta_bias_d, h0_d;

  ScanProblem(const ScanCase& sc, Rng& rng) : c(sc) {
    const int64_t Bn = c.batch, Dn = c.dim, L = c.seqlen, N = c.dstate;
    u = HostTensor({Bn, Dn, L}, c.dtype);
    u_d = u.Fill(rng.NormalVec(Bn * Dn * L));
    // delta sits around softplus^-1(dt) for dt log-uniform in [1e-3, 0.3] (or dt itself
    // without softplus), as in a trained Mamba layer.
    std::vector<double> delta_v(Bn * Dn * L);
    for (auto& v : delta_v) {
      const double dt = std::exp(rng.Uniform(std::log(1e-3), std::log(0.3)));
      v = c.softplus ? std::log(std::expm1(dt)) : dt;
      if (c.big_delta_fraction > 0 && rng.Uniform(0, 1) < c.big_delta_fraction) v = rng.Uniform(20.5, 24.0);
    }
    delta = HostTensor({Bn, Dn, L}, c.dtype);
    delta_d = delta.Fill(delta_v);
    std::vector<double> a_v(Dn * N);
    for (int64_t d = 0; d < Dn; ++d)
      for (int64_t n = 0; n < N; ++n) a_v[d * N + n] = -std::exp(rng.Uniform(-1.0, 1.5)) * (1.0 + 0.05 * n);
    A = HostTensor({Dn, N}, DType::kF32);
    A_d = A.Fill(a_v);
    B = HostTensor(BCShape(c, c.b_form), c.dtype);
    B_d = B.Fill(rng.NormalVec(B.numel()));
    C = HostTensor(BCShape(c, c.c_form), c.dtype);
    C_d = C.Fill(rng.NormalVec(C.numel()));
    if (c.has_D) {
      D = HostTensor({Dn}, DType::kF32);
      D_d = D.Fill(rng.NormalVec(Dn));
    }
    if (c.has_z) {
      z = HostTensor({Bn, Dn, L}, c.dtype);
      z_d = z.Fill(rng.NormalVec(Bn * Dn * L));
    }
    if (c.has_delta_bias) {
      delta_bias = HostTensor({Dn}, DType::kF32);
      // Without softplus dt = delta + bias must stay positive, as the decay exp(dt * A) < 1
      // assumes.
      delta_bias_d = delta_bias.Fill(c.softplus ? rng.UniformVec(Dn, -0.5, 0.5) : rng.UniformVec(Dn, 0.0, 0.05));
    }
    if (c.has_h0) {
      h0 = HostTensor({Bn, Dn, N}, DType::kF32);
      h0_d = h0.Fill(rng.NormalVec(Bn * Dn * N));
    }
  }

  SelectiveScanInputs Inputs() {
    SelectiveScanInputs in;
    in.u = u.view();
    in.delta = delta.view();
    in.A = A.view();
    in.B = B.view();
    in.C = C.view();
    if (c.has_D) in.D = D.view();
    if (c.has_z) in.z = z.view();
    if (c.has_delta_bias) in.delta_bias = delta_bias.view();
    if (c.has_h0) in.initial_state = h0.view();
    in.delta_softplus = c.softplus;
    return in;
  }

  ref::ScanShape Shape() const {
    ref::ScanShape s;
    s.batch = c.batch;
    s.dim = c.dim;
    s.seqlen = c.seqlen;
    s.dstate = c.dstate;
    s.b_variable = c.b_form != BCForm::kConstant;
    s.c_variable = c.c_form != BCForm::kConstant;
    s.b_groups = c.b_form == BCForm::kGrouped ? c.groups : 1;
    s.c_groups = c.c_form == BCForm::kGrouped ? c.groups : 1;
    s.delta_softplus = c.softplus;
    return s;
  }

  ref::ScanInputs RefInputs() const {
    ref::ScanInputs in;
    in.u = u_d.data();
    in.delta = delta_d.data();
    in.A = A_d.data();
    in.B = B_d.data();
    in.C = C_d.data();
    in.D = c.has_D ? D_d.data() : nullptr;
    in.z = c.has_z ? z_d.data() : nullptr;
    in.delta_bias = c.has_delta_bias ? delta_bias_d.data() : nullptr;
    in.h0 = c.has_h0 ? h0_d.data() : nullptr;
    return in;
  }

  int64_t SeqSize() const { return c.batch * c.dim * c.seqlen; }
  int64_t StateSize() const { return c.batch * c.dim * c.dstate; }
};

}  // namespace ssmkit::testing

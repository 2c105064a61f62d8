// Random selective-scan problems for the tests outside the op harness (bits, packed sequences,
// large shapes, the GPU): inputs held both as the kernel's tensors (any dtype, optionally with
// padded outer strides) and as the exact stored values in double for the fp64 oracle.
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ref/selective_scan_ref.hpp"
#include "ssmkit/op_tensors.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {

// A tensor stored inside a larger buffer: every dimension after the first is `pad` elements
// longer than the logical shape, so with pad > 0 every stride but the last exceeds the packed
// one and each row is followed by padding. Input padding holds NaN (a kernel that reads it
// produces NaN, which never passes); output padding must keep the bytes it had before the call.
class PaddedTensor {
 public:
  PaddedTensor() = default;
  PaddedTensor(std::vector<int64_t> shape, DType dtype, int64_t pad = 0)
      : shape_(std::move(shape)), dtype_(dtype), storage_(Padded(shape_, pad), dtype) {
    const Tensor full = storage_.view();
    strides_.assign(full.strides.begin(), full.strides.begin() + full.rank);
    is_data_.assign(static_cast<size_t>(storage_.numel()), false);
    ForEach([&](int64_t, int64_t s) { is_data_[s] = true; });
  }

  // Rounds `values` (row-major, logical shape) to the dtype and stores them; padding gets NaN.
  // Returns the stored values as doubles: what the kernel will read.
  std::vector<double> Fill(const std::vector<double>& values) {
    storage_.Poison();
    ForEach([&](int64_t i, int64_t s) {
      StoreFromF32(storage_.data(), dtype_, s, static_cast<float>(values[i]));
    });
    snapshot_ = storage_.bytes();
    return ToDouble();
  }
  // NaN everywhere, padding included; remembers the bytes for PaddingUntouched.
  void Poison() {
    storage_.Poison();
    snapshot_ = storage_.bytes();
  }
  std::vector<double> ToDouble() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    ForEach([&](int64_t i, int64_t s) { v[i] = LoadAsF32(storage_.bytes().data(), dtype_, s); });
    return v;
  }
  // The logical elements' bytes in row-major order (for bit-exact comparisons).
  std::vector<uint8_t> Bytes() const {
    const int64_t size = DTypeSize(dtype_);
    std::vector<uint8_t> out(static_cast<size_t>(numel() * size));
    ForEach([&](int64_t i, int64_t s) {
      std::memcpy(&out[i * size], &storage_.bytes()[s * size], size);
    });
    return out;
  }
  // True when no byte outside the logical elements changed since Fill or Poison.
  bool PaddingUntouched() const {
    const int64_t size = DTypeSize(dtype_);
    for (size_t s = 0; s < is_data_.size(); ++s) {
      if (!is_data_[s] && std::memcmp(&storage_.bytes()[s * size], &snapshot_[s * size], size) != 0)
        return false;
    }
    return true;
  }
  Tensor view() {
    Tensor t = storage_.view();
    for (int d = 0; d < t.rank; ++d) t.shape[d] = shape_[d];
    return t;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
  }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  static std::vector<int64_t> Padded(std::vector<int64_t> shape, int64_t pad) {
    for (size_t d = 1; d < shape.size(); ++d) shape[d] += pad;
    return shape;
  }
  // fn(logical row-major index, storage index) for every logical element.
  template <class Fn>
  void ForEach(Fn&& fn) const {
    const int rank = static_cast<int>(shape_.size());
    std::vector<int64_t> idx(rank, 0);
    for (int64_t i = 0, n = numel(); i < n; ++i) {
      int64_t s = 0;
      for (int d = 0; d < rank; ++d) s += idx[d] * strides_[d];
      fn(i, s);
      for (int d = rank - 1; d >= 0 && ++idx[d] == shape_[d]; --d) idx[d] = 0;
    }
  }

  std::vector<int64_t> shape_;
  DType dtype_ = DType::kF32;
  HostTensor storage_;
  std::vector<int64_t> strides_;  // of storage_, in elements
  std::vector<bool> is_data_;
  std::vector<uint8_t> snapshot_;
};

// The form of B or C: constant (D, N), variable (B, N, L), or grouped (B, G, N, L).
enum class BCForm { kConstant, kVariable, kGrouped };

struct ScanCase {
  int64_t batch = 1, dim = 4, seqlen = 16, dstate = 4, groups = 1;  // groups for kGrouped
  BCForm b_form = BCForm::kVariable, c_form = BCForm::kVariable;
  bool has_D = true, has_z = true, has_delta_bias = true, has_h0 = true, softplus = true;
  DType dtype = DType::kF32;        // of u, delta, z, B, C (and out, dout and their gradients)
  int64_t pad = 0;                  // > 0: every tensor gets padded outer strides
  double big_delta_fraction = 0.0;  // share of deltas pushed above 20 (softplus identity branch)
  // dt = softplus(delta + bias) is log-uniform in [1e-3, dt_max]; A[d, n] = -exp(U(-1, 1)) *
  // (1 + a_slope * n), from weak to strong decay as in an S4D-real initialised layer.
  double dt_max = 0.5, a_slope = 0.25;

  std::string Name() const {
    const char* forms = "cvg";
    return "B=" + std::to_string(batch) + " D=" + std::to_string(dim) +
           " L=" + std::to_string(seqlen) + " N=" + std::to_string(dstate) +
           " G=" + std::to_string(groups) + " B/C=" + forms[static_cast<int>(b_form)] +
           forms[static_cast<int>(c_form)] + " opts=" + std::to_string(has_D) +
           std::to_string(has_z) + std::to_string(has_delta_bias) + std::to_string(has_h0) +
           std::to_string(softplus) + " " + DTypeName(dtype) +
           (pad ? " pad=" + std::to_string(pad) : "") +
           (big_delta_fraction > 0 ? " big-delta" : "");
  }
};

inline std::vector<int64_t> BCShape(const ScanCase& c, BCForm form) {
  switch (form) {
    case BCForm::kConstant:
      return {c.dim, c.dstate};
    case BCForm::kVariable:
      return {c.batch, c.dstate, c.seqlen};
    case BCForm::kGrouped:
      return {c.batch, c.groups, c.dstate, c.seqlen};
  }
  return {};
}

// One problem: tensors for the kernel, doubles for the oracle.
struct ScanProblem {
  ScanCase c;
  PaddedTensor u, delta, A, B, C, D, z, delta_bias, h0;
  std::vector<double> u_d, delta_d, A_d, B_d, C_d, D_d, z_d, delta_bias_d, h0_d;

  ScanProblem(const ScanCase& sc, Rng& rng) : c(sc) {
    const int64_t Bn = c.batch, Dn = c.dim, L = c.seqlen, N = c.dstate;
    u = PaddedTensor({Bn, Dn, L}, c.dtype, c.pad);
    u_d = u.Fill(rng.NormalVec(Bn * Dn * L));
    // delta = softplus^-1(dt) (or dt itself without softplus), before the bias. Big deltas
    // (delta + bias in [20.5, 24.5], the softplus identity branch, at least 0.5 from the
    // threshold so finite differences never straddle it) skip l = 0: every path from h0 to the
    // loss passes the decay exp(dt_0 A), and exp(20 A) ~ 0 would leave dh0 too small for
    // finite differences to check.
    std::vector<double> delta_v(Bn * Dn * L);
    for (int64_t i = 0; i < Bn * Dn * L; ++i) {
      const double dt = std::exp(rng.Uniform(std::log(1e-3), std::log(c.dt_max)));
      delta_v[i] = c.softplus ? std::log(std::expm1(dt)) : dt;
      if (c.big_delta_fraction > 0 && i % L != 0 && rng.Uniform(0, 1) < c.big_delta_fraction) {
        delta_v[i] = rng.Uniform(21.0, 24.0);
      }
    }
    delta = PaddedTensor({Bn, Dn, L}, c.dtype, c.pad);
    delta_d = delta.Fill(delta_v);
    std::vector<double> a_v(Dn * N);
    for (int64_t d = 0; d < Dn; ++d) {
      for (int64_t n = 0; n < N; ++n)
        a_v[d * N + n] = -std::exp(rng.Uniform(-1.0, 1.0)) * (1.0 + c.a_slope * n);
    }
    A = PaddedTensor({Dn, N}, DType::kF32, c.pad);
    A_d = A.Fill(a_v);
    B = PaddedTensor(BCShape(c, c.b_form), c.dtype, c.pad);
    B_d = B.Fill(rng.NormalVec(B.numel()));
    C = PaddedTensor(BCShape(c, c.c_form), c.dtype, c.pad);
    C_d = C.Fill(rng.NormalVec(C.numel()));
    if (c.has_D) {
      D = PaddedTensor({Dn}, DType::kF32);
      D_d = D.Fill(rng.NormalVec(Dn));
    }
    if (c.has_z) {
      z = PaddedTensor({Bn, Dn, L}, c.dtype, c.pad);
      z_d = z.Fill(rng.NormalVec(Bn * Dn * L));
    }
    if (c.has_delta_bias) {
      delta_bias = PaddedTensor({Dn}, DType::kF32);
      // Without softplus dt = delta + bias must stay positive, as the decay exp(dt A) < 1
      // assumes; a small positive bias keeps it so.
      delta_bias_d = delta_bias.Fill(c.softplus ? rng.UniformVec(Dn, -0.5, 0.5)
                                                : rng.UniformVec(Dn, 0.0, 0.05));
    }
    if (c.has_h0) {
      h0 = PaddedTensor({Bn, Dn, N}, DType::kF32, c.pad);
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

  std::vector<int64_t> SeqShape() const { return {c.batch, c.dim, c.seqlen}; }
  std::vector<int64_t> StateShape() const { return {c.batch, c.dim, c.dstate}; }
  int64_t SeqSize() const { return c.batch * c.dim * c.seqlen; }
  int64_t StateSize() const { return c.batch * c.dim * c.dstate; }
};

// The gradients of SelectiveScanGrads, in the order of its list (ssmkit/op_tensors.hpp: du ...
// dinitial_state), which the arrays below and the tests' arrays of gradients follow.
inline constexpr int kNumScanGrads = std::size(SelectiveScanTensors::grads);

inline const char* ScanGradName(int i) { return SelectiveScanTensors::grads[i].name; }

// A poisoned tensor per gradient, each of its input's shape and dtype with the problem's
// padding (an absent input's too: whether to pass it is ScanGradPresent's).
inline std::array<PaddedTensor, kNumScanGrads> ScanGradTensors(const ScanProblem& prob) {
  const ScanCase& c = prob.c;
  const std::vector<int64_t> seq = prob.SeqShape(), state = prob.StateShape();
  std::array<PaddedTensor, kNumScanGrads> t = {PaddedTensor(seq, c.dtype, c.pad),
                                               PaddedTensor(seq, c.dtype, c.pad),
                                               PaddedTensor({c.dim, c.dstate}, DType::kF32, c.pad),
                                               PaddedTensor(BCShape(c, c.b_form), c.dtype, c.pad),
                                               PaddedTensor(BCShape(c, c.c_form), c.dtype, c.pad),
                                               PaddedTensor({c.dim}, DType::kF32),
                                               PaddedTensor(seq, c.dtype, c.pad),
                                               PaddedTensor({c.dim}, DType::kF32),
                                               PaddedTensor(state, DType::kF32, c.pad)};
  for (PaddedTensor& g : t) g.Poison();
  return t;
}

// Whether each gradient's input is present (a gradient of an absent one must not be passed).
inline std::array<bool, kNumScanGrads> ScanGradPresent(const ScanCase& c) {
  return {true, true, true, true, true, c.has_D, c.has_z, c.has_delta_bias, c.has_h0};
}

}  // namespace ssmkit::testing

// Random MLP and MoE problems for the tests: weights held as the kernel's tensors (any weight
// dtype) and as the exact stored values in double for the fp64 oracle.
// Dimension legend: T rows, d model width, F hidden width, E experts, k per token.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ref/mlp_ref.hpp"
#include "selective_scan_fixture.hpp"  // PaddedTensor
#include "ssmkit/mlp.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {

// One MLP's weights at realistic scales, drawn uniform as nn.Linear initialises them: gate and
// up with variance 1/d (pre-activations of unit scale for unit inputs), down 1/F, biases
// 0.1^2. The values are stored in the weight dtype as they are drawn; their fp64 copies (for
// the oracle) are made by Materialize, which large MoE problems call only for the experts the
// tokens select.
struct WeightSet {
  int64_t d = 0, F = 0;
  bool gated = true, bias = false;
  HostTensor gate, up, down, gate_bias, up_bias, down_bias;
  std::vector<double> gate_d, up_d, down_d, gate_bias_d, up_bias_d, down_bias_d;

  WeightSet() = default;
  WeightSet(Rng& rng, int64_t d_, int64_t F_, bool gated_, bool bias_, DType dtype,
            bool lazy = false)
      : d(d_), F(F_), gated(gated_), bias(bias_) {
    const double in_scale = 1.0 / std::sqrt(static_cast<double>(d));
    const double out_scale = 1.0 / std::sqrt(static_cast<double>(F));
    up = Drawn(rng, {F, d}, dtype, in_scale);
    down = Drawn(rng, {d, F}, dtype, out_scale);
    if (gated) gate = Drawn(rng, {F, d}, dtype, in_scale);
    if (bias) {
      up_bias = Drawn(rng, {F}, DType::kF32, 0.1);
      down_bias = Drawn(rng, {d}, DType::kF32, 0.1);
      if (gated) gate_bias = Drawn(rng, {F}, DType::kF32, 0.1);
    }
    if (!lazy) Materialize();
  }

  // A tensor of uniform values with standard deviation `stddev`, drawn straight into storage
  // by splitmix64 seeded from `rng` (a granite-4.0-h-tiny layer holds 151M weights: the
  // standard distributions took seconds).
  static HostTensor Drawn(Rng& rng, std::vector<int64_t> shape, DType dtype, double stddev) {
    HostTensor t(std::move(shape), dtype);
    const float a = static_cast<float>(stddev * std::sqrt(3.0));
    uint64_t state = static_cast<uint64_t>(rng.Uniform(0.0, 9007199254740992.0));
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint64_t z = state += 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const float unit = static_cast<float>(z >> 40) * 0x1p-24f;  // [0, 1)
      StoreFromF32(t.data(), dtype, i, (2.0f * unit - 1.0f) * a);
    }
    return t;
  }

  // The stored values in fp64, once.
  void Materialize() {
    if (!up_d.empty()) return;
    up_d = up.ToDouble();
    down_d = down.ToDouble();
    if (gated) gate_d = gate.ToDouble();
    if (bias) {
      up_bias_d = up_bias.ToDouble();
      down_bias_d = down_bias.ToDouble();
      if (gated) gate_bias_d = gate_bias.ToDouble();
    }
  }

  MlpWeights Views() {
    MlpWeights w;
    w.up = up.view();
    w.down = down.view();
    if (gated) w.gate = gate.view();
    if (bias) {
      w.up_bias = up_bias.view();
      w.down_bias = down_bias.view();
      if (gated) w.gate_bias = gate_bias.view();
    }
    return w;
  }

  ref::MlpWeights Ref() const {
    ref::MlpWeights w;
    w.up = up_d.data();
    w.down = down_d.data();
    if (gated) w.gate = gate_d.data();
    if (bias) {
      w.up_bias = up_bias_d.data();
      w.down_bias = down_bias_d.data();
      if (gated) w.gate_bias = gate_bias_d.data();
    }
    return w;
  }
};

// f32 gradient storage for one weight set, poisoned, with views and read-back.
struct WeightGrads {
  HostTensor dgate, dup, ddown, dgate_bias, dup_bias, ddown_bias;
  const WeightSet* w = nullptr;

  explicit WeightGrads(const WeightSet& ws) : w(&ws) {
    dup = HostTensor({ws.F, ws.d}, DType::kF32);
    ddown = HostTensor({ws.d, ws.F}, DType::kF32);
    if (ws.gated) dgate = HostTensor({ws.F, ws.d}, DType::kF32);
    if (ws.bias) {
      dup_bias = HostTensor({ws.F}, DType::kF32);
      ddown_bias = HostTensor({ws.d}, DType::kF32);
      if (ws.gated) dgate_bias = HostTensor({ws.F}, DType::kF32);
    }
    for (HostTensor* t : All()) t->Poison();
  }
  std::vector<HostTensor*> All() {
    std::vector<HostTensor*> all = {&dup, &ddown};
    if (w->gated) all.push_back(&dgate);
    if (w->bias) {
      all.push_back(&dup_bias);
      all.push_back(&ddown_bias);
      if (w->gated) all.push_back(&dgate_bias);
    }
    return all;
  }
  MlpWeightGrads Views() {
    MlpWeightGrads g;
    g.dup = dup.view();
    g.ddown = ddown.view();
    if (w->gated) g.dgate = dgate.view();
    if (w->bias) {
      g.dup_bias = dup_bias.view();
      g.ddown_bias = ddown_bias.view();
      if (w->gated) g.dgate_bias = dgate_bias.view();
    }
    return g;
  }
};

// The oracle's gradients of one weight set, with ref views.
struct RefWeightGrads {
  std::vector<double> dgate, dup, ddown, dgate_bias, dup_bias, ddown_bias;
  explicit RefWeightGrads(const WeightSet& w)
      : dgate(w.gated ? w.F * w.d : 0),
        dup(w.F * w.d),
        ddown(w.d * w.F),
        dgate_bias(w.gated && w.bias ? w.F : 0),
        dup_bias(w.bias ? w.F : 0),
        ddown_bias(w.bias ? w.d : 0) {}
  static double* Ptr(std::vector<double>& v) { return v.empty() ? nullptr : v.data(); }
  ref::MlpWeightGrads Views() {
    return {Ptr(dgate), Ptr(dup), Ptr(ddown), Ptr(dgate_bias), Ptr(dup_bias), Ptr(ddown_bias)};
  }
};

// Relative error of each gradient of `got` against `want`; the worst one.
inline double WorstGradError(WeightGrads& got, RefWeightGrads& want, std::string* which) {
  const std::pair<HostTensor*, std::vector<double>*> pairs[] = {
      {&got.dgate, &want.dgate},       {&got.dup, &want.dup},
      {&got.ddown, &want.ddown},       {&got.dgate_bias, &want.dgate_bias},
      {&got.dup_bias, &want.dup_bias}, {&got.ddown_bias, &want.ddown_bias}};
  const char* names[] = {"dgate", "dup", "ddown", "dgate_bias", "dup_bias", "ddown_bias"};
  double worst = 0.0;
  for (int i = 0; i < 6; ++i) {
    if (pairs[i].second->empty()) continue;
    const double err = RelativeError(pairs[i].first->ToDouble(), *pairs[i].second);
    if (err > worst || std::isnan(err)) {
      worst = err;
      *which = names[i];
    }
  }
  return worst;
}

inline const char* ActName(MlpActivation a) { return MlpActivationName(a); }

}  // namespace ssmkit::testing

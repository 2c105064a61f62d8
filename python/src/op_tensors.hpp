// Each op's tensors in one fixed order, shared by the numpy binding (dicts keyed by these
// names) and the XLA FFI handlers (operands and results in this order), so the two cannot
// disagree about which tensor is which. The integer inputs (seq_idx, cu_seqlens) come last.
#pragma once

#include <array>
#include <span>

#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::python {

using Tensors = std::span<const Tensor>;

// ---------------------------------------------------------------- selective scan
inline constexpr std::array<const char*, 11> kScanInputs = {
    "u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state", "seq_idx", "cu_seqlens"};
inline constexpr std::array<const char*, 9> kScanGrads = {
    "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dinitial_state"};

inline SelectiveScanInputs ScanInputs(Tensors t, bool delta_softplus) {
  SelectiveScanInputs in;
  in.u = t[0], in.delta = t[1], in.A = t[2], in.B = t[3], in.C = t[4], in.D = t[5], in.z = t[6];
  in.delta_bias = t[7], in.initial_state = t[8], in.seq_idx = t[9], in.cu_seqlens = t[10];
  in.delta_softplus = delta_softplus;
  return in;
}
inline SelectiveScanGrads ScanGrads(Tensors t) {
  return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]};
}

// ---------------------------------------------------------------- SSD
inline constexpr std::array<const char*, 11> kSsdInputs = {
    "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx", "cu_seqlens"};
inline constexpr std::array<const char*, 9> kSsdGrads = {
    "dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states"};

inline SsdInputs SsdInputsOf(Tensors t, bool dt_softplus, float dt_min, float dt_max) {
  SsdInputs in;
  in.x = t[0], in.dt = t[1], in.A = t[2], in.B = t[3], in.C = t[4], in.D = t[5], in.z = t[6];
  in.dt_bias = t[7], in.initial_states = t[8], in.seq_idx = t[9], in.cu_seqlens = t[10];
  in.dt_softplus = dt_softplus;
  in.dt_min = dt_min;
  in.dt_max = dt_max;
  return in;
}
inline SsdGrads SsdGradsOf(Tensors t) {
  return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]};
}

// ---------------------------------------------------------------- decode step
inline constexpr std::array<const char*, 9> kStateUpdateInputs = {
    "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_batch_indices"};

inline StateUpdateInputs StateUpdateInputsOf(Tensors t, bool dt_softplus) {
  StateUpdateInputs in;
  in.x = t[0], in.dt = t[1], in.A = t[2], in.B = t[3], in.C = t[4], in.D = t[5], in.z = t[6];
  in.dt_bias = t[7], in.state_batch_indices = t[8];
  in.dt_softplus = dt_softplus;
  return in;
}

// ---------------------------------------------------------------- causal conv1d
inline constexpr std::array<const char*, 5> kConvInputs = {"x", "weight", "bias", "initial_states",
                                                           "seq_idx"};
inline constexpr std::array<const char*, 4> kConvGrads = {"dx", "dweight", "dbias",
                                                          "dinitial_states"};
inline constexpr std::array<const char*, 3> kConvUpdateInputs = {"x", "weight", "bias"};

inline CausalConv1dInputs ConvInputs(Tensors t, bool silu) {
  CausalConv1dInputs in;
  in.x = t[0], in.weight = t[1], in.bias = t[2], in.initial_states = t[3], in.seq_idx = t[4];
  in.activation = silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone;
  return in;
}
inline CausalConv1dGrads ConvGrads(Tensors t) { return {t[0], t[1], t[2], t[3]}; }
inline CausalConv1dUpdateInputs ConvUpdateInputs(Tensors t, bool silu) {
  CausalConv1dUpdateInputs in;
  in.x = t[0], in.weight = t[1], in.bias = t[2];
  in.activation = silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone;
  return in;
}

// ---------------------------------------------------------------- RMSNorm
inline constexpr std::array<const char*, 4> kRmsNormInputs = {"x", "weight", "bias", "z"};
inline constexpr std::array<const char*, 4> kRmsNormGrads = {"dx", "dweight", "dbias", "dz"};
inline constexpr std::array<const char*, 4> kAddRmsNormInputs = {"x", "residual", "weight", "bias"};
inline constexpr std::array<const char*, 4> kAddRmsNormGrads = {"dx", "dresidual", "dweight",
                                                                "dbias"};

inline RmsNormInputs RmsNormInputsOf(Tensors t) { return {t[0], t[1], t[2], t[3]}; }
inline RmsNormGrads RmsNormGradsOf(Tensors t) { return {t[0], t[1], t[2], t[3]}; }
inline RmsNormOptions RmsNormOptionsOf(float eps, int64_t group_size, bool norm_before_gate) {
  RmsNormOptions o;
  o.eps = eps;
  o.group_size = group_size;
  o.norm_before_gate = norm_before_gate;
  return o;
}
inline AddRmsNormInputs AddRmsNormInputsOf(Tensors t) { return {t[0], t[1], t[2], t[3]}; }
inline AddRmsNormGrads AddRmsNormGradsOf(Tensors t) { return {t[0], t[1], t[2], t[3]}; }

// ---------------------------------------------------------------- linear
inline constexpr std::array<const char*, 3> kLinearInputs = {"x", "weight", "bias"};
inline constexpr std::array<const char*, 3> kLinearGrads = {"dx", "dweight", "dbias"};

inline LinearInputs LinearInputsOf(Tensors t) { return {t[0], t[1], t[2]}; }
inline LinearGrads LinearGradsOf(Tensors t) { return {t[0], t[1], t[2]}; }

}  // namespace ssmkit::python

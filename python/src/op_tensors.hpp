// The bindings' side of ssmkit/op_tensors.hpp: each op's tensor names as key lists (the numpy
// binding's dict keys, the XLA FFI handlers' operand and result orders) and the op's structs
// filled from tensors in that order, so that neither binding spells out a list of its own and
// the two cannot disagree about which tensor is which. The integer inputs (seq_idx,
// cu_seqlens) come last, as they do in the lists.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "ssmkit/op_tensors.hpp"

namespace ssmkit::python {

using Tensors = std::span<const Tensor>;

// The names of a list's tensors, in its order.
template <class Entry, size_t N>
constexpr std::array<const char*, N> Names(const Entry (&list)[N]) {
  std::array<const char*, N> names{};
  for (size_t i = 0; i < N; ++i) names[i] = list[i].name;
  return names;
}

// ---------------------------------------------------------------- selective scan
inline constexpr auto kScanInputs = Names(SelectiveScanTensors::inputs);
inline constexpr auto kScanGrads = Names(SelectiveScanTensors::grads);

inline SelectiveScanInputs ScanInputs(Tensors t, bool delta_softplus) {
  auto in = StructFromList(SelectiveScanTensors::inputs, t);
  in.delta_softplus = delta_softplus;
  return in;
}

// ---------------------------------------------------------------- SSD
inline constexpr auto kSsdInputs = Names(SsdTensors::inputs);
inline constexpr auto kSsdGrads = Names(SsdTensors::grads);

inline SsdInputs SsdInputsOf(Tensors t, bool dt_softplus, float dt_min, float dt_max) {
  auto in = StructFromList(SsdTensors::inputs, t);
  in.dt_softplus = dt_softplus;
  in.dt_min = dt_min;
  in.dt_max = dt_max;
  return in;
}

// ---------------------------------------------------------------- decode step
inline constexpr auto kStateUpdateInputs = Names(StateUpdateTensors::inputs);

inline StateUpdateInputs StateUpdateInputsOf(Tensors t, bool dt_softplus) {
  auto in = StructFromList(StateUpdateTensors::inputs, t);
  in.dt_softplus = dt_softplus;
  return in;
}

// ---------------------------------------------------------------- causal conv1d
inline constexpr auto kConvInputs = Names(CausalConv1dTensors::inputs);
inline constexpr auto kConvGrads = Names(CausalConv1dTensors::grads);
inline constexpr auto kConvUpdateInputs = Names(CausalConv1dUpdateTensors::inputs);

inline Conv1dActivation ConvActivation(bool silu) {
  return silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone;
}
inline CausalConv1dInputs ConvInputs(Tensors t, bool silu) {
  auto in = StructFromList(CausalConv1dTensors::inputs, t);
  in.activation = ConvActivation(silu);
  return in;
}
inline CausalConv1dUpdateInputs ConvUpdateInputs(Tensors t, bool silu) {
  auto in = StructFromList(CausalConv1dUpdateTensors::inputs, t);
  in.activation = ConvActivation(silu);
  return in;
}

// ---------------------------------------------------------------- RMSNorm
inline constexpr auto kRmsNormInputs = Names(RmsNormTensors::inputs);
inline constexpr auto kRmsNormGrads = Names(RmsNormTensors::grads);
inline constexpr auto kAddRmsNormInputs = Names(AddRmsNormTensors::inputs);
inline constexpr auto kAddRmsNormGrads = Names(AddRmsNormTensors::grads);

inline RmsNormOptions RmsNormOptionsOf(float eps, int64_t group_size, bool norm_before_gate) {
  RmsNormOptions o;
  o.eps = eps;
  o.group_size = group_size;
  o.norm_before_gate = norm_before_gate;
  return o;
}

}  // namespace ssmkit::python

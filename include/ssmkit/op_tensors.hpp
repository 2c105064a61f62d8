// Each op's tensor arguments, defined once: their names in the order every binding passes them,
// which are required, optional or integer indices (optional, no gradient), and which gradient
// output belongs to which input. The ops' argument checks, the C ABI's conversion, the Python and
// XLA FFI bindings and the GPU tests read these lists, so adding or renaming a tensor is an edit
// here and one in the struct; tests/op_tensors_test.cpp fails when a list and its struct (C++ or
// C ABI) disagree.
//
// Each list is an X-macro: SSMKIT_<OP>_INPUTS(X) calls X(name, role) once per input,
// SSMKIT_<OP>_GRADS(X) calls X(grad, input) once per gradient output. The names are the member
// names of both the C++ structs (include/ssmkit/*.hpp) and the C ABI's (ssmkit.h), so one
// expansion can copy between them. C++ code that would rather loop reads <Op>Tensors::inputs and
// ::grads, the same lists as descriptors with member pointers.
#pragma once

#include <cstddef>

#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/mamba1_mixer.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"
#include "ssmkit/tensor.hpp"

// Laid out by hand, a line per role (clang-format would reflow the entries).
// clang-format off

// The Mamba-1 selective scan (selective_scan.hpp).
#define SSMKIT_SELECTIVE_SCAN_INPUTS(X)                                                 \
  X(u, Required) X(delta, Required) X(A, Required) X(B, Required) X(C, Required)        \
  X(D, Optional) X(z, Optional) X(delta_bias, Optional) X(initial_state, Optional)      \
  X(seq_idx, Index) X(cu_seqlens, Index)
#define SSMKIT_SELECTIVE_SCAN_GRADS(X)                                                  \
  X(du, u) X(ddelta, delta) X(dA, A) X(dB, B) X(dC, C)                                  \
  X(dD, D) X(dz, z) X(ddelta_bias, delta_bias) X(dinitial_state, initial_state)

// The Mamba-2 SSD scan (ssd.hpp).
#define SSMKIT_SSD_INPUTS(X)                                                            \
  X(x, Required) X(dt, Required) X(A, Required) X(B, Required) X(C, Required)           \
  X(D, Optional) X(z, Optional) X(dt_bias, Optional) X(initial_states, Optional)        \
  X(seq_idx, Index) X(cu_seqlens, Index)
#define SSMKIT_SSD_GRADS(X)                                                             \
  X(dx, x) X(ddt, dt) X(dA, A) X(dB, B) X(dC, C)                                        \
  X(dD, D) X(dz, z) X(ddt_bias, dt_bias) X(dinitial_states, initial_states)

// The decode step selective_state_update (state_update.hpp); no backward.
#define SSMKIT_STATE_UPDATE_INPUTS(X)                                                   \
  X(x, Required) X(dt, Required) X(A, Required) X(B, Required) X(C, Required)           \
  X(D, Optional) X(z, Optional) X(dt_bias, Optional)                                    \
  X(state_batch_indices, Index)

// Causal conv1d (conv1d.hpp) and its decode update (no backward).
#define SSMKIT_CAUSAL_CONV1D_INPUTS(X)                                                  \
  X(x, Required) X(weight, Required)                                                    \
  X(bias, Optional) X(initial_states, Optional)                                         \
  X(seq_idx, Index)
#define SSMKIT_CAUSAL_CONV1D_GRADS(X)                                                   \
  X(dx, x) X(dweight, weight) X(dbias, bias) X(dinitial_states, initial_states)
#define SSMKIT_CAUSAL_CONV1D_UPDATE_INPUTS(X)                                           \
  X(x, Required) X(weight, Required)                                                    \
  X(bias, Optional)

// Gated RMSNorm and residual add + RMSNorm (norm.hpp).
#define SSMKIT_RMSNORM_INPUTS(X)                                                        \
  X(x, Required) X(weight, Required)                                                    \
  X(bias, Optional) X(z, Optional)
#define SSMKIT_RMSNORM_GRADS(X)                                                         \
  X(dx, x) X(dweight, weight) X(dbias, bias) X(dz, z)
#define SSMKIT_ADD_RMSNORM_INPUTS(X)                                                    \
  X(x, Required) X(residual, Optional) X(weight, Required) X(bias, Optional)
#define SSMKIT_ADD_RMSNORM_GRADS(X)                                                     \
  X(dx, x) X(dresidual, residual) X(dweight, weight) X(dbias, bias)

// The linear layer (linear.hpp).
#define SSMKIT_LINEAR_INPUTS(X)                                                         \
  X(x, Required) X(weight, Required)                                                    \
  X(bias, Optional)
#define SSMKIT_LINEAR_GRADS(X)                                                          \
  X(dx, x) X(dweight, weight) X(dbias, bias)

// The Mamba-1 mixer's fused forward (mamba1_mixer.hpp); no backward.
#define SSMKIT_MAMBA1_MIXER_INPUTS(X)                                                   \
  X(x, Required) X(in_proj, Required) X(conv_weight, Required) X(conv_bias, Optional)   \
  X(x_proj, Required) X(dt_proj, Required) X(dt_bias, Optional) X(A, Required)          \
  X(D, Optional) X(out_proj, Required)

// clang-format on

namespace ssmkit {

enum class TensorRole {
  kRequired,
  kOptional,
  kIndex,  // an optional integer tensor (sequence or state indices): it has no gradient
};

template <class Inputs>
struct InputTensor {
  const char* name;
  Tensor Inputs::*member;
  TensorRole role;
};

template <class Inputs, class Grads>
struct GradTensor {
  const char* name;
  Tensor Grads::*member;
  const char* input_name;  // the input it is the gradient of
  Tensor Inputs::*input;
};

// <Op>Tensors: the descriptor arrays `inputs` and (for an op with a backward) `grads` of one op's
// lists, with the structs they describe as Inputs and Grads.
#define SSMKIT_INPUT_TENSOR_(name, role) {#name, &Inputs::name, TensorRole::k##role},
#define SSMKIT_GRAD_TENSOR_(grad, input) {#grad, &Grads::grad, #input, &Inputs::input},
#define SSMKIT_OP_TENSORS_(Op, INPUTS)                                              \
  struct Op##Tensors {                                                              \
    using Inputs = Op##Inputs;                                                      \
    static constexpr InputTensor<Inputs> inputs[] = {INPUTS(SSMKIT_INPUT_TENSOR_)}; \
  };
#define SSMKIT_OP_TENSORS_WITH_GRADS_(Op, INPUTS, GRADS)                               \
  struct Op##Tensors {                                                                 \
    using Inputs = Op##Inputs;                                                         \
    using Grads = Op##Grads;                                                           \
    static constexpr InputTensor<Inputs> inputs[] = {INPUTS(SSMKIT_INPUT_TENSOR_)};    \
    static constexpr GradTensor<Inputs, Grads> grads[] = {GRADS(SSMKIT_GRAD_TENSOR_)}; \
  };

SSMKIT_OP_TENSORS_WITH_GRADS_(SelectiveScan, SSMKIT_SELECTIVE_SCAN_INPUTS,
                              SSMKIT_SELECTIVE_SCAN_GRADS)
SSMKIT_OP_TENSORS_WITH_GRADS_(Ssd, SSMKIT_SSD_INPUTS, SSMKIT_SSD_GRADS)
SSMKIT_OP_TENSORS_(StateUpdate, SSMKIT_STATE_UPDATE_INPUTS)
SSMKIT_OP_TENSORS_WITH_GRADS_(CausalConv1d, SSMKIT_CAUSAL_CONV1D_INPUTS, SSMKIT_CAUSAL_CONV1D_GRADS)
SSMKIT_OP_TENSORS_(CausalConv1dUpdate, SSMKIT_CAUSAL_CONV1D_UPDATE_INPUTS)
SSMKIT_OP_TENSORS_WITH_GRADS_(RmsNorm, SSMKIT_RMSNORM_INPUTS, SSMKIT_RMSNORM_GRADS)
SSMKIT_OP_TENSORS_WITH_GRADS_(AddRmsNorm, SSMKIT_ADD_RMSNORM_INPUTS, SSMKIT_ADD_RMSNORM_GRADS)
SSMKIT_OP_TENSORS_WITH_GRADS_(Linear, SSMKIT_LINEAR_INPUTS, SSMKIT_LINEAR_GRADS)
SSMKIT_OP_TENSORS_(Mamba1Mixer, SSMKIT_MAMBA1_MIXER_INPUTS)

#undef SSMKIT_INPUT_TENSOR_
#undef SSMKIT_GRAD_TENSOR_
#undef SSMKIT_OP_TENSORS_
#undef SSMKIT_OP_TENSORS_WITH_GRADS_

template <class Member>
struct ListedStruct;
template <class S>
struct ListedStruct<Tensor S::*> {
  using type = S;
};

// The struct `list` (an <Op>Tensors array) describes, with the i-th listed member set to
// tensors[i] and the others at their defaults: for code that holds an op's tensors in list
// order (the bindings' operands, the tests' arrays of gradients). tensors may run on past the
// list.
template <class Entry, size_t N, class Tensors>
auto StructFromList(const Entry (&list)[N], const Tensors& tensors) {
  typename ListedStruct<decltype(Entry::member)>::type s{};
  for (size_t i = 0; i < N; ++i) s.*list[i].member = tensors[i];
  return s;
}

}  // namespace ssmkit

// Depthwise causal 1-D convolution, forward, backward and the decode-time update, with the
// semantics of the causal-conv1d package that mamba_ssm uses (causal_conv1d_fn,
// causal_conv1d_update).
//
// Dimension legend: B batch, D channels, L sequence length, K conv width (2..8), T decode
// steps per update call, S conv_state length (>= K - 1).
//
//   xpad[b,d,:]  = initial_states[b,d,:] (K - 1 values; zeros when absent), then x[b,d,:]
//   out[b,d,l]   = act(bias[d] + sum_{k=0}^{K-1} weight[d,k] * xpad[b,d,l+k])
//   final_states = xpad[b,d,L : L+K-1], the last K - 1 inputs (reaching into initial_states
//                  when L < K - 1)
//
// weight[:, K-1] multiplies the current input and weight[:, 0] the oldest (causal-conv1d's
// order, i.e. PyTorch's conv1d with padding K - 1 and the right end trimmed).
// act is the identity or silu(v) = v * sigmoid(v). Accumulation is f32 for every dtype.
// With seq_idx (packed sequences), xpad[b,d,l+k] counts only when that input belongs to the
// sequence of position l (the K - 1 initial values belong to the row's first sequence), and
// final_states are the last K - 1 inputs of the row's last sequence (zeros before its start).
// docs/ops/conv1d.md has the details and the deviations from causal-conv1d.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

enum class Conv1dActivation : int { kNone = 0, kSilu = 1 };

inline constexpr int64_t kMinConvWidth = 2;
inline constexpr int64_t kMaxConvWidth = 8;

struct CausalConv1dInputs {
  Tensor x;               // (B, D, L) f32 | bf16, last dim contiguous
  Tensor weight;          // (D, K) f32, 2 <= K <= 8
  Tensor bias;            // optional (D) f32
  Tensor initial_states;  // optional (B, D, K-1) f32 | bf16: the inputs before position 0
  Conv1dActivation activation = Conv1dActivation::kNone;
  Tensor seq_idx;  // optional (B, L) i32, non-decreasing along L: a new sequence starts where
                   // it changes, and sees none of the previous one's inputs
};

// out: (B, D, L), the dtype of x. final_states: optional (B, D, K-1) f32 | bf16 (either; f32
// holds a bf16 x exactly, and is the dtype causal_conv1d_update's conv_state takes).
Status CausalConv1dForward(const CausalConv1dInputs& inputs, const Tensor& out,
                           const Tensor& final_states);

// Gradient outputs, each overwritten (not accumulated), each with its input's shape and dtype.
// Any may be left undefined when not wanted; one for an absent optional input must be.
struct CausalConv1dGrads {
  Tensor dx, dweight, dbias, dinitial_states;
};

// dout: (B, D, L), the dtype of x. dfinal_states: optional (B, D, K-1) f32 | bf16, the
// gradient reaching final_states (absent = zeros). dweight and dbias are sums over batch and
// time, each channel's reduced by one thread in a fixed order: the same inputs give the same
// bits, whatever the thread count.
Status CausalConv1dBackward(const CausalConv1dInputs& inputs, const Tensor& dout,
                            const Tensor& dfinal_states, const CausalConv1dGrads& grads);

struct CausalConv1dUpdateInputs {
  Tensor x;       // (B, D) one step, or (B, D, T) T steps; f32 | bf16, last dim contiguous
  Tensor weight;  // (D, K) f32, 2 <= K <= 8
  Tensor bias;    // optional (D) f32
  Conv1dActivation activation = Conv1dActivation::kNone;
};

// One decode call: for each step t the window is the last K - 1 values of the state followed
// by x[..., t]; out[..., t] = act(bias + weight . window); then the state shifts left by one
// and x[..., t] is appended. conv_state: (B, D, S) f32, S >= K - 1, updated in place (only its
// last K - 1 values enter the convolution; mamba_ssm keeps S = K). out: the shape and dtype of
// x; it may be x itself (every x value of a row is read before that row's out is written).
Status CausalConv1dUpdate(const CausalConv1dUpdateInputs& inputs, const Tensor& conv_state,
                          const Tensor& out);

}  // namespace ssmkit

// One decode step of the selective state space recurrence, in place on the state, with
// mamba_ssm's semantics (selective_state_update). One function serves both model families;
// the state's rank picks the form, as in mamba_ssm.
//
// Dimension legend: B batch, Bs the state's batch (the cache pool; = B without indices),
// D channels (Mamba-1), H heads, P head dim, N state size, G groups of B/C.
//
// Mamba-1 (state rank 3):  state (Bs, D, N), x (B, D), dt (B, D), A (D, N), B/C (B, N) or
//   (B, G, N) with D % G == 0 (channel d reads group d / (D/G)), D (D), z (B, D),
//   dt_bias (D) -> out (B, D).
// Mamba-2 (state rank 4):  state (Bs, H, P, N), x (B, H, P), dt (B, H) (one per head; mamba_ssm
//   passes it as (B, H, P) with stride 0 over P), A (H) (one per head; mamba_ssm's (H, P, N)
//   with strides 0), B/C (B, G, N) with H % G == 0 (head h reads group h / (H/G)), D (H) or
//   (H, P), z (B, H, P), dt_bias (H) -> out (B, H, P).
//
// With s = state_batch_indices[b] (s = b when absent), for every channel or (head, p):
//   dt'        = softplus(dt + dt_bias)        (identity above 20; no softplus unless dt_softplus)
//   state[s,n] = exp(dt' * A[n]) * state[s,n] + dt' * B[n] * x
//   y          = sum_n C[n] * state[s,n] + D * x
//   out        = y * silu(z)                   (y when z is absent)
// A row b with s < 0 is skipped (mamba_ssm's pad slots): neither its state row nor its out row
// is read or written. Accumulation is f32 whatever the input dtype. docs/ops/state_update.md has
// the details and the deviations from mamba_ssm.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

inline constexpr int64_t kMaxStateUpdateStateSize = 256;

struct StateUpdateInputs {
  Tensor x;        // (B, D) | (B, H, P); f32 | bf16, last dim contiguous
  Tensor dt;       // (B, D) | (B, H); f32 | bf16
  Tensor A;        // (D, N) | (H); f32
  Tensor B;        // (B, N) or (B, G, N); f32 | bf16
  Tensor C;        // the same forms as B (may differ in G and dtype)
  Tensor D;        // optional (D) | (H) or (H, P); f32: skip connection
  Tensor z;        // optional, the shape of x; f32 | bf16: gate
  Tensor dt_bias;  // optional (D) | (H); f32
  // optional (B) i32: the state row each batch row uses; negative = skip the row. Non-negative
  // entries must be distinct and < Bs (two batch rows updating one state row would race).
  Tensor state_batch_indices;
  bool dt_softplus = false;
};

// state: (Bs, D, N) or (Bs, H, P, N) f32, updated in place; last dim contiguous, 1 <= N <= 256.
// out: the shape and dtype of x; it may be x itself.
Status SelectiveStateUpdate(const StateUpdateInputs& inputs, const Tensor& state,
                            const Tensor& out);

}  // namespace ssmkit

// Mamba-2 SSD (structured state space duality) scan, forward and backward, with the semantics
// of mamba_ssm's `mamba_chunk_scan_combined`.
//
// Dimension legend: B batch, L sequence length, H heads, P head dim, G groups of B/C
// (H % G == 0; head h reads group h / (H / G)), N state size.
//
//   dt[b,l,h]      = clamp(softplus(dt_in[b,l,h] + dt_bias[h]), dt_min, dt_max)
//                    (softplus only when dt_softplus; identity above 20)
//   h[b,l,h,p,n]   = exp(dt * A[h]) * h[b,l-1,h,p,n] + dt * x[b,l,h,p] * B[b,l,g,n]
//                    (h[b,-1] = initial_states; h[b,l-1] reads as 0 where seq_idx[b,l]
//                    differs from seq_idx[b,l-1]: a new sequence starts at l)
//   y[b,l,h,p]     = sum_n C[b,l,g,n] * h[b,l,h,p,n] + D[h(,p)] * x[b,l,h,p]
//   out            = y * silu(z)   (when z is given, else y)
//   final_states   = h[b,L-1]
//
// Packed sequences (variable-length batches): seq_idx as above, or cu_seqlens (batch 1),
// mamba_ssm's Mamba-2 convention, which starts sequence k at cu_seqlens[k] from
// initial_states[k] when one is given per sequence (else zeros; initial_states (1, ...) is
// the first sequence's). varlen_states[k] = h at sequence k's last step (mamba_ssm's
// return_varlen_states). S: the number of sequences.
//
// docs/ops/ssd.md lists the deviations from mamba_ssm and how the algorithm is chosen.
#pragma once

#include <limits>
#include <string_view>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// Both algorithms compute the same function; they differ in speed and rounding.
enum class SsdAlgorithm : int {
  kAuto = 0,        // the default: kSequential on the CPU, at every shape (docs/ops/ssd.md)
  kChunked = 1,     // chunks of Q steps: intra-chunk, chunk-state and output products on GEMM
  kSequential = 2,  // the recurrence one step at a time, SIMD over the state
};

const char* SsdAlgorithmName(SsdAlgorithm algorithm);
// Accepts "auto", "chunked", "sequential".
Status ParseSsdAlgorithm(std::string_view name, SsdAlgorithm* algorithm);

struct SsdInputs {
  Tensor x;               // (B, L, H, P) f32 | bf16, last dim contiguous
  Tensor dt;              // (B, L, H) f32 | bf16, last dim contiguous
  Tensor A;               // (H) f32
  Tensor B;               // (B, L, G, N) f32 | bf16
  Tensor C;               // (B, L, G, N) f32 | bf16
  Tensor D;               // optional (H) or (H, P) f32: skip connection
  Tensor z;               // optional (B, L, H, P) f32 | bf16: gate
  Tensor dt_bias;         // optional (H) f32
  Tensor initial_states;  // optional (B, H, P, N) f32: the state before position 0; with
                          // cu_seqlens also (S, H, P, N), one per sequence
  Tensor seq_idx;         // optional (B, L) i32, non-decreasing along L: packed sequences; a
                          // change resets the state
  Tensor cu_seqlens;      // optional (S + 1) i32 | i64, batch 1: sequence k is positions
                          // [cu[k], cu[k+1]), 0 = cu[0] < cu[1] < ... < cu[S] = L
  bool dt_softplus = false;
  // dt_limit: dt is clamped to [dt_min, dt_max] after bias and softplus, as mamba_ssm's
  // kernel does; the gradient through dt is zero where dt lies outside. The defaults only
  // act on a negative dt, which needs dt_softplus off.
  float dt_min = 0.0f;
  float dt_max = std::numeric_limits<float>::infinity();
};

struct SsdOptions {
  SsdAlgorithm algorithm = SsdAlgorithm::kAuto;
  // Q, the chunk length of the chunked algorithm (mamba_ssm's chunk_size); 0 picks the
  // default. Need not divide L. Tuned for speed; the function computed does not depend on it.
  int64_t chunk_size = 0;
};

// out: (B, L, H, P), the dtype of x. final_states: optional (B, H, P, N) f32
// (mamba_ssm's return_final_states).
Status SsdForward(const SsdInputs& inputs, const Tensor& out, const Tensor& final_states,
                  const SsdOptions& options = {});

// Everything a forward writes; all optional but out.
struct SsdOutputs {
  Tensor out;            // (B, L, H, P), the dtype of x
  Tensor final_states;   // (B, H, P, N) f32
  Tensor varlen_states;  // (S, H, P, N) f32, with cu_seqlens: each sequence's last state
};

// The forward with every output.
Status SsdForward(const SsdInputs& inputs, const SsdOutputs& outputs,
                  const SsdOptions& options = {});

// Gradient outputs, each overwritten (not accumulated), each with its input's shape and dtype.
// Any may be left undefined when not wanted; one for an absent optional input must be.
struct SsdGrads {
  Tensor dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states;
};

// dout: (B, L, H, P), the dtype of x. dfinal_states: optional (B, H, P, N) f32, the gradient
// flowing into final_states. Deterministic: the same inputs and thread count give the same
// bits (no float atomics; reductions in a fixed order).
Status SsdBackward(const SsdInputs& inputs, const Tensor& dout, const Tensor& dfinal_states,
                   const SsdGrads& grads, const SsdOptions& options = {});

// The gradients reaching a forward's outputs; all optional but dout (absent = zeros).
struct SsdOutputGrads {
  Tensor dout;            // (B, L, H, P), the dtype of x
  Tensor dfinal_states;   // (B, H, P, N) f32
  Tensor dvarlen_states;  // (S, H, P, N) f32, with cu_seqlens
};

// The backward with every output's gradient.
Status SsdBackward(const SsdInputs& inputs, const SsdOutputGrads& output_grads,
                   const SsdGrads& grads, const SsdOptions& options = {});

}  // namespace ssmkit

// Mamba-1 selective scan, forward and backward, with mamba_ssm's semantics
// (selective_scan_fn) plus an initial state h0 and the final state as an output.
// docs/ops/selective_scan.md has the details and the deviations from mamba_ssm.
//
// Dimension legend: B batch, D channels (d_inner), L sequence length, N state size,
// G groups of B/C (D % G == 0; channel d reads group d / (D / G)).
//
//   dt[b,d,l]   = softplus(delta[b,d,l] + delta_bias[d])   (identity above 20; no softplus
//                                                            unless delta_softplus)
//   h[b,d,l,n]  = exp(dt * A[d,n]) * h[b,d,l-1,n] + dt * B[.,n,l] * u[b,d,l],  h[-1] = h0
//   y[b,d,l]    = sum_n C[.,n,l] * h[b,d,l,n] + D[d] * u[b,d,l]
//   out[b,d,l]  = y * silu(z[b,d,l])   (when z is given, else y)
//   final_state = h[b,d,L-1,:]
//
// Packed sequences (variable-length batches): with seq_idx or cu_seqlens, a row holds several
// sequences one after the other; where sequence k starts, h[b,d,l-1,:] reads as its initial
// state (zeros, or initial_state[k] when one is given per sequence) instead of the previous
// sequence's last state. varlen_states[k] = h at sequence k's last step (mamba_ssm's
// return_varlen_states, which its Mamba-1 does not have). S: the number of sequences.
#pragma once

#include <string_view>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// Every algorithm computes the same function; they differ in parallel structure and rounding.
// docs/numerics.md gives each one's measured error against the fp64 oracle.
enum class ScanAlgorithm : int {
  kSequential = 0,    // h_l = a_l h_{l-1} + x_l, one step at a time (default on CPU)
  kChunked = 1,       // independent chunks of Q steps, then a carry pass between chunks
  kBlelloch = 2,      // work-efficient up-sweep / down-sweep prefix scan over (a, x) pairs
  kHillisSteele = 3,  // step-doubling prefix scan, log2(L) passes
  kLogSpace = 4,      // h = P * cumsum(x / P), P = exp(cumsum(dt * A)); underflows for long L
};

const char* ScanAlgorithmName(ScanAlgorithm algorithm);
// Accepts "sequential", "chunked", "blelloch", "hillis-steele", "log-space".
Status ParseScanAlgorithm(std::string_view name, ScanAlgorithm* algorithm);

struct SelectiveScanInputs {
  Tensor u;              // (B, D, L) f32 | bf16, last dim contiguous
  Tensor delta;          // (B, D, L) f32 | bf16, last dim contiguous
  Tensor A;              // (D, N) f32
  Tensor B;              // (D, N) constant, or (B, N, L) / (B, G, N, L) variable; f32 | bf16
  Tensor C;              // the same forms as B
  Tensor D;              // optional (D) f32: skip connection
  Tensor z;              // optional (B, D, L) f32 | bf16: gate
  Tensor delta_bias;     // optional (D) f32
  Tensor initial_state;  // optional (B, D, N) f32: h0; with cu_seqlens also (S, D, N), one
                         // per sequence
  bool delta_softplus = false;
  // Packed sequences (optional; docs/ops/selective_scan.md, "Variable-length batches").
  Tensor seq_idx;     // (B, L) i32, non-decreasing along L: a new sequence starts where it
                      // changes, from a zero state
  Tensor cu_seqlens;  // (S + 1) i32 | i64, batch 1: sequence k is positions
                      // [cu_seqlens[k], cu_seqlens[k+1]), 0 = cu[0] < cu[1] < ... < cu[S] = L
};

struct SelectiveScanOptions {
  // The forward's algorithm; the backward always runs one (docs/ops/selective_scan.md).
  ScanAlgorithm algorithm = ScanAlgorithm::kSequential;
  // Steps per chunk for kChunked and for the backward's checkpoints; 0 picks the default.
  // Tuned for speed, does not affect the function computed.
  int64_t chunk_length = 0;
};

inline constexpr int64_t kMaxScanStateSize = 256;

// The chunk length options.chunk_length = 0 stands for. Tuned for speed, does not affect the
// function computed.
inline constexpr int64_t kDefaultScanChunkLength = 64;

// out: (B, D, L), the dtype of u. final_state: optional (B, D, N) f32.
Status SelectiveScanForward(const SelectiveScanInputs& inputs, const Tensor& out,
                            const Tensor& final_state, const SelectiveScanOptions& options = {});

// Chunk states: what a forward saves so that its backward need not run the forward over the
// sequence again (mamba_ssm's forward returns the same for its backward). A (B, D, K, N) f32
// tensor, K = SelectiveScanChunkCount(L, options): entry [b, d, k] is the state entering step
// k Q, Q = options.chunk_length or its default (entry 0 is initial_state, or zeros). Extra
// memory O(B D N L / Q). CPU only for now.
int64_t SelectiveScanChunkCount(int64_t seqlen, const SelectiveScanOptions& options = {});

// The forward above, also writing chunk_states (optional: undefined writes none). Where a
// packed sequence starts at step k Q, entry k is that sequence's initial state.
Status SelectiveScanForward(const SelectiveScanInputs& inputs, const Tensor& out,
                            const Tensor& final_state, const Tensor& chunk_states,
                            const SelectiveScanOptions& options = {});

// Everything a forward writes; all optional but out.
struct SelectiveScanOutputs {
  Tensor out;            // (B, D, L), the dtype of u
  Tensor final_state;    // (B, D, N) f32: h[b, L-1]
  Tensor chunk_states;   // (B, D, K, N) f32, as above
  Tensor varlen_states;  // (S, D, N) f32, with cu_seqlens: each sequence's last state
};

// The forward with every output.
Status SelectiveScanForward(const SelectiveScanInputs& inputs, const SelectiveScanOutputs& outputs,
                            const SelectiveScanOptions& options = {});

// Gradient outputs, each overwritten (not accumulated), each with its input's shape and dtype.
// Any may be left undefined when not wanted; one for an absent optional input must be.
struct SelectiveScanGrads {
  Tensor du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dinitial_state;
};

// dout: (B, D, L), the dtype of u. dfinal_state: optional (B, D, N) f32, the gradient
// flowing into final_state (mamba_ssm drops it; we add it to the adjoint of h[L-1]).
// Deterministic: the same inputs and thread count give the same bits.
Status SelectiveScanBackward(const SelectiveScanInputs& inputs, const Tensor& dout,
                             const Tensor& dfinal_state, const SelectiveScanGrads& grads,
                             const SelectiveScanOptions& options = {});

// The backward above, given the chunk_states its forward wrote for the same inputs and
// options (optional: undefined recomputes them). With variable B and C (a Mamba-1 layer) it
// then skips its forward pass over the sequence, and the gradients are the same bits either
// way; with a constant B or C it reads none of them (it needs that pass's outputs anyway).
Status SelectiveScanBackward(const SelectiveScanInputs& inputs, const Tensor& dout,
                             const Tensor& dfinal_state, const Tensor& chunk_states,
                             const SelectiveScanGrads& grads,
                             const SelectiveScanOptions& options = {});

// The gradients reaching a forward's outputs; all optional but dout (absent = zeros).
struct SelectiveScanOutputGrads {
  Tensor dout;            // (B, D, L), the dtype of u
  Tensor dfinal_state;    // (B, D, N) f32
  Tensor dvarlen_states;  // (S, D, N) f32, with cu_seqlens
};

// The backward with every output's gradient; chunk_states as above (optional).
Status SelectiveScanBackward(const SelectiveScanInputs& inputs,
                             const SelectiveScanOutputGrads& output_grads,
                             const Tensor& chunk_states, const SelectiveScanGrads& grads,
                             const SelectiveScanOptions& options = {});

}  // namespace ssmkit

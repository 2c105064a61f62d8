// The Mamba-1 mixer's forward over whole sequences from zero states, in one call: inference for
// a small network run window after window (a game policy's 60 frames through two layers), where
// the mixer's six op calls would each split the channels over the threads its own way and move
// every activation between the cores' caches. docs/ops/mamba1_mixer.md has the details.
//
// Dimension legend: B batch, L length, d model width, D channels (d_inner), N state size,
// R dt_rank, E = R + 2N (x_proj's rows), K conv width.
//
//   [xs, z] = x in_proj^T                      (B, L, 2D), xs the first D features
//   xc      = silu(conv1d(xs) + conv_bias)     causal, per channel, zero initial states
//   [dt_in, Bm, Cm] = xc x_proj^T              (B, L, R), (B, L, N), (B, L, N)
//   delta   = dt_in dt_proj^T                  (B, L, D)
//   y       = selective_scan(xc, delta, A, Bm, Cm, D, z, dt_bias, delta_softplus = true)
//   out     = y out_proj^T                     (B, L, d)
//
// as mamba_ssm's Mamba.forward computes it without an inference cache (its dt_proj.bias is
// dt_bias here; in_proj and out_proj without biases, mamba_ssm's default), each step as the op
// of the same name computes it (linear.hpp, conv1d.hpp, selective_scan.hpp).
//
// Storage: x and out f32 (B, L, d), rows possibly strided, the last dimension contiguous; out
// may be x (x is read in full before out is written) but must not otherwise overlap an input.
// The four projections f32 | bf16 | f16, contiguous (out, in) as checkpoints store them,
// multiplied as LinearForward multiplies them (with the opt-in bf16 products, SetBf16Products,
// x rounded to bf16 for a bf16 weight); conv_weight, conv_bias, dt_bias, A and D f32.
//
// Threads: the channels are taken in groups of kMamba1MixerGroupChannels, and each thread
// keeps its groups from in_proj through the scan (its rows of in_proj, its channels' conv and
// scan, its rows of dt_proj), so activations cross cores only where every channel meets: x_proj
// and out_proj. Where the products run on AMX's bf16 tiles and the groups' partial sums are no
// more floats than the activation they keep local (G E <= D for x_proj, G d <= D for out_proj),
// those two are summed per group and the groups' sums added in group order; otherwise they run
// whole, as LinearForward runs them.
// Either way each output is summed in one fixed order: the same inputs and thread count give the
// same bits, and any thread count does where the products' bits do not depend on it (AMX's
// tiles, the bf16 products, and up to kLinearGemvMaxRows rows; LinearForward's sgemm path
// splits W's rows over the threads).
//
// Workspace: internal, the calling thread's (kept between calls: a window of a given shape
// allocates nothing after the first). A failed allocation returns kOutOfMemory.
//
// Forward only, CPU only (CUDA tensors give kUnsupported). The backward of a training step
// runs the ops one by one.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

inline constexpr int64_t kMamba1MixerGroupChannels = 256;

struct Mamba1MixerInputs {
  Tensor x;            // (B, L, d) f32
  Tensor in_proj;      // (2D, d) f32 | bf16 | f16
  Tensor conv_weight;  // (D, K) f32, 2 <= K <= 8
  Tensor conv_bias;    // optional (D) f32
  Tensor x_proj;       // (R + 2N, D) f32 | bf16 | f16, R >= 1
  Tensor dt_proj;      // (D, R) f32 | bf16 | f16
  Tensor dt_bias;      // optional (D) f32
  Tensor A;            // (D, N) f32
  Tensor D;            // optional (D) f32
  Tensor out_proj;     // (d, D) f32 | bf16 | f16
};

// out: (B, L, d) f32.
Status Mamba1MixerForward(const Mamba1MixerInputs& inputs, const Tensor& out);

}  // namespace ssmkit

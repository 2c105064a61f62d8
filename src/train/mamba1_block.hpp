// The Mamba-1 mixer for training: forward keeping what the backward needs, and the backward.
// The block runs channel-major (Bt, channels, L), the layout the conv and the scan take, so
// every projection is one GEMM per batch entry and no activation is transposed.
//
// Dimension legend: Bt batch, L length, M = Bt * L, d d_model, D d_inner, N state size,
// R dt_rank, K conv width.
//
//   xz[b]   = W_in normed[b]^T                      (2D, L): rows [x (D), z (D)]
//   xc      = silu(conv1d(x))                       (Bt, D, L)
//   xdbl[b] = W_x xc[b]                             (R + 2N, L): rows [dt_in (R), B (N), C (N)]
//   dt[b]   = W_dt dt_in[b]                         (D, L)   (dt_proj.bias enters the scan)
//   y       = selective_scan(xc, dt, -exp(A_log), B, C, D, z, dt_bias, softplus)
//   out[b]  = y[b]^T W_out^T                        (L, d)
#pragma once

#include <vector>

#include "ssmkit/status.hpp"
#include "train/block.hpp"

namespace ssmkit::train {

struct Mamba1Saved {        // the forward's activations, kept for the backward
  std::vector<float> xz;    // (Bt, 2D, L)
  std::vector<float> xc;    // (Bt, D, L)
  std::vector<float> xdbl;  // (Bt, R + 2N, L)
  std::vector<float> dt;    // (Bt, D, L) before bias and softplus
  std::vector<float> y;     // (Bt, D, L)
  std::vector<float>
      chunk_states;  // (Bt, D, K, N) the scan's, so its backward skips a forward pass
};

struct Mamba1Scratch {                          // backward workspaces, shared by the layers
  std::vector<float> dy, dxz, dxc, ddt, dxdbl;  // the shapes of y, xz, xc, dt, xdbl
  std::vector<float> A, dA;                     // (D, N)
  std::vector<float> dD, ddt_bias, dconv_b;     // (D)
  std::vector<float> dconv_w;                   // (D, K)
};

// normed: (M, d) the block's input; out: (M, d).
Status Mamba1Forward(const BlockArgs& args, const float* normed, Mamba1Saved* saved,
                     Mamba1Scratch* scratch, float* out);

// dout: (M, d). Adds the parameter gradients into args.grads and writes dnormed (M, d).
Status Mamba1Backward(const BlockArgs& args, const float* normed, const Mamba1Saved& saved,
                      const float* dout, Mamba1Scratch* scratch, float* dnormed);

}  // namespace ssmkit::train

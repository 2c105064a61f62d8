// The Mamba-2 mixer for training: forward keeping what the backward needs, and the backward.
// The block runs token-major (M, features), the layout of the SSD and the norm; only the
// conv's channels go through a channel-major (Bt, C, L) copy and back.
//
// Dimension legend: Bt batch, L length, M = Bt * L, d d_model, D d_inner, H heads, P head dim
// (H P = D), G groups (= 1 in training), N state size, C = D + 2GN conv channels,
// I = 2D + 2GN + H in_proj rows, K conv width.
//
//   [z, xBC, dt] = normed W_in^T                   W_in's rows [z (D), xBC (C), dt (H)]
//   xbc      = silu(conv1d(xBC))                    (M, C): columns [x (D), B (GN), C (GN)]
//   y        = ssd(x, dt, -exp(A_log), B, C, D, dt_bias, softplus, dt_limit)   (M, D)
//   yn       = rmsnorm(y * silu(z)) * norm.weight   (gate before the norm, group size D / G)
//   out      = yn W_out^T                           (M, d)
#pragma once

#include <vector>

#include "ssmkit/status.hpp"
#include "train/block.hpp"

namespace ssmkit::train {

struct Mamba2Saved {          // the forward's activations, kept for the backward
  std::vector<float> zxbcdt;  // (M, I): z and dt in their columns (the xBC columns unused)
  std::vector<float> xbc_t;   // (Bt, C, L): xBC before the conv, channel-major
  std::vector<float> xbc;     // (M, C): after the conv and silu
  std::vector<float> y;       // (M, D)
  std::vector<float> yn;      // (M, D)
};

struct Mamba2Scratch {                     // workspaces, shared by the layers
  std::vector<float> conv_t;               // (Bt, C, L)
  std::vector<float> dyn, dy;              // (M, D)
  std::vector<float> dzxbcdt;              // (M, I): dz and ddt in their columns
  std::vector<float> dxbc;                 // (M, C)
  std::vector<float> dxbc_t, dpre_t;       // (Bt, C, L)
  std::vector<float> A, dA, dD, ddt_bias;  // (H)
  std::vector<float> dnorm;                // (D)
  std::vector<float> dconv_w;              // (C, K)
  std::vector<float> dconv_b;              // (C)
};

// normed: (M, d) the block's input; out: (M, d).
Status Mamba2Forward(const BlockArgs& args, const float* normed, Mamba2Saved* saved,
                     Mamba2Scratch* scratch, float* out);

// dout: (M, d). Adds the parameter gradients into args.grads and writes dnormed (M, d).
Status Mamba2Backward(const BlockArgs& args, const float* normed, const Mamba2Saved& saved,
                      const float* dout, Mamba2Scratch* scratch, float* dnormed);

}  // namespace ssmkit::train

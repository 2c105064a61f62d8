// Device helpers of the causal conv1d kernels (conv1d.cu, conv1d_vector.cu): the padded input
// xpad = [initial_states, x], sequence membership under seq_idx, the pre-activation, the final
// state, and the output and padded-input gradients, each element by element. The math is in
// conv1d.cu's header comment.
#pragma once

#include "cuda/common.cuh"
#include "params/conv1d_params.hpp"
#include "ssmkit/conv1d.hpp"

namespace ssmkit::cuda {

constexpr int kMaxK = static_cast<int>(kMaxConvWidth);

// xpad[b, d, j] for j in [0, K-1+L): the initial state (zeros when absent), then x.
__device__ __forceinline__ float Xpad(const CausalConv1dParams& p, int64_t b, int64_t d,
                                      int64_t j) {
  const int64_t k1 = p.width - 1;
  if (j >= k1)
    return LoadF32(p.x.data, p.x.dtype, b * p.x.stride_batch + d * p.x.stride_dim + j - k1);
  if (!p.initial_states.data) return 0.0f;
  const SeqView& h = p.initial_states;
  return LoadF32(h.data, h.dtype, b * h.stride_batch + d * h.stride_dim + j);
}

// Whether xpad[b, :, j] (an initial value for j < K-1) is in the sequence of position l.
__device__ __forceinline__ bool SameSequence(const CausalConv1dParams& p, int64_t b, int64_t j,
                                             int64_t l) {
  if (!p.seq_idx.data) return true;
  const int64_t input = j - (p.width - 1);
  const int32_t* row = p.seq_idx.data + b * p.seq_idx.stride_batch;
  return row[(input < 0 ? 0 : input) * p.seq_idx.stride_seq] == row[l * p.seq_idx.stride_seq];
}

__device__ __forceinline__ float PreActivation(const CausalConv1dParams& p, int64_t b, int64_t d,
                                               int64_t l) {
  float acc = p.bias.data ? p.bias.data[d * p.bias.stride_dim] : 0.0f;
  const float* w = p.weight.data + d * p.weight.stride_dim;
  for (int k = 0; k < p.width; ++k) {
    if (SameSequence(p, b, l + k, l)) acc += w[k] * Xpad(p, b, d, l + k);
  }
  return acc;
}

// final_states[i] = xpad[L + i] (0 outside the last sequence), written once per row by the
// first K - 1 threads of the row's first tile.
__device__ __forceinline__ void WriteFinalState(const CausalConv1dParams& p, int64_t b, int64_t d) {
  if (!p.final_states.data || blockIdx.y != 0 || threadIdx.x >= p.width - 1) return;
  const SeqView& f = p.final_states;
  const int64_t j = p.seqlen + threadIdx.x;
  StoreF32(f.data, f.dtype, b * f.stride_batch + d * f.stride_dim + threadIdx.x,
           SameSequence(p, b, j, p.seqlen - 1) ? Xpad(p, b, d, j) : 0.0f);
}

// g[j] = dout[j] act'(pre[j]) for j in [0, L); 0 outside.
__device__ __forceinline__ float OutGrad(const CausalConv1dBwdParams& p, int64_t b, int64_t d,
                                         int64_t j) {
  if (j < 0 || j >= p.seqlen) return 0.0f;
  const float dout =
      LoadF32(p.dout.data, p.dout.dtype, b * p.dout.stride_batch + d * p.dout.stride_dim + j);
  return p.silu ? dout * SiluGrad(PreActivation(p, b, d, j)) : dout;
}

// dxpad[j] for j in [0, K-1+L).
__device__ __forceinline__ float PaddedGrad(const CausalConv1dBwdParams& p, int64_t b, int64_t d,
                                            int64_t j) {
  const float* w = p.weight.data + d * p.weight.stride_dim;
  float acc = 0.0f;
  for (int k = 0; k < p.width; ++k) {
    if (j - k < p.seqlen && SameSequence(p, b, j, j - k < 0 ? 0 : j - k))
      acc += w[k] * OutGrad(p, b, d, j - k);
  }
  if (j >= p.seqlen && p.dfinal_states.data && SameSequence(p, b, j, p.seqlen - 1)) {
    const SeqView& f = p.dfinal_states;
    acc += LoadF32(f.data, f.dtype, b * f.stride_batch + d * f.stride_dim + j - p.seqlen);
  }
  return acc;
}

}  // namespace ssmkit::cuda

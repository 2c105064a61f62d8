// The "unrolled" variant of causal conv1d on CUDA (conv1d_vector.cu): 16-byte loads and stores
// along L, several vectors in flight per thread, the width a compile-time constant. Called by
// conv1d.cu's dispatch when picked (SSMKIT_CUDA_CONV1D, SSMKIT_CUDA_CONV1D_BWD:
// cuda/variant.hpp; the default) and when it applies.
#pragma once

#include <cstdint>

#include "params/conv1d_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// No seq_idx, and x, out 16-byte aligned rows of one dtype.
bool Conv1dForwardVectorApplies(const CausalConv1dParams& p);
Status Conv1dForwardVector(const CausalConv1dParams& p);

// The forward's conditions, and dout / dx (when wanted) aligned rows of x's dtype.
bool Conv1dBackwardVectorApplies(const CausalConv1dBwdParams& p);
// Tiles per row of the backward's grid: its partial sums of dweight and dbias are
// (B * tiles, D, K) and (B * tiles, D), part b * tiles + tile, summed by the caller.
int64_t Conv1dBackwardVectorTiles(const CausalConv1dBwdParams& p);
// dx and dinitial_states; partial_w / partial_b when not null.
Status Conv1dBackwardVector(const CausalConv1dBwdParams& p, float* partial_w, float* partial_b);

}  // namespace ssmkit::cuda

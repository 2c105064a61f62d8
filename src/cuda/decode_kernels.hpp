// The engine's own small kernels around the ops of a decode step on the GPU
// (src/model/gpu_decoder.cpp): the embedding rows of the step's tokens in, the greedy tokens out.
// Plain C++ entry points; built from src/cuda/decode_kernels.cu, or answering Unsupported from
// src/cuda/stubs.cpp without the CUDA backend. Both launch on the calling thread's stream
// (ssmkit::SetCudaStream) and read their token ids from device memory, so a captured graph
// replays them as they are.
// Dimension legend: n rows (sequences), d d_model, V the vocabulary (row width of the logits).
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::cuda {

// out[r, :] = table[ids[r], :] for r < rows; a row whose id is outside [0, vocab) is zeroed
// (the host checks the ids first: this only keeps a bad id from reading out of bounds).
struct EmbedParams {
  const void* table = nullptr;  // (vocab, d), row-major contiguous
  DType table_dtype = DType::kBF16;
  int64_t vocab = 0, d = 0;
  const int32_t* ids = nullptr;  // (rows), device memory
  int64_t rows = 0;
  void* out = nullptr;  // (rows, d), row stride out_stride
  DType out_dtype = DType::kBF16;
  int64_t out_stride = 0;
};
Status EmbedRows(const EmbedParams& p);

// out[r] = the index of the largest of logits[r, 0:cols], the first on ties; NaN is never chosen
// and an all-NaN row gives 0: the CPU Sampler's greedy choice (include/ssmkit/sampler.hpp).
struct ArgmaxParams {
  const float* logits = nullptr;  // (rows, >= cols), row stride `stride`
  int64_t rows = 0, cols = 0, stride = 0;
  int32_t* out = nullptr;  // (rows), device memory
};
Status ArgmaxRows(const ArgmaxParams& p);

}  // namespace ssmkit::cuda

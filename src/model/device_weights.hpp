// A model's decode weights on the GPU, uploaded once per model and shared by its CUDA sessions
// (model/gpu_decoder.cpp). The matrices LinearForward reads (embedding, LM head, in_proj,
// x_proj, dt_proj, out_proj) go up as bf16: the GPU's projections are cuBLAS GEMMs of 16-bit
// inputs, and bf16 is the only 16-bit dtype the decode ops take their activations in (f32, f16
// and quantized checkpoints are rounded to it). The small tensors the ops read in f32 (norms,
// conv weights and biases, A, D, dt_bias, projection biases) go up as they are. One device
// allocation, each tensor 256-byte aligned; a tied LM head shares the embedding's copy.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/device_runtime.hpp"
#include "model/weights.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::model {

class DeviceWeights {
 public:
  // The tensors of the embedding, the final norm, the LM head and the Mamba-1 / Mamba-2 blocks
  // (a hybrid's other blocks are the caller's to refuse: their tensors stay host views).
  static Status Upload(const ModelWeights& host, std::unique_ptr<DeviceWeights>* out);

  // The same struct as the host's, its views device pointers (Device::kCuda); A_log (training
  // only) is left out.
  const ModelWeights& weights() const { return weights_; }
  int64_t bytes() const { return memory_.bytes(); }

 private:
  cuda::DeviceMemory memory_;
  ModelWeights weights_;
};

}  // namespace ssmkit::model

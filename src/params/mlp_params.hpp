// The resolved, checked arguments of the MLP and MoE ops (include/ssmkit/mlp.hpp), handed to a
// backend. Dimension legend: T rows, d model width, F hidden width, E experts, k per token.
// A row-strided (rows, cols) f32 matrix is a pointer and its row stride (the columns are
// contiguous); a null pointer marks an absent optional tensor.
#pragma once

#include <cstdint>
#include <span>

#include "ssmkit/mlp.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// One MLP's weights as the kernels read them (each row-major contiguous).
struct MlpWeightParams {
  int64_t hidden = 0;          // F
  const void* gate = nullptr;  // (F, d); null: ungated
  const void* up = nullptr;    // (F, d)
  const void* down = nullptr;  // (d, F)
  DType gate_dtype = DType::kF32, up_dtype = DType::kF32, down_dtype = DType::kF32;
  const float* gate_bias = nullptr;  // (F)
  const float* up_bias = nullptr;    // (F)
  const float* down_bias = nullptr;  // (d)

  bool gated() const { return gate != nullptr; }
};

// The ops layer has checked `w` already: shapes, dtypes, contiguity.
inline MlpWeightParams WeightParamsOf(const MlpWeights& w) {
  MlpWeightParams p;
  p.hidden = w.up.shape[0];
  p.gate = w.gate.data;
  p.up = w.up.data;
  p.down = w.down.data;
  p.gate_dtype = w.gate.dtype;
  p.up_dtype = w.up.dtype;
  p.down_dtype = w.down.dtype;
  p.gate_bias = static_cast<const float*>(w.gate_bias.data);
  p.up_bias = static_cast<const float*>(w.up_bias.data);
  p.down_bias = static_cast<const float*>(w.down_bias.data);
  return p;
}

struct MlpWeightGradParams {  // f32, null: not wanted
  float* dgate = nullptr;     // (F, d)
  float* dup = nullptr;       // (F, d)
  float* ddown = nullptr;     // (d, F)
  float* dgate_bias = nullptr;
  float* dup_bias = nullptr;
  float* ddown_bias = nullptr;
};

inline MlpWeightGradParams GradParamsOf(const MlpWeightGrads& g) {
  return {static_cast<float*>(g.dgate.data),    static_cast<float*>(g.dup.data),
          static_cast<float*>(g.ddown.data),    static_cast<float*>(g.dgate_bias.data),
          static_cast<float*>(g.dup_bias.data), static_cast<float*>(g.ddown_bias.data)};
}

struct MlpParams {
  int64_t rows = 0;   // T
  int64_t model = 0;  // d
  MlpOptions options;
  MlpWeightParams weights;
  const float* x = nullptr;  // (T, d)
  int64_t x_stride = 0;
  const float* gate_add = nullptr;  // (T, F)
  int64_t gate_add_stride = 0;
  const float* up_add = nullptr;  // (T, F)
  int64_t up_add_stride = 0;
  float* out = nullptr;  // (T, d); forward only
  int64_t out_stride = 0;
};

struct MlpBackwardParams : MlpParams {
  const float* dout = nullptr;  // (T, d)
  int64_t dout_stride = 0;
  float* dx = nullptr;  // (T, d)
  int64_t dx_stride = 0;
  float* dgate_add = nullptr;  // (T, F)
  int64_t dgate_add_stride = 0;
  float* dup_add = nullptr;  // (T, F)
  int64_t dup_add_stride = 0;
  MlpWeightGradParams grads;
};

struct MoeParams {
  int64_t rows = 0;     // T
  int64_t model = 0;    // d
  int64_t experts = 0;  // E
  MoeOptions options;
  const float* x = nullptr;  // (T, d)
  int64_t x_stride = 0;
  // What the routed experts read: expert_x (T, d_x) when given, else x (d_x = d).
  int64_t expert_width = 0;  // d_x
  const float* expert_x = nullptr;
  int64_t expert_x_stride = 0;
  const void* router_weight = nullptr;  // (E, d)
  DType router_dtype = DType::kF32;
  const float* router_bias = nullptr;          // (E)
  const float* score_bias = nullptr;           // (E): kSigmoidGroupTopK's correction bias
  std::span<const MlpWeights> expert_weights;  // E, checked
  bool has_shared = false;
  MlpWeights shared_weights;
  // Forward outputs.
  float* out = nullptr;  // (T, d_x)
  int64_t out_stride = 0;
  float* router_logits = nullptr;  // (T, E)
  int64_t router_logits_stride = 0;
  int64_t* expert_counts = nullptr;  // (E)
  int32_t* top_k_index = nullptr;    // (T, k)
  int64_t top_k_index_stride = 0;
  float* top_k_weight = nullptr;  // (T, k)
  int64_t top_k_weight_stride = 0;
};

struct MoeBackwardParams : MoeParams {
  const float* dout = nullptr;  // (T, d)
  int64_t dout_stride = 0;
  const float* drouter_logits = nullptr;  // (T, E)
  int64_t drouter_logits_stride = 0;
  float* dx = nullptr;  // (T, d)
  int64_t dx_stride = 0;
  float* drouter_weight = nullptr;               // (E, d)
  float* drouter_bias = nullptr;                 // (E)
  std::span<const MlpWeightGrads> expert_grads;  // empty or E, checked
  MlpWeightGrads shared_grads;
};

}  // namespace ssmkit

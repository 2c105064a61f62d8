// The feed-forward blocks of hybrid models: gated and ungated MLPs, and a mixture of experts
// (MoE) built from them, forward and backward. docs/ops/mlp.md has the details.
//
// Dimension legend: T rows (tokens: batch * length), d model width, F hidden width of an MLP
// (intermediate_size), E routed experts, k experts per token (top_k).
//
// MLP, as transformers' modeling files write it (Bamba, Jamba, Falcon-H1, GraniteMoeHybrid's
// shared_mlp, Zamba2, Nemotron-H):
//
//   gated:   a[t,f] = (gate(x)[t,f] + gate_add[t,f]) * gate_multiplier
//            u[t,f] =  up(x)[t,f]   + up_add[t,f]
//            h[t,f] = act(a[t,f]) * u[t,f]
//   ungated: h[t,f] = act(up(x)[t,f] + up_add[t,f])
//   out[t,i] = (down(h)[t,i]) * down_multiplier
//
// where proj(x) = x W^T + bias (F.linear), every bias optional, gate_add / up_add optional
// (absent = 0; Zamba2 adds its LoRA adapters' output there). gate and up are two (F, d) views:
// checkpoints that store them fused (GraniteMoeHybrid's input_linear (2F, d) chunked
// [gate, up]; Zamba2's gate_up_proj) give two contiguous row ranges of one matrix
// (SplitGateUp below), so nothing is copied.
//
// MoE (JambaSparseMoeBlock, GraniteMoeHybridMoE, NemotronHMoE):
//
//   logits[t,:] = x[t,:] W_r^T + router_bias                      (T, E), f32
//   kSoftmaxTopK (Jamba):  p = softmax(logits[t,:]) over all E; S_t = top-k of p;
//                          w[t,e] = p[e] for e in S_t (divided by their sum when
//                          normalize_top_k: Mixtral's / Qwen's norm_topk_prob)
//   kTopKSoftmax (Granite): S_t = top-k of logits[t,:]; w[t,:] = softmax over those k logits
//   kSigmoidGroupTopK (Nemotron-H's NemotronHTopkRouter, DeepSeek-V3's):
//                          s = sigmoid(logits[t,:]); c = s + score_correction_bias;
//                          the E experts in `groups` groups of E/groups consecutive ones, each
//                          group scored by the sum of its two largest c; the top_k_groups
//                          best groups kept; S_t = top-k of c among the kept groups' experts;
//                          w[t,e] = s[e] (not c) for e in S_t, divided by (their sum + 1e-20)
//                          when normalize_top_k, times routed_scaling. The correction bias
//                          only selects: no gradient reaches it (a buffer in transformers).
//   out[t,:] = sum_{e in S_t, ascending e} w[t,e] * expert_e(x[t,:])  +  shared(x[t,:])
//
// With expert_x (Nemotron-H's moe_latent_size: the experts run on fc1_latent_proj(x), a
// narrower latent width d_x, while the router reads x): expert_e(expert_x[t,:]) in place of
// expert_e(x[t,:]), out (T, d_x) the routed sum alone, and no shared expert (it reads x and
// writes width d: the caller adds it after projecting the sum back, fc2_latent_proj).
//
// each expert (and the optional shared expert) an MLP as above. Top-k ties (of experts, and of
// groups) go to the lower index, NaN ranks above every number (torch.topk ranks NaN first too, and
// leaves the order of exact ties unspecified). Tokens are grouped by expert with a counting sort
// (stable: token order within an expert), so each expert's rows go through one matrix product, and
// scattered back in a fixed order: deterministic.
//
// Storage: x, out and every activation-sized tensor f32, rows possibly strided, the last
// dimension contiguous; weights f32 | bf16 | f16 in the checkpoint's (out, in) layout,
// row-major contiguous, widened to f32 as they are read (as LinearForward does); biases f32.
// The forwards also take quantized weights (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K,
// rows of whole blocks: a GGUF file's), multiplied as LinearForward multiplies them; the backwards
// do not. Accumulation f32. Gradients of weights and biases are f32 whatever the weight's dtype.
//
// Workspace: internal. Each calling thread keeps its own buffers (thread_local), grown before
// any parallel region and reused by the next call: once a call of a given shape has run, a
// call of that shape or smaller allocates nothing (the engine's decode step after warm-up).
// Prefill is processed in chunks of rows, so the buffers are bounded whatever T is: ~8 MB for
// an MLP, up to ~64 MB for a MoE (docs/ops/mlp.md). A failed allocation returns kOutOfMemory.
//
// Threads: hidden features (F) are split over threads for the gate/up products and their
// activation, model features (d) for the down product; each output element is computed by one
// thread in a fixed order, and sums across threads (dx in the backward) go through per-block
// partials added in block order: the same inputs and thread count give the same bits.
//
// CPU only: CUDA tensors give kUnsupported.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// act(), by the name transformers' ACT2FN gives it in a config's hidden_act / mlp_hidden_act.
enum class MlpActivation : uint8_t {
  kSilu = 0,      // x sigmoid(x): "silu", "swish" (SwiGLU when gated)
  kGeluErf = 1,   // x/2 (1 + erf(x / sqrt 2)): "gelu"
  kGeluTanh = 2,  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): "gelu_new",
                  // "gelu_pytorch_tanh", "gelu_fast"
  kRelu = 3,      // max(x, 0): "relu"
  kRelu2 = 4,     // max(x, 0)^2: "relu2" (Nemotron-H)
};

// Maps a transformers activation name to MlpActivation; an unknown name is kInvalidArgument
// naming it and listing the supported ones.
Status MlpActivationFromName(std::string_view name, MlpActivation* activation);
const char* MlpActivationName(MlpActivation activation);  // "silu", "gelu", ...

// The weights of one MLP. gate absent: the ungated form (then gate_bias must be absent too).
struct MlpWeights {
  Tensor gate;       // (F, d) f32 | bf16 | f16 (or quantized: above), row-major; absent: ungated
  Tensor up;         // (F, d) f32 | bf16 | f16 (or quantized), row-major contiguous
  Tensor down;       // (d, F) f32 | bf16 | f16 (or quantized), row-major contiguous
  Tensor gate_bias;  // optional (F) f32
  Tensor up_bias;    // optional (F) f32
  Tensor down_bias;  // optional (d) f32
};

struct MlpOptions {
  MlpActivation activation = MlpActivation::kSilu;
  float gate_multiplier = 1.0f;  // Falcon-H1's mlp_multipliers[0]; must be 1 when ungated
  float down_multiplier = 1.0f;  // Falcon-H1's mlp_multipliers[1]; finite, like the above
};

struct MlpInputs {
  Tensor x;  // (T, d) f32, row stride >= d
  MlpWeights weights;
  Tensor gate_add;  // optional (T, F) f32, row stride >= F: added to gate(x) (gated only)
  Tensor up_add;    // optional (T, F) f32, row stride >= F: added to up(x)
};

// out: (T, d) f32, row stride >= d; must not overlap x, gate_add or up_add.
Status MlpForward(const MlpInputs& inputs, const Tensor& out, const MlpOptions& options = {});

// Gradients of an MLP's weights: each f32 with its weight's shape, overwritten (not
// accumulated), optional (absent = not wanted); one for an absent weight must be absent.
struct MlpWeightGrads {
  Tensor dgate, dup, ddown;
  Tensor dgate_bias, dup_bias, ddown_bias;
};

struct MlpGrads {
  Tensor dx;         // (T, d) f32
  Tensor dgate_add;  // (T, F) f32; absent when gate_add is
  Tensor dup_add;    // (T, F) f32; absent when up_add is
  MlpWeightGrads weights;
};

// dout: (T, d) f32. Recomputes the forward's hidden activations from the inputs (nothing is
// saved between the calls). Gradient outputs must not overlap each other or the inputs.
Status MlpBackward(const MlpInputs& inputs, const Tensor& dout, const MlpGrads& grads,
                   const MlpOptions& options = {});

// ------------------------------------------------------------------ mixture of experts

enum class MoeRouting : uint8_t {
  kSoftmaxTopK = 0,       // softmax over all E, then top-k of the probabilities (Jamba)
  kTopKSoftmax = 1,       // top-k of the logits, then softmax over those k (GraniteMoe[Hybrid])
  kSigmoidGroupTopK = 2,  // sigmoid, bias-corrected, group-limited top-k (Nemotron-H; above)
};

struct MoeOptions {
  int64_t top_k = 1;  // k, 1 <= k <= E
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  // kSoftmaxTopK: w /= sum of the k selected probabilities; kSigmoidGroupTopK: w /= (sum of
  // the k selected sigmoids + 1e-20). Not with kTopKSoftmax.
  bool normalize_top_k = false;
  // kSigmoidGroupTopK only (the defaults for the others):
  int64_t groups = 1;           // n_group: divides E, with E / groups >= 2
  int64_t top_k_groups = 1;     // topk_group: 1 <= top_k_groups <= groups, and
                                // k <= top_k_groups * E / groups
  float routed_scaling = 1.0f;  // routed_scaling_factor: w *= it, finite
  MlpOptions mlp;               // activation and multipliers of every expert, shared one too
};

struct MoeInputs {
  Tensor x;              // (T, d) f32, row stride >= d
  Tensor router_weight;  // (E, d) f32 | bf16 | f16, row-major contiguous
  Tensor router_bias;    // optional (E) f32
  // E routed experts, each an MLP of the same form and shapes (F, d), or (F, d_x) with
  // expert_x; biases optional but present or absent in all alike. Per-expert views fit both
  // checkpoint layouts: separate tensors per expert, or slices of 3-D (E, 2F, d) / (E, d, F)
  // tensors (SplitFusedExperts).
  std::span<const MlpWeights> experts;
  MlpWeights shared_expert;  // optional (all absent = none; absent with expert_x), width F_s
  // (E) f32: kSigmoidGroupTopK's e_score_correction_bias, required there and absent otherwise
  Tensor score_correction_bias;
  // optional (T, d_x) f32, row stride >= d_x: the rows the routed experts read instead of x
  // (above); forward only.
  Tensor expert_x;
};

struct MoeOutputs {
  Tensor out;            // (T, d) f32 ((T, d_x) with expert_x), row stride >= its width;
                         // must not overlap x or expert_x
  Tensor router_logits;  // optional (T, E) f32: what transformers returns for the aux loss
  Tensor expert_counts;  // optional (E) i64: tokens routed to each expert
  Tensor top_k_index;    // optional (T, k) i32: the selected experts, best first
  Tensor top_k_weight;   // optional (T, k) f32: their routing weights w
};

Status MoeForward(const MoeInputs& inputs, const MoeOutputs& outputs, const MoeOptions& options);

struct MoeGrads {
  Tensor dx;              // (T, d) f32
  Tensor drouter_weight;  // (E, d) f32
  Tensor drouter_bias;    // (E) f32; absent when router_bias is
  // Empty (no expert gradients wanted) or E entries, each as MlpWeightGrads. An expert that
  // received no token gets zeros.
  std::span<const MlpWeightGrads> experts;
  MlpWeightGrads shared_expert;
};

// dout: (T, d) f32. drouter_logits: optional (T, E) f32, the gradient reaching router_logits
// from an auxiliary loss (absent = 0). The routing is recomputed from the inputs, bitwise as in
// the forward for the same thread count. The gradient reaches the router through the routing
// weights w; the top-k selection itself is piecewise constant and passes none (nor does it in
// torch), so score_correction_bias has no gradient. expert_x is not taken here (kUnsupported):
// nothing trains a latent MoE yet.
Status MoeBackward(const MoeInputs& inputs, const Tensor& dout, const Tensor& drouter_logits,
                   const MoeGrads& grads, const MoeOptions& options);

// ------------------------------------------------------------------ views into fused layouts

// A fused (2F, d) gate/up matrix, chunked [gate, up] (GraniteMoeHybrid's
// shared_mlp.input_linear, Zamba2's gate_up_proj): gate = rows [0, F), up = rows [F, 2F).
// Also splits a fused (2F) bias. No copy.
Status SplitGateUp(const Tensor& fused, Tensor* gate, Tensor* up);

// 3-D expert tensors (GraniteMoe's input_linear / output_linear, transformers 5's
// experts.gate_up_proj / experts.down_proj): gate_up (E, 2F, d) chunked [gate, up], down
// (E, d, F), both row-major contiguous, float or quantized (rows of whole blocks). Fills
// experts[e].gate, .up, .down (biases untouched); experts.size() must be E. No copy.
Status SplitFusedExperts(const Tensor& gate_up, const Tensor& down, std::span<MlpWeights> experts);
// The same with gate and up stacked apart (GGUF files' ffn_gate_exps / ffn_up_exps): gate and
// up (E, F, d), down (E, d, F). gate absent: ungated experts (Nemotron-H's experts.up_proj /
// experts.down_proj), their .gate left absent.
Status SplitStackedExperts(const Tensor& gate, const Tensor& up, const Tensor& down,
                           std::span<MlpWeights> experts);

}  // namespace ssmkit

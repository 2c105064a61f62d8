// The inference engine: Mamba-1 and Mamba-2 language models loaded from Hugging Face checkpoints
// (MambaForCausalLM, Mamba2ForCausalLM) or the original state-spaces format, a prefill of a
// batch of prompts and token-by-token decode with per-layer conv and SSM state caches.
//
// Dimension legend: B batch, L prompt length, d d_model, V vocab (padded), D d_inner,
// N state size, K conv width, R dt_rank (Mamba-1), H heads, P head dim, G groups (Mamba-2).
//
// Every layer: residual += mixer output (f32); normed = RMSNorm(residual); mixer(normed).
//   Mamba-1 mixer: in_proj -> (x, z); x = silu(conv1d(x)); (dt_in, B, C) = x_proj(x);
//     dt = dt_proj(dt_in); y = selective_scan(x, dt, A = -exp(A_log), B, C, D, z, softplus);
//     out_proj(y)
//   Mamba-2 mixer: in_proj -> (z, xBC, dt); xBC = silu(conv1d(xBC)); (x, B, C) = xBC;
//     y = ssd(x, dt, A = -exp(A_log), B, C, D, softplus, dt_limit);
//     y = rmsnorm_gated(y, z, group size D / G, gate before the norm); out_proj(y)
// then RMSNorm(norm_f) and the LM head. Activations are f32; weights stay in the checkpoint's
// dtype (f32, bf16, f16), memory-mapped, and are widened as they are read. docs/model.md has
// the formats, the checks and the deviations from transformers and mamba_ssm.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

enum class ModelArch : int { kMamba1 = 1, kMamba2 = 2 };
const char* ModelArchName(ModelArch arch);  // "mamba1" | "mamba2"

struct ModelConfig {
  ModelArch arch = ModelArch::kMamba1;
  std::string format;   // "hf" or "state-spaces" (set by the loader)
  int64_t d_model = 0;  // d
  int64_t n_layer = 0;
  int64_t vocab_size = 0;         // V: rows of the embedding and the LM head (after padding)
  int64_t config_vocab_size = 0;  // the vocab size the config states (<= V; sampled tokens)
  int64_t d_inner = 0;            // D = expand * d_model
  int64_t d_state = 0;            // N
  int64_t d_conv = 4;             // K
  bool conv_bias = true;
  bool proj_bias = false;      // in_proj and out_proj carry a bias
  float norm_eps = 1e-5f;      // every RMSNorm
  bool tie_embeddings = true;  // the LM head is the embedding
  // Mamba-1
  int64_t dt_rank = 0;  // R
  // Mamba-2
  int64_t nheads = 0;   // H
  int64_t headdim = 0;  // P (H * P = D)
  int64_t ngroups = 1;  // G
  int64_t chunk_size = 256;
  bool d_per_channel = false;  // D has D = H * P entries (mamba_ssm's D_has_hdim) instead of H
  float dt_min = 0.0f, dt_max = std::numeric_limits<float>::infinity();  // time_step_limit
  // Special tokens (-1: none).
  int64_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;

  int64_t conv_dim() const;     // Mamba-1: D; Mamba-2: D + 2 G N
  int64_t in_proj_dim() const;  // Mamba-1: 2 D; Mamba-2: 2 D + 2 G N + H
  // Checks that the sizes are positive and consistent (H * P = D, G divides H, ...).
  Status Validate() const;
};

// The directory of the built-in model (models/default, docs/default_model.md), the first of
// these that holds config.json and model.safetensors:
//   1. $SSMKIT_DEFAULT_MODEL (when set, only it: a wrong path is an error, not a fallback);
//   2. beside the binary this library's code was loaded from (libssmkit.so, the Python
//      extension, or an executable linking the static library), then beside the running
//      executable: <dir>/../../models/default (build/<preset>/ of a clone),
//      <dir>/../share/ssmkit/models/default (an install prefix), <dir>/models/default (the
//      Python package);
//   3. the source tree the library was built from.
// The error lists every place looked at.
Status DefaultModelDir(std::string* dir);

// The shapes of docs/targets.md ("m1-130m", "m2-130m"), for benchmarks with random weights.
Status PresetConfig(const std::string& name, ModelConfig* config);

class Model {
 public:
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // A directory with config.json and model.safetensors (or model.safetensors.index.json and
  // shards). The weights are memory-mapped; every expected tensor is checked for presence,
  // dtype and shape, and tensors the model does not use are an error.
  static Status Load(const std::string& dir, std::unique_ptr<Model>* model);
  // Random weights (uniform, std 0.02; A_log, D, dt_bias and the norms as a fresh model's):
  // the benchmark's models. weight_dtype: f32, bf16 or f16 for the projections and embedding.
  static Status Random(const ModelConfig& config, DType weight_dtype, uint64_t seed,
                       std::unique_ptr<Model>* model);

  const ModelConfig& config() const;
  int64_t parameter_count() const;  // every parameter once (a tied LM head counted once)
  // Bytes of weights one decode step reads: every matrix once, the LM head included.
  int64_t decode_weight_bytes() const;
  // "f32", "bf16", "f16", or "mixed": the dtype of the projection matrices.
  std::string weight_dtype_name() const;
  std::string source() const;  // the files it was loaded from, or "random"

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The state of up to max_batch sequences: per layer a conv state (B, conv_dim, K - 1) and an
// SSM state ((B, D, N) or (B, H, P, N)), plus the workspaces. Decode allocates nothing once
// warm (after its first call); Prefill grows its workspace to the largest batch * length seen.
// A Session reads its Model, which must outlive it. Not thread-safe: one caller at a time.
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  static Status Create(const Model& model, int64_t max_batch, std::unique_ptr<Session>* session);

  // Runs B = prompts.size() prompts (1 <= B <= max_batch, each at least one token; lengths
  // may differ) from a fresh state. logits: (B, V) f32, each prompt's last position.
  // all_logits: optional (B, Lmax, V) f32, position l of prompt b at [b, l] for l < its
  // length (rows past a prompt's end are left as they were). Shorter prompts are left-padded
  // internally and masked so that padding changes nothing.
  Status Prefill(const std::vector<std::vector<int32_t>>& prompts, std::span<float> logits,
                 std::span<float> all_logits = {});

  // One token for each of the B sequences of the last Prefill: logits (B, V) f32.
  Status Decode(std::span<const int32_t> tokens, std::span<float> logits);

  int64_t batch() const;  // B of the last Prefill (0 before any)
  int64_t max_batch() const;
  int64_t vocab_size() const;         // V, the width of a row of logits
  int64_t config_vocab_size() const;  // the tokens that may be sampled: the first ones of a row

  struct Impl;

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ssmkit

// The inference engine: language models made of Mamba-1 / Mamba-2 mixers, attention, MLPs and
// mixtures of experts, loaded from Hugging Face checkpoints (MambaForCausalLM,
// Mamba2ForCausalLM, GraniteMoeHybridForCausalLM, BambaForCausalLM, NemotronHForCausalLM,
// FalconH1ForCausalLM, JambaForCausalLM, Zamba2ForCausalLM) or the original state-spaces format;
// a Session runs prefill and decode over slots of per-sequence state (conv and SSM states, a
// paged KV cache).
//
// Dimension legend: B batch, L prompt length, d d_model, V vocab (padded), D d_inner,
// N state size, K conv width, R dt_rank (Mamba-1), H heads, P head dim, G groups (Mamba-2),
// Ha / Hk attention query / key-value heads, E attention head dim, F MLP hidden width.
//
// A model is a list of blocks (ModelConfig::blocks), each reading the residual stream:
//   residual += multiplier * block(RMSNorm(residual))
// (Zamba2's shared transformer block instead feeds the next block's input: docs/model.md),
// then RMSNorm(norm_f) and the LM head.
//   Mamba-1 mixer: in_proj -> (x, z); x = silu(conv1d(x)); (dt_in, B, C) = x_proj(x);
//     dt = dt_proj(dt_in); y = selective_scan(x, dt, A = -exp(A_log), B, C, D, z, softplus);
//     out_proj(y)
//   Mamba-2 mixer: in_proj -> (z, xBC, dt); xBC = silu(conv1d(xBC)); (x, B, C) = xBC;
//     y = ssd(x, dt, A = -exp(A_log), B, C, D, softplus, dt_limit);
//     y = rmsnorm_gated(y, z, group size D / G, gate before the norm); out_proj(y)
//   attention: q, k, v projections, rotary embeddings (or none), causal GQA softmax attention
//     over the sequence's cached keys and values, o_proj
//   MLP / MoE: include/ssmkit/mlp.hpp
// Activations are f32; weights stay in the checkpoint's dtype (f32, bf16, f16), memory-mapped,
// and are widened as they are read. docs/model.md has the families, their config keys, the
// checks and the deviations from transformers and mamba_ssm.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit {

// The SSM mixer kind of the model's Mamba blocks (Jamba's are Mamba-1, the other hybrids'
// Mamba-2).
enum class ModelArch : int { kMamba1 = 1, kMamba2 = 2 };
const char* ModelArchName(ModelArch arch);  // "mamba1" | "mamba2"

// What a block computes from the residual stream (docs/model.md, "Blocks").
enum class BlockKind : int {
  kMamba1 = 1,     // RMSNorm -> Mamba-1 mixer
  kMamba2 = 2,     // RMSNorm -> Mamba-2 mixer
  kAttention = 3,  // RMSNorm -> attention
  kMlp = 4,        // RMSNorm -> MLP
  kMoe = 5,        // RMSNorm -> mixture of experts (+ a shared expert)
  // Falcon-H1: RMSNorm -> attention and Mamba-2 side by side on the same input, outputs summed.
  kParallelHybrid = 6,
  // Zamba2: RMSNorm(concat(residual, embedding)) -> attention -> RMSNorm -> MLP -> linear, with
  // the weights shared between layers and per-layer adapters; its output is added to the next
  // block's input (a Mamba-2 block), not to the residual stream.
  kSharedTransformer = 7,
};
const char* BlockKindName(BlockKind kind);  // "mamba1", "mamba2", "attention", ...

struct BlockSpec {
  BlockKind kind = BlockKind::kMamba2;
  int64_t layer = 0;  // the checkpoint's layer it belongs to (a layer may hold two blocks)
  bool operator==(const BlockSpec&) const = default;
};

// Attention blocks (all alike within a model).
struct AttentionConfig {
  int64_t num_heads = 0;     // Ha
  int64_t num_kv_heads = 0;  // Hk, dividing Ha
  int64_t head_dim = 0;      // E
  int64_t input_dim = 0;     // the width q, k and v read: d (Zamba2: 2 d); 0 means d
  bool qkv_bias = false;
  bool o_bias = false;
  float scale = 0.0f;      // on q . k; 0 means 1 / sqrt(E)
  int64_t rotary_dim = 0;  // R: the rotated dims of each head; 0: no position embedding
  double rope_theta = 10000.0;
  int64_t window = 0;  // sliding window (0: none)
};

// MLP blocks and the MLPs inside MoE blocks.
struct FeedForwardConfig {
  int64_t intermediate = 0;         // F of an MLP block
  std::string activation = "silu";  // transformers' hidden_act name (include/ssmkit/mlp.hpp)
  bool gated = true;                // act(gate(x)) * up(x); false: act(up(x))
  bool bias = false;                // biases on gate / up / down
  // MoE: E experts of width moe_intermediate, top_k per token, a shared expert of width
  // shared_intermediate (0: none).
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_intermediate = 0;
  // Nemotron-H's moe_latent_size (0: none): the routed experts run at this width d_x between a
  // projection of the block's input down to it (fc1_latent_proj) and of their sum back up
  // (fc2_latent_proj), both with biases when `bias`; the router and the shared expert read the
  // input itself.
  int64_t latent = 0;
  bool topk_then_softmax = false;  // Granite's routing; false: softmax then top-k (Jamba)
  bool normalize_top_k = false;    // not with Granite's routing: renormalise the k weights
  // Nemotron-H's routing (MoeRouting::kSigmoidGroupTopK, include/ssmkit/mlp.hpp): sigmoid
  // scores plus a correction bias, the best top_k_groups of `groups` expert groups kept, the
  // weights times routed_scaling.
  bool sigmoid_groups = false;
  int64_t groups = 1;
  int64_t top_k_groups = 1;
  float routed_scaling = 1.0f;
};

// Scalars the hybrid families multiply activations by (muP); 1 = absent.
struct Multipliers {
  float embedding = 1.0f;  // the embedding rows (Granite, Falcon-H1)
  float residual = 1.0f;   // every block's output before the residual add (Granite)
  float logits = 1.0f;     // the LM head's output (Falcon-H1's lm_head_multiplier, 1 /
                           // Granite's logits_scaling)
  float attention_in = 1.0f, attention_out = 1.0f;  // Falcon-H1's parallel block
  float ssm_in = 1.0f, ssm_out = 1.0f;
  float key = 1.0f;                        // Falcon-H1's key_multiplier
  float mlp_gate = 1.0f, mlp_down = 1.0f;  // Falcon-H1's mlp_multipliers
  float ssm_z = 1.0f, ssm_x = 1.0f, ssm_b = 1.0f, ssm_c = 1.0f, ssm_dt = 1.0f;  // ssm_multipliers
};

struct ModelConfig {
  ModelArch arch = ModelArch::kMamba1;
  // The Hugging Face model_type ("mamba", "mamba2", "granitemoehybrid", "bamba",
  // "nemotron_h", "falcon_h1", "jamba", "zamba2"); empty for a hand-made config.
  std::string family;
  std::string format;   // "hf", "state-spaces" or "gguf" (set by the loader)
  int64_t d_model = 0;  // d
  int64_t n_layer = 0;  // the checkpoint's layers
  // The blocks in order; empty means n_layer blocks of `arch`'s mixer (a pure Mamba model).
  std::vector<BlockSpec> blocks;
  int64_t vocab_size = 0;         // V: rows of the embedding and the LM head (after padding)
  int64_t config_vocab_size = 0;  // the vocab size the config states (<= V; sampled tokens)
  int64_t d_inner = 0;            // D = expand * d_model
  int64_t d_state = 0;            // N
  int64_t d_conv = 4;             // K
  bool conv_bias = true;
  bool proj_bias = false;      // in_proj and out_proj carry a bias
  int out_proj_bias = -1;      // -1: as proj_bias; 0 / 1: out_proj's own setting (Falcon-H1)
  float norm_eps = 1e-5f;      // every RMSNorm
  bool tie_embeddings = true;  // the LM head is the embedding
  // Mamba-1
  int64_t dt_rank = 0;       // R
  bool dt_bc_norms = false;  // RMSNorms on dt_in, B and C after x_proj (Jamba)
  // Mamba-2
  int64_t nheads = 0;   // H
  int64_t headdim = 0;  // P (H * P = D)
  int64_t ngroups = 1;  // G
  int64_t chunk_size = 256;
  bool d_per_channel = false;  // D has D = H * P entries (mamba_ssm's D_has_hdim) instead of H
  float dt_min = 0.0f, dt_max = std::numeric_limits<float>::infinity();  // time_step_limit
  // The gated RMSNorm of y (false: y * silu(z) without a norm, Falcon-H1's mamba_rms_norm off)
  // and where the gate goes (true: after the norm, Falcon-H1's mamba_norm_before_gate).
  bool gated_norm = true;
  bool norm_before_gate = false;
  float gated_norm_eps = 0.0f;  // 0: norm_eps (Zamba2 fixes 1e-5)
  // Hybrids
  AttentionConfig attention;
  FeedForwardConfig ffn;
  Multipliers multipliers;
  int64_t num_shared_blocks = 0;  // Zamba2's num_mem_blocks
  int64_t adapter_rank = 0;       // Zamba2: LoRA adapters on q/k/v (attention) and gate/up
  bool attention_adapters = false;
  int64_t max_position_embeddings = 0;  // 0: not stated
  // Special tokens (-1: none).
  int64_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;

  int64_t conv_dim() const;     // Mamba-1: D; Mamba-2: D + 2 G N
  int64_t in_proj_dim() const;  // Mamba-1: 2 D; Mamba-2: 2 D + 2 G N + H
  bool has_out_proj_bias() const { return out_proj_bias < 0 ? proj_bias : out_proj_bias != 0; }
  // `blocks`, or n_layer blocks of arch's mixer when it is empty.
  std::vector<BlockSpec> block_list() const;
  bool is_pure_mamba() const;  // no block other than arch's mixer
  // transformers' class for this config: "MambaForCausalLM", "GraniteMoeHybridForCausalLM", ...
  std::string hf_architecture() const;
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

// The shapes of docs/targets.md, for benchmarks with random weights: "m1-130m", "m2-130m", and
// the hybrids "granite-4.0-h-350m", "granite-4.0-h-1b", "falcon-h1-0.5b" (read from their
// published config.json keys by the family readers, as Model::Load would).
Status PresetConfig(const std::string& name, ModelConfig* config);
std::string PresetNames();  // the names PresetConfig knows, for messages

class Model {
 public:
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // A directory with config.json and model.safetensors (or model.safetensors.index.json and
  // shards), or a GGUF file of a Mamba-1, Mamba-2 or granitehybrid (Granite-4.0-H, Bamba)
  // model (llama.cpp's converter and llama-quantize output: f32, f16, bf16, q8_0, q4_0, q4_1,
  // q5_0, q5_1, q4_K, q5_K, q6_K; docs/gguf.md). The weights are memory-mapped, never copied
  // (quantized matrices are read as stored); every expected tensor is checked for presence,
  // dtype and shape, and tensors the model does not use are an error.
  static Status Load(const std::string& dir, std::unique_ptr<Model>* model);
  // A model over tensors the caller owns (a framework's parameters: PyTorch's
  // ssmkit.torch.accelerate): config_json is a config.json's text (any class Load reads),
  // tensors its checkpoint's names -> contiguous f32 / bf16 / f16 views, checked as Load checks
  // a checkpoint's. The matrices are used in place (the memory must outlive the model and its
  // sessions; in-place changes show); the vectors (norms, A, D, biases) are converted into the
  // model when it is made, so a caller that changes its parameters makes a new model.
  static Status FromTensors(const std::string& config_json,
                            const std::map<std::string, Tensor>& tensors,
                            std::unique_ptr<Model>* model);
  // Random weights (uniform, std 0.02; A_log, D, dt_bias and the norms as a fresh model's):
  // the benchmark's models. weight_dtype: f32, bf16, f16 or a quantized type (q8_0, q4_0,
  // q4_1, q5_0, q5_1, q4_k, q5_k, q6_k) for the projections and embedding; a matrix whose rows
  // are not whole blocks of it gets llama-quantize's fallback (q5_0, q5_1 or q8_0) or f16 (as
  // `ssmkit quantize` writes it).
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

struct SessionOptions {
  int64_t max_batch = 1;  // slots: the sequences a session holds at once
  // Attention models: the most tokens one slot may hold (0: the config's
  // max_position_embeddings, at most 32768, or 4096 when it states none). The KV cache's
  // address range is reserved for max_batch * max_context tokens; memory is committed only as
  // blocks are used.
  int64_t max_context = 0;
  int64_t kv_block_size = 32;  // tokens per KV block
  // Where the session runs. kCuda: the engine on the GPU (docs/cuda.md, "The engine on the
  // GPU"): pure Mamba-1 and Mamba-2 models (a hybrid is Unsupported, naming its first other
  // block), the weights uploaded to the device as bf16 once per model, every decode step a
  // replayed CUDA graph. A CUDA session serves Prefill (the prompt one token at a time, no
  // all_logits), Decode and DecodeGreedy; the slot calls are Unsupported there.
  Device device = Device::kCpu;
};

// The state of up to max_batch sequences, one per slot: per Mamba block a conv state
// (conv_dim, K - 1) and an SSM state ((D, N) or (H, P, N)); per attention block the keys and
// values of every token the slot holds, in blocks of kv_block_size tokens drawn from one pool
// (a free list; a slot's blocks are listed in a block table, so growing a sequence copies
// nothing); plus the workspaces. Decode allocates nothing once warm (after its first call at
// a batch size and, for attention, once a slot's current block is there); prefill grows its
// workspace to the largest chunk seen. A Session reads its Model, which must outlive it. Not
// thread-safe: one caller at a time.
//
// Two ways to drive it:
//   - Prefill(prompts) / Decode(tokens): sequences 0..B-1 from a fresh state (the C ABI, the
//     Python API, `ssmkit generate`);
//   - slots, for a server: PrefillSlots continues chosen slots by a chunk of tokens each
//     (chunked prefill), DecodeSlots advances any subset of slots by one token in one batched
//     step, ResetSlot empties a slot, SaveSlot / RestoreSlot copy a slot's whole state to / from
//     a caller-owned buffer (a prefix cache).
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  static Status Create(const Model& model, const SessionOptions& options,
                       std::unique_ptr<Session>* session);
  static Status Create(const Model& model, int64_t max_batch, std::unique_ptr<Session>* session);

  // Runs B = prompts.size() prompts (1 <= B <= max_batch, each at least one token; lengths
  // may differ) from a fresh state, in slots 0..B-1. logits: (B, V) f32, each prompt's last
  // position. all_logits: optional (B, Lmax, V) f32, position l of prompt b at [b, l] for
  // l < its length (rows past a prompt's end are left as they were).
  Status Prefill(const std::vector<std::vector<int32_t>>& prompts, std::span<float> logits,
                 std::span<float> all_logits = {});

  // One token for each of the B sequences of the last Prefill: logits (B, V) f32.
  Status Decode(std::span<const int32_t> tokens, std::span<float> logits);
  // The same step, returning each sequence's greedy next token instead of its logits: next (B),
  // the first largest of the first config_vocab_size logits (Sampler's greedy choice). On a CUDA
  // session the argmax runs on the GPU and only the B ids come back.
  Status DecodeGreedy(std::span<const int32_t> tokens, std::span<int32_t> next);

  // Continues slots[i] by chunks[i] (each at least one token; distinct slots in
  // [0, max_batch)), from whatever state the slot holds (empty after ResetSlot). logits and
  // all_logits as in Prefill, row i for slots[i].
  Status PrefillSlots(std::span<const int32_t> slots,
                      const std::vector<std::vector<int32_t>>& chunks, std::span<float> logits,
                      std::span<float> all_logits = {});
  // One token for each of the given distinct slots, in one batched step: logits (n, V) f32.
  // A slot must hold at least one token.
  Status DecodeSlots(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                     std::span<float> logits);
  // Empties a slot: its states return to zero and its KV blocks to the pool.
  Status ResetSlot(int64_t slot);
  // Tokens a slot holds (0 when empty).
  int64_t slot_length(int64_t slot) const;

  // A slot's whole state (SSM and conv states, the KV rows of its tokens, its length) as
  // bytes, for a prefix cache: SlotStateBytes gives the size SaveSlot writes, RestoreSlot reads
  // it back into any slot of a session of the same model (checked: a buffer from another
  // model, or a truncated one, is an error).
  Status SlotStateBytes(int64_t slot, int64_t* bytes) const;
  Status SaveSlot(int64_t slot, std::span<uint8_t> buffer, int64_t* bytes_written) const;
  Status RestoreSlot(int64_t slot, std::span<const uint8_t> buffer);

  int64_t batch() const;  // B of the last Prefill (0 before any)
  int64_t max_batch() const;
  int64_t max_context() const;        // tokens per slot (attention models; else unlimited, -1)
  int64_t vocab_size() const;         // V, the width of a row of logits
  int64_t config_vocab_size() const;  // the tokens that may be sampled: the first ones of a row

  struct Impl;

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ssmkit

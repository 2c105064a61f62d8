/* ssmkit's C ABI: plain C11, callable from C, Rust, Zig, an Erlang/Elixir NIF or any FFI.
 *
 * Conventions
 * - Every function returns an ssmkit_status (or a plain value that cannot fail). On failure
 *   ssmkit_last_error() returns the message, "<op>: <argument>: expected <what>, given <what>",
 *   valid on the calling thread until its next ssmkit call. Nothing is thrown, nothing aborts,
 *   and a failed call writes none of its outputs.
 * - Tensors are non-owning descriptors (ssmkit_tensor): pointer, dtype, shape, strides in
 *   elements. A tensor whose data is NULL is absent: a zero-initialised ssmkit_tensor means
 *   "not given" for an optional input, output or gradient.
 * - Argument structs start with struct_size, which the caller sets to sizeof the struct it was
 *   compiled with, `ssmkit_selective_scan_args a = {.struct_size = sizeof a};`, the rest zero:
 *   every optional input absent, every flag off, the default algorithm (only the RMSNorms'
 *   eps must be set).
 *   Later versions of a struct only append fields, and the library reads a struct_size from
 *   any version onwards (the fields a version lacks read as zero: absent), so a program built
 *   against an older header keeps working with a newer library; a struct_size the library does
 *   not know is an SSMKIT_INVALID_ARGUMENT. Fields and functions added since the first
 *   release (0.1.0) are marked "added:"; the next version bump will name their version.
 * - Versioning: SSMKIT_ABI_VERSION changes whenever a type or function here changes
 *   incompatibly (it is also the shared library's SOVERSION); ssmkit_abi_version() returns the
 *   library's, to compare with the header's at start-up.
 *
 * The ops and their semantics are those of the C++ headers (selective_scan.hpp, ssd.hpp,
 * state_update.hpp, conv1d.hpp, norm.hpp, linear.hpp) and of mamba_ssm's functions of the same
 * names;
 * docs/ops.md lists every shape and dtype. Dimension legend: B batch, L length, D channels,
 * N state size, H heads, P head dim, G groups, K conv width, M rows, E features.
 */
#ifndef SSMKIT_SSMKIT_H_
#define SSMKIT_SSMKIT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SSMKIT_API __attribute__((visibility("default")))
#else
#define SSMKIT_API
#endif

/* ---------------------------------------------------------------- versions */

#define SSMKIT_VERSION_MAJOR 0
#define SSMKIT_VERSION_MINOR 1
#define SSMKIT_VERSION_PATCH 0
/* major * 10000 + minor * 100 + patch */
#define SSMKIT_VERSION \
  (SSMKIT_VERSION_MAJOR * 10000 + SSMKIT_VERSION_MINOR * 100 + SSMKIT_VERSION_PATCH)
#define SSMKIT_ABI_VERSION 1

SSMKIT_API uint32_t ssmkit_version(void);           /* the library's SSMKIT_VERSION */
SSMKIT_API const char* ssmkit_version_string(void); /* "0.1.0" */
SSMKIT_API uint32_t ssmkit_abi_version(void);       /* the library's SSMKIT_ABI_VERSION */

/* ---------------------------------------------------------------- status */

typedef enum ssmkit_status {
  SSMKIT_OK = 0,
  SSMKIT_INVALID_ARGUMENT = 1, /* a shape, dtype, stride, pointer or value the op refuses */
  SSMKIT_UNSUPPORTED = 2,      /* valid, but not in this build (e.g. a CUDA tensor) */
  SSMKIT_OUT_OF_MEMORY = 3,    /* a workspace allocation failed */
  SSMKIT_INTERNAL = 4          /* a bug: please report it with the message */
} ssmkit_status;

/* The message of the calling thread's last failed call; "" after a call that succeeded. */
SSMKIT_API const char* ssmkit_last_error(void);
/* "ok", "invalid argument", "unsupported", "out of memory", "internal", or "unknown". */
SSMKIT_API const char* ssmkit_status_name(ssmkit_status status);

/* ---------------------------------------------------------------- threads */

/* n >= 1 sets the thread count of every op; n <= 0 restores the default
 * (SSMKIT_NUM_THREADS, else all cores). Results are bit-identical for a given count. */
SSMKIT_API void ssmkit_set_num_threads(int32_t n);
SSMKIT_API int32_t ssmkit_num_threads(void);

/* Opt-in bf16 products (off by default; default from SSMKIT_BF16_PRODUCTS=1): a bf16 weight's
 * products with 2 or more rows (prefill, decode batches) round x to bf16 and sum bf16 x bf16
 * products in f32 with AVX-512 BF16, as llama.cpp does, or with AMX's bf16 tiles
 * where the CPU has them (ssmkit/linear.hpp). Returns 1 when now in use, 0 when off or when the
 * CPU lacks AVX-512 BF16. */
SSMKIT_API int32_t ssmkit_set_bf16_products(int32_t enable);
SSMKIT_API int32_t ssmkit_bf16_products(void);

/* ---------------------------------------------------------------- tensors */

typedef enum ssmkit_dtype {
  SSMKIT_F32 = 0,
  SSMKIT_BF16 = 1, /* bfloat16 bits in a uint16_t */
  SSMKIT_F16 = 2,
  SSMKIT_I32 = 3,
  SSMKIT_I64 = 4
} ssmkit_dtype;

typedef enum ssmkit_device { SSMKIT_CPU = 0, SSMKIT_CUDA = 1 } ssmkit_device;

#define SSMKIT_MAX_RANK 6

typedef struct ssmkit_tensor {
  void* data;       /* NULL: absent */
  int32_t dtype;    /* an ssmkit_dtype */
  int32_t device;   /* an ssmkit_device */
  int32_t rank;     /* 0..SSMKIT_MAX_RANK */
  int32_t reserved; /* 0 */
  int64_t shape[SSMKIT_MAX_RANK];
  int64_t strides[SSMKIT_MAX_RANK]; /* in elements, not bytes */
} ssmkit_tensor;

/* Fills *t as a densely packed row-major CPU tensor of `rank` dims over `data`. */
SSMKIT_API ssmkit_status ssmkit_tensor_contiguous(ssmkit_tensor* t, void* data, ssmkit_dtype dtype,
                                                  int32_t rank, const int64_t* shape);

/* ---------------------------------------------------------------- selective scan (Mamba-1) */

typedef enum ssmkit_scan_algorithm {
  SSMKIT_SCAN_SEQUENTIAL = 0,
  SSMKIT_SCAN_CHUNKED = 1,
  SSMKIT_SCAN_BLELLOCH = 2,
  SSMKIT_SCAN_HILLIS_STEELE = 3,
  SSMKIT_SCAN_LOG_SPACE = 4
} ssmkit_scan_algorithm;

typedef struct ssmkit_selective_scan_args {
  size_t struct_size;
  ssmkit_tensor u;             /* (B, D, L) f32 | bf16 */
  ssmkit_tensor delta;         /* (B, D, L) f32 | bf16 */
  ssmkit_tensor A;             /* (D, N) f32 */
  ssmkit_tensor B;             /* (D, N), (B, N, L) or (B, G, N, L); f32 | bf16 */
  ssmkit_tensor C;             /* the same forms as B */
  ssmkit_tensor D;             /* optional (D) f32 */
  ssmkit_tensor z;             /* optional (B, D, L) f32 | bf16 */
  ssmkit_tensor delta_bias;    /* optional (D) f32 */
  ssmkit_tensor initial_state; /* optional (B, D, N) f32 */
  int32_t delta_softplus;      /* 0 | 1 */
  int32_t algorithm;           /* an ssmkit_scan_algorithm (forward only) */
  int64_t chunk_length;        /* 0: default; speed only */
  /* added: packed sequences (the 0.1.0 struct_size, which ends before them, reads them as
   * absent); with cu_seqlens, initial_state may also be (S, D, N), one per sequence. */
  ssmkit_tensor seq_idx; /* optional (B, L) i32, non-decreasing: a new sequence where it changes */
  ssmkit_tensor cu_seqlens; /* optional (S + 1) i32 | i64, B = 1: 0 = cu[0] < ... < cu[S] = L */
} ssmkit_selective_scan_args;

typedef struct ssmkit_selective_scan_grads {
  size_t struct_size;
  /* each optional; each the shape and dtype of its input; overwritten, not accumulated */
  ssmkit_tensor du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dinitial_state;
} ssmkit_selective_scan_grads;

/* out: (B, D, L), u's dtype. final_state: NULL or absent, or (B, D, N) f32. */
SSMKIT_API ssmkit_status ssmkit_selective_scan_fwd(const ssmkit_selective_scan_args* args,
                                                   const ssmkit_tensor* out,
                                                   const ssmkit_tensor* final_state);
/* dout: (B, D, L), u's dtype. dfinal_state: NULL or absent (zeros), or (B, D, N) f32. */
SSMKIT_API ssmkit_status ssmkit_selective_scan_bwd(const ssmkit_selective_scan_args* args,
                                                   const ssmkit_tensor* dout,
                                                   const ssmkit_tensor* dfinal_state,
                                                   const ssmkit_selective_scan_grads* grads);
/* added: the same with each packed sequence's last state, varlen_states (S, D, N) f32
 * (needs args.cu_seqlens), and its gradient dvarlen_states (NULL or absent: zeros). */
SSMKIT_API ssmkit_status ssmkit_selective_scan_fwd_varlen(const ssmkit_selective_scan_args* args,
                                                          const ssmkit_tensor* out,
                                                          const ssmkit_tensor* final_state,
                                                          const ssmkit_tensor* varlen_states);
SSMKIT_API ssmkit_status ssmkit_selective_scan_bwd_varlen(const ssmkit_selective_scan_args* args,
                                                          const ssmkit_tensor* dout,
                                                          const ssmkit_tensor* dfinal_state,
                                                          const ssmkit_tensor* dvarlen_states,
                                                          const ssmkit_selective_scan_grads* grads);

/* ---------------------------------------------------------------- SSD (Mamba-2) */

typedef enum ssmkit_ssd_algorithm {
  SSMKIT_SSD_AUTO = 0,
  SSMKIT_SSD_CHUNKED = 1,
  SSMKIT_SSD_SEQUENTIAL = 2
} ssmkit_ssd_algorithm;

typedef struct ssmkit_ssd_args {
  size_t struct_size;
  ssmkit_tensor x;              /* (B, L, H, P) f32 | bf16 */
  ssmkit_tensor dt;             /* (B, L, H) f32 | bf16 */
  ssmkit_tensor A;              /* (H) f32 */
  ssmkit_tensor B;              /* (B, L, G, N) f32 | bf16 */
  ssmkit_tensor C;              /* (B, L, G, N) f32 | bf16 */
  ssmkit_tensor D;              /* optional (H) or (H, P) f32 */
  ssmkit_tensor z;              /* optional (B, L, H, P) f32 | bf16 */
  ssmkit_tensor dt_bias;        /* optional (H) f32 */
  ssmkit_tensor initial_states; /* optional (B, H, P, N) f32 */
  ssmkit_tensor seq_idx;        /* optional (B, L) i32 */
  int32_t dt_softplus;          /* 0 | 1 */
  int32_t has_dt_limit;         /* 0: dt_min, dt_max ignored (0, +inf); 1: clamp to them */
  float dt_min, dt_max;
  int32_t algorithm;  /* an ssmkit_ssd_algorithm */
  int32_t reserved;   /* 0 */
  int64_t chunk_size; /* 0: default; speed only */
  /* added (the 0.1.0 struct_size reads it as absent): packed sequences, mamba_ssm's
   * cu_seqlens; initial_states may then also be (S, H, P, N), one per sequence. */
  ssmkit_tensor cu_seqlens; /* optional (S + 1) i32 | i64, B = 1: 0 = cu[0] < ... < cu[S] = L */
} ssmkit_ssd_args;

typedef struct ssmkit_ssd_grads {
  size_t struct_size;
  ssmkit_tensor dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states;
} ssmkit_ssd_grads;

/* out: (B, L, H, P), x's dtype. final_states: NULL or absent, or (B, H, P, N) f32. */
SSMKIT_API ssmkit_status ssmkit_ssd_fwd(const ssmkit_ssd_args* args, const ssmkit_tensor* out,
                                        const ssmkit_tensor* final_states);
SSMKIT_API ssmkit_status ssmkit_ssd_bwd(const ssmkit_ssd_args* args, const ssmkit_tensor* dout,
                                        const ssmkit_tensor* dfinal_states,
                                        const ssmkit_ssd_grads* grads);
/* added: the same with varlen_states (S, H, P, N) f32 (mamba_ssm's return_varlen_states;
 * needs args.cu_seqlens) and its gradient dvarlen_states (NULL or absent: zeros). */
SSMKIT_API ssmkit_status ssmkit_ssd_fwd_varlen(const ssmkit_ssd_args* args,
                                               const ssmkit_tensor* out,
                                               const ssmkit_tensor* final_states,
                                               const ssmkit_tensor* varlen_states);
SSMKIT_API ssmkit_status ssmkit_ssd_bwd_varlen(const ssmkit_ssd_args* args,
                                               const ssmkit_tensor* dout,
                                               const ssmkit_tensor* dfinal_states,
                                               const ssmkit_tensor* dvarlen_states,
                                               const ssmkit_ssd_grads* grads);

/* ---------------------------------------------------------------- decode step */

typedef struct ssmkit_state_update_args {
  size_t struct_size;
  ssmkit_tensor x;                   /* (B, D) | (B, H, P); f32 | bf16 */
  ssmkit_tensor dt;                  /* (B, D) | (B, H) */
  ssmkit_tensor A;                   /* (D, N) | (H); f32 */
  ssmkit_tensor B;                   /* (B, N) or (B, G, N) */
  ssmkit_tensor C;                   /* the same forms as B */
  ssmkit_tensor D;                   /* optional (D) | (H) or (H, P); f32 */
  ssmkit_tensor z;                   /* optional, x's shape */
  ssmkit_tensor dt_bias;             /* optional (D) | (H); f32 */
  ssmkit_tensor state_batch_indices; /* optional (B) i32; negative: skip the row */
  int32_t dt_softplus;
  int32_t reserved;
} ssmkit_state_update_args;

/* state: (Bs, D, N) or (Bs, H, P, N) f32, updated in place. out: x's shape and dtype. */
SSMKIT_API ssmkit_status ssmkit_selective_state_update(const ssmkit_state_update_args* args,
                                                       const ssmkit_tensor* state,
                                                       const ssmkit_tensor* out);

/* ---------------------------------------------------------------- causal conv1d */

typedef enum ssmkit_activation { SSMKIT_ACT_NONE = 0, SSMKIT_ACT_SILU = 1 } ssmkit_activation;

typedef struct ssmkit_conv1d_args {
  size_t struct_size;
  ssmkit_tensor x;              /* (B, D, L) f32 | bf16 */
  ssmkit_tensor weight;         /* (D, K) f32, 2 <= K <= 8 */
  ssmkit_tensor bias;           /* optional (D) f32 */
  ssmkit_tensor initial_states; /* optional (B, D, K-1) f32 | bf16 */
  int32_t activation;           /* an ssmkit_activation */
  int32_t reserved;
  /* added (the 0.1.0 struct_size reads it as absent). */
  ssmkit_tensor seq_idx; /* optional (B, L) i32, non-decreasing: a sequence sees only its inputs */
} ssmkit_conv1d_args;

typedef struct ssmkit_conv1d_grads {
  size_t struct_size;
  ssmkit_tensor dx, dweight, dbias, dinitial_states;
} ssmkit_conv1d_grads;

/* out: (B, D, L), x's dtype. final_states: NULL or absent, or (B, D, K-1) f32 | bf16. */
SSMKIT_API ssmkit_status ssmkit_causal_conv1d_fwd(const ssmkit_conv1d_args* args,
                                                  const ssmkit_tensor* out,
                                                  const ssmkit_tensor* final_states);
SSMKIT_API ssmkit_status ssmkit_causal_conv1d_bwd(const ssmkit_conv1d_args* args,
                                                  const ssmkit_tensor* dout,
                                                  const ssmkit_tensor* dfinal_states,
                                                  const ssmkit_conv1d_grads* grads);

typedef struct ssmkit_conv1d_update_args {
  size_t struct_size;
  ssmkit_tensor x;      /* (B, D) or (B, D, T) f32 | bf16 */
  ssmkit_tensor weight; /* (D, K) f32 */
  ssmkit_tensor bias;   /* optional (D) f32 */
  int32_t activation;
  int32_t reserved;
} ssmkit_conv1d_update_args;

/* conv_state: (B, D, S) f32, S >= K-1, updated in place. out: x's shape and dtype (may be x). */
SSMKIT_API ssmkit_status ssmkit_causal_conv1d_update(const ssmkit_conv1d_update_args* args,
                                                     const ssmkit_tensor* conv_state,
                                                     const ssmkit_tensor* out);

/* ---------------------------------------------------------------- RMSNorm */

typedef struct ssmkit_rmsnorm_args {
  size_t struct_size;
  ssmkit_tensor x;          /* (M, E) f32 | bf16 */
  ssmkit_tensor weight;     /* (E) f32 */
  ssmkit_tensor bias;       /* optional (E) f32 */
  ssmkit_tensor z;          /* optional (M, E) f32 | bf16: the gate */
  float eps;                /* > 0, required (mamba_ssm's default is 1e-6) */
  int32_t norm_before_gate; /* 0 | 1 (mamba_ssm's default is 1) */
  int64_t group_size;       /* 0: E */
} ssmkit_rmsnorm_args;

typedef struct ssmkit_rmsnorm_grads {
  size_t struct_size;
  ssmkit_tensor dx, dweight, dbias, dz;
} ssmkit_rmsnorm_grads;

SSMKIT_API ssmkit_status ssmkit_rmsnorm_fwd(const ssmkit_rmsnorm_args* args,
                                            const ssmkit_tensor* out);
SSMKIT_API ssmkit_status ssmkit_rmsnorm_bwd(const ssmkit_rmsnorm_args* args,
                                            const ssmkit_tensor* dout,
                                            const ssmkit_rmsnorm_grads* grads);

/* Residual add + RMSNorm: residual_out = x + residual (f32), out = rmsnorm(residual_out). */
typedef struct ssmkit_add_rmsnorm_args {
  size_t struct_size;
  ssmkit_tensor x;        /* (M, E) f32 | bf16 */
  ssmkit_tensor residual; /* optional (M, E) f32 */
  ssmkit_tensor weight;   /* (E) f32 */
  ssmkit_tensor bias;     /* optional (E) f32 */
  float eps;              /* > 0, required */
  int32_t reserved;
} ssmkit_add_rmsnorm_args;

typedef struct ssmkit_add_rmsnorm_grads {
  size_t struct_size;
  ssmkit_tensor dx, dresidual, dweight, dbias;
} ssmkit_add_rmsnorm_grads;

/* out: (M, E), x's dtype. residual_out: (M, E) f32. */
SSMKIT_API ssmkit_status ssmkit_add_rmsnorm_fwd(const ssmkit_add_rmsnorm_args* args,
                                                const ssmkit_tensor* out,
                                                const ssmkit_tensor* residual_out);
/* dresidual_out: NULL or absent (zeros), or (M, E) f32. */
SSMKIT_API ssmkit_status ssmkit_add_rmsnorm_bwd(const ssmkit_add_rmsnorm_args* args,
                                                const ssmkit_tensor* dout,
                                                const ssmkit_tensor* dresidual_out,
                                                const ssmkit_add_rmsnorm_grads* grads);

/* ---------------------------------------------------------------- linear (added) */

/* added: PyTorch's F.linear, out = x W^T + bias, the projections of a Mamba block
 * (include/ssmkit/linear.hpp), so that a host without a matrix library can build a network
 * around the ops and train it. Dimension legend: T rows, K input features, M output features.
 * x, out, dout and dx may each be row-major, strides (ld, 1), or feature-major, strides
 * (1, ld): the transpose of a (K, T) or (M, T) buffer. */
typedef struct ssmkit_linear_args {
  size_t struct_size;
  ssmkit_tensor x;      /* (T, K) f32 */
  ssmkit_tensor weight; /* (M, K) f32 | bf16 | f16, contiguous (the backward: f32) */
  ssmkit_tensor bias;   /* optional (M) f32 */
} ssmkit_linear_args;

typedef struct ssmkit_linear_grads {
  size_t struct_size;
  /* each optional, overwritten: dx (T, K) f32, dweight (M, K) f32 contiguous, dbias (M) f32
   * (only with a bias); none may overlap an input or another gradient */
  ssmkit_tensor dx, dweight, dbias;
} ssmkit_linear_grads;

/* out: (T, M) f32, not overlapping x. */
SSMKIT_API ssmkit_status ssmkit_linear_fwd(const ssmkit_linear_args* args,
                                           const ssmkit_tensor* out);
/* dout: (T, M) f32. */
SSMKIT_API ssmkit_status ssmkit_linear_bwd(const ssmkit_linear_args* args,
                                           const ssmkit_tensor* dout,
                                           const ssmkit_linear_grads* grads);

/* ---------------------------------------------------------------- Mamba-1 mixer
 *
 * The Mamba-1 mixer's forward over whole sequences from zero states in one call (in_proj,
 * causal conv1d + silu, x_proj, dt_proj, the selective scan gated by z, out_proj), its channels
 * kept on one thread each from in_proj through the scan: inference for a small network run
 * window after window (include/ssmkit/mamba1_mixer.hpp, docs/ops/mamba1_mixer.md). Forward only,
 * CPU only. Dimension legend: B batch, L length, d model width, D channels, N state size,
 * R dt_rank, K conv width. */
typedef struct ssmkit_mamba1_mixer_args {
  size_t struct_size;
  ssmkit_tensor x;           /* (B, L, d) f32, rows evenly spaced */
  ssmkit_tensor in_proj;     /* (2D, d) f32 | bf16 | f16, contiguous */
  ssmkit_tensor conv_weight; /* (D, K) f32, 2 <= K <= 8 */
  ssmkit_tensor conv_bias;   /* optional (D) f32 */
  ssmkit_tensor x_proj;      /* (R + 2N, D) f32 | bf16 | f16, contiguous */
  ssmkit_tensor dt_proj;     /* (D, R) f32 | bf16 | f16, contiguous */
  ssmkit_tensor dt_bias;     /* optional (D) f32 */
  ssmkit_tensor A;           /* (D, N) f32 */
  ssmkit_tensor D;           /* optional (D) f32 */
  ssmkit_tensor out_proj;    /* (d, D) f32 | bf16 | f16, contiguous */
} ssmkit_mamba1_mixer_args;

/* out: (B, L, d) f32; it may be x, and must not otherwise overlap an input. */
SSMKIT_API ssmkit_status ssmkit_mamba1_mixer_fwd(const ssmkit_mamba1_mixer_args* args,
                                                 const ssmkit_tensor* out);

/* ---------------------------------------------------------------- models
 *
 * The inference engine (include/ssmkit/model.hpp, docs/model.md): a checkpoint directory
 * (Hugging Face MambaForCausalLM / Mamba2ForCausalLM, or the state-spaces format; safetensors,
 * f32 / bf16 / f16) loaded into an ssmkit_model; sessions holding the conv and SSM caches of up
 * to max_batch sequences, for prefill and decode logits; tokenizers; and generation with a
 * per-token callback.
 *
 * Handles: created by *_load / *_create (the handle is written on success only), released by
 * *_free (NULL is accepted). A session holds a reference to its model, so the model handle may
 * be freed before its sessions. A model is read-only and may serve sessions on several threads;
 * a session is used by one thread at a time; a tokenizer is read-only (any thread).
 * Dimension legend: B batch, L longest prompt, V vocab (logits' row width, padded). */
typedef struct ssmkit_model ssmkit_model;
typedef struct ssmkit_session ssmkit_session;
typedef struct ssmkit_tokenizer ssmkit_tokenizer;

typedef enum ssmkit_arch { SSMKIT_ARCH_MAMBA1 = 1, SSMKIT_ARCH_MAMBA2 = 2 } ssmkit_arch;

/* dir: a checkpoint directory (config.json + model.safetensors, or an index and shards). Every
 * tensor is checked; the weights are memory-mapped. */
SSMKIT_API ssmkit_status ssmkit_model_load(const char* dir, ssmkit_model** model);
/* The built-in model (models/default: a byte-level Mamba-2, docs/default_model.md), from the
 * directory ssmkit_default_model_dir names. */
SSMKIT_API ssmkit_status ssmkit_model_load_default(ssmkit_model** model);
/* The built-in model's directory, the first of: $SSMKIT_DEFAULT_MODEL (when set, only it);
 * beside the binary holding this library (libssmkit.so, or the program linking it statically)
 * or the running program: <dir>/../share/ssmkit/models/default (an install prefix),
 * <dir>/../../models/default (a build tree), <dir>/models/default; the source tree it was built
 * from. Writes the path and a NUL into dir (capacity bytes) and its strlen into *length
 * (optional); dir NULL (capacity 0) asks for the length only. A capacity below length + 1 is an
 * SSMKIT_INVALID_ARGUMENT that writes nothing. */
SSMKIT_API ssmkit_status ssmkit_default_model_dir(char* dir, size_t capacity, size_t* length);
SSMKIT_API void ssmkit_model_free(ssmkit_model* model);

typedef struct ssmkit_model_config {
  size_t struct_size; /* set by the caller: sizeof(ssmkit_model_config) */
  int32_t arch;       /* an ssmkit_arch */
  int32_t reserved;
  int64_t d_model;
  int64_t n_layer;
  int64_t vocab_size;        /* V: rows of the embedding, the width of a row of logits */
  int64_t config_vocab_size; /* the vocabulary the config states (<= V): the tokens sampled */
  int64_t d_inner;           /* expand * d_model */
  int64_t d_state;           /* N */
  int64_t d_conv;            /* conv width */
  int64_t dt_rank;           /* Mamba-1; 0 for Mamba-2 */
  int64_t nheads, headdim, ngroups;                 /* Mamba-2; 0 for Mamba-1 */
  int64_t bos_token_id, eos_token_id, pad_token_id; /* -1: none */
  int64_t parameter_count; /* every parameter once (a tied LM head counted once) */
} ssmkit_model_config;

SSMKIT_API ssmkit_status ssmkit_model_get_config(const ssmkit_model* model,
                                                 ssmkit_model_config* config);

/* A session over `model` for up to max_batch (>= 1) sequences; its caches are allocated here. */
SSMKIT_API ssmkit_status ssmkit_session_create(const ssmkit_model* model, int64_t max_batch,
                                               ssmkit_session** session);
/* added: the same on a chosen device (an ssmkit_device). SSMKIT_CUDA: the engine on the GPU
 * (docs/cuda.md, "The engine on the GPU"): pure Mamba-1 and Mamba-2 models, the weights uploaded
 * to the device as bf16 once per model, each decode step a replayed CUDA graph; prefill, decode
 * and ssmkit_generate work as on the CPU, except prefill's all_logits (SSMKIT_UNSUPPORTED). A
 * hybrid model, a build without the CUDA backend, or no usable GPU: SSMKIT_UNSUPPORTED, the
 * message naming why (a hybrid's first non-Mamba block). */
SSMKIT_API ssmkit_status ssmkit_session_create_on(const ssmkit_model* model, int64_t max_batch,
                                                  int32_t device, ssmkit_session** session);
SSMKIT_API void ssmkit_session_free(ssmkit_session* session);

typedef struct ssmkit_prefill_args {
  size_t struct_size;
  int64_t batch;                /* B: 1..max_batch prompts */
  const int32_t* const* tokens; /* B arrays of token ids, each in [0, V) */
  const int64_t* lengths;       /* (B): their lengths, each >= 1; they may differ */
  ssmkit_tensor logits;         /* (B, V) f32, dense: each prompt's last-position logits */
  ssmkit_tensor all_logits;     /* optional (B, L, V) f32, dense: position l of prompt b at
                                   [b, l] for l < lengths[b]; the rows past its end are left
                                   as they were */
} ssmkit_prefill_args;

/* Runs the B prompts from a fresh state (shorter ones are padded and masked inside: padding
 * changes nothing), leaving the session ready to decode them. */
SSMKIT_API ssmkit_status ssmkit_session_prefill(ssmkit_session* session,
                                                const ssmkit_prefill_args* args);
/* One more token for each of the B sequences of the last prefill: tokens (B), logits (B, V) f32
 * dense. Allocates nothing. */
SSMKIT_API ssmkit_status ssmkit_session_decode(ssmkit_session* session, const int32_t* tokens,
                                               int64_t batch, const ssmkit_tensor* logits);

/* ---------------------------------------------------------------- tokenizers */

/* path: a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2 / GPT-NeoX style). */
SSMKIT_API ssmkit_status ssmkit_tokenizer_load(const char* path, ssmkit_tokenizer** tokenizer);
/* The raw-byte tokenizer: token i is byte i (vocab 256). */
SSMKIT_API ssmkit_status ssmkit_tokenizer_bytes(ssmkit_tokenizer** tokenizer);
/* The model's own: the tokenizer.json in its directory, else the raw-byte tokenizer when its
 * vocabulary has at most 256 rows; an error naming the directory otherwise. */
SSMKIT_API ssmkit_status ssmkit_model_tokenizer(const ssmkit_model* model,
                                                ssmkit_tokenizer** tokenizer);
SSMKIT_API void ssmkit_tokenizer_free(ssmkit_tokenizer* tokenizer);

/* Encodes `length` bytes of UTF-8 at text (NUL not needed) into ids (room for `capacity`) and
 * their count into *n_ids. ids NULL (capacity 0) asks for the count only. Usually at most one id
 * per byte; a capacity below the count is an SSMKIT_INVALID_ARGUMENT that writes nothing. */
SSMKIT_API ssmkit_status ssmkit_tokenizer_encode(const ssmkit_tokenizer* tokenizer,
                                                 const char* text, size_t length, int32_t* ids,
                                                 int64_t capacity, int64_t* n_ids);
/* The text of n_ids ids (invalid UTF-8 replaced by U+FFFD; unknown ids give nothing; special
 * tokens nothing when skip_special), written with a NUL into text (capacity bytes), its strlen
 * into *length (optional). text NULL (capacity 0) asks for the length only; a capacity below
 * length + 1 is an SSMKIT_INVALID_ARGUMENT that writes nothing. */
SSMKIT_API ssmkit_status ssmkit_tokenizer_decode(const ssmkit_tokenizer* tokenizer,
                                                 const int32_t* ids, int64_t n_ids,
                                                 int32_t skip_special, char* text, size_t capacity,
                                                 size_t* length);

/* ---------------------------------------------------------------- generation */

/* Called with each generated token as it is produced, and the text it completes: UTF-8,
 * NUL-terminated, text_length bytes, often empty while a character spans several tokens (the
 * pieces concatenate to the decoded text); NULL when the generation has no tokenizer. Valid
 * during the call only. Return 0 to go on, non-zero to stop after this token. The callback must
 * not use the session that is generating. */
typedef int32_t (*ssmkit_token_callback)(void* user_data, int32_t token, const char* text,
                                         size_t text_length);

typedef struct ssmkit_generate_args {
  size_t struct_size;
  const char* prompt;                /* NUL-terminated UTF-8, encoded with `tokenizer`; NULL:
                                        the prompt is prompt_tokens */
  const int32_t* prompt_tokens;      /* (n_prompt_tokens), when prompt is NULL */
  int64_t n_prompt_tokens;           /* an empty prompt starts from the model's bos token */
  const ssmkit_tokenizer* tokenizer; /* for prompt and the callback's text; optional */
  int64_t max_tokens;                /* new tokens at most, >= 0 */
  float temperature;                 /* >= 0; 0: greedy */
  float top_p;                       /* nucleus threshold in (0, 1]; 0 means 1 (no filter) */
  int64_t top_k;                     /* >= 0; 0: no top-k filter */
  uint64_t seed;                     /* sampling is deterministic for a given seed */
  int32_t ignore_eos;                /* 0: stop after the model's eos token; 1: go on */
  int32_t keep_special;              /* 0: special tokens add no text to the callback's */
  ssmkit_token_callback on_token;    /* optional */
  void* user_data;                   /* passed to on_token */
} ssmkit_generate_args;

typedef struct ssmkit_generate_result {
  size_t struct_size; /* set by the caller: sizeof(ssmkit_generate_result) */
  int64_t prompt_tokens;
  int64_t generated_tokens;
  double prefill_seconds;      /* the prompt's prefill and the first token's sampling */
  double decode_seconds;       /* the decode steps of the other tokens */
  int32_t stopped_at_eos;      /* 1: the last token is the eos token */
  int32_t stopped_by_callback; /* 1: on_token asked to stop */
} ssmkit_generate_result;

/* Generates one sequence in `session` (batch 1, prefilled anew): prefill, then sample and decode
 * until max_tokens, the eos token or the callback stops it. result: optional, written on
 * success. Tokens handed to the callback before a failure stay handed. */
SSMKIT_API ssmkit_status ssmkit_generate(ssmkit_session* session, const ssmkit_generate_args* args,
                                         ssmkit_generate_result* result);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SSMKIT_SSMKIT_H_ */

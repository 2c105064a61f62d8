/* ssmkit's Elixir NIF: shared declarations. The NIF is a thin layer over the C ABI
 * (include/ssmkit/ssmkit.h): it turns Elixir terms into ssmkit_tensor descriptors over the
 * binaries' own bytes (zero-copy in), allocates one binary per output, calls the C function and
 * returns {:ok, result} or {:error, message} with the C ABI's message. Nothing it is given can
 * crash the VM: every term is checked before a byte is read.
 *
 * A tensor crosses as {data, type, shape}: a binary, Nx's type tuple ({:f, 32}, {:bf, 16},
 * {:f, 16}, {:s, 32}, {:s, 64}) and a shape tuple, row-major, exactly what Nx.to_binary/1,
 * Nx.type/1 and Nx.shape/1 give. Arguments come in a map keyed by the C ABI's names; a key that
 * is missing or nil is an absent tensor. */
#ifndef SSMKIT_ELIXIR_NIF_H_
#define SSMKIT_ELIXIR_NIF_H_

#include <erl_nif.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ssmkit/ssmkit.h"

/* ------------------------------------------------------------------ atoms */

typedef struct {
  ERL_NIF_TERM ok, error, nil, true_, false_, f, bf, s, u, token, done;
} Atoms;
extern Atoms atoms;

/* ------------------------------------------------------------------ one NIF call */

#define NIF_MAX_INPUTS 24
#define NIF_MAX_OUTPUTS 12

typedef struct {
  ErlNifBinary bin;
  ssmkit_tensor tensor;
  const char* name; /* the result map's key */
} Output;

/* The state of one call: its arguments' map, the first error, the copies made of misaligned
 * inputs and the outputs allocated so far (released on error). */
typedef struct {
  ErlNifEnv* env;
  const char* fn;
  ERL_NIF_TERM args; /* a map */
  char error[512];
  int failed;
  void* copies[NIF_MAX_INPUTS];
  int n_copies;
  Output outputs[NIF_MAX_OUTPUTS];
  int n_outputs;
} Call;

/* Starts a call on argv[0], which must be a map. Returns 0 (and an error) if it is not. */
int call_begin(Call* c, ErlNifEnv* env, const char* fn, ERL_NIF_TERM args);
/* Records "<fn>: <fmt...>" as the call's error (the first one wins); returns 0. */
int call_fail(Call* c, const char* fmt, ...);
/* {:error, message}: the call's error, releasing what the call allocated. */
ERL_NIF_TERM call_error(Call* c);
/* {:error, ssmkit_last_error()}, releasing what the call allocated. */
ERL_NIF_TERM call_ssmkit_error(Call* c);
/* Frees the copies of misaligned inputs (the outputs are consumed by output_term). */
void call_end(Call* c);

/* args[key] as a tensor: absent (a zeroed descriptor) when the key is missing or nil. */
int arg_tensor(Call* c, const char* key, ssmkit_tensor* t);
/* A {data, type, shape} term as a tensor over the binary's bytes; `name` for messages. */
int term_tensor(Call* c, const char* name, ERL_NIF_TERM term, ssmkit_tensor* t);
/* args[key] as a flag (true/false; missing or nil: def). */
int arg_bool(Call* c, const char* key, int def, int32_t* out);
/* args[key] as an integer (missing or nil: def). */
int arg_int64(Call* c, const char* key, int64_t def, int64_t* out);
/* args[key] as a number (integer or float; missing or nil: def). */
int arg_double(Call* c, const char* key, double def, double* out);

/* A new output binary of `dtype` and shape, named `name` in the result map. NULL (and an error
 * recorded) when the allocation fails or the size overflows. */
ssmkit_tensor* call_output(Call* c, const char* name, int32_t dtype, int32_t rank,
                           const int64_t* shape);
/* The output's {data, type, shape} term; the binary now belongs to the term. */
ERL_NIF_TERM output_term(Call* c, int index);
/* {:ok, %{name => tensor, ...}} of every output. */
ERL_NIF_TERM outputs_map(Call* c);

/* ------------------------------------------------------------------ terms */

int32_t dtype_size(int32_t dtype);
ERL_NIF_TERM dtype_term(ErlNifEnv* env, int32_t dtype);
ERL_NIF_TERM shape_term(ErlNifEnv* env, int32_t rank, const int64_t* shape);
/* "{2, 8, 60}" and "{:f, 32}", Elixir's spelling, for messages. */
void format_shape(int32_t rank, const int64_t* shape, char* out, size_t size);
void format_dtype(int32_t dtype, char* out, size_t size);
/* Parses a shape tuple: rank <= SSMKIT_MAX_RANK, sizes >= 0. */
int parse_shape(ErlNifEnv* env, ERL_NIF_TERM term, int32_t* rank, int64_t* shape);
/* The number of elements, or -1 past 2^62 bytes at `elem` bytes each. */
int64_t checked_numel(int32_t rank, const int64_t* shape, int64_t elem);
ERL_NIF_TERM make_error(ErlNifEnv* env, const char* message);
ERL_NIF_TERM make_ok(ErlNifEnv* env, ERL_NIF_TERM value);
/* A binary term holding a copy of `n` bytes. */
ERL_NIF_TERM make_binary_copy(ErlNifEnv* env, const void* data, size_t n);

/* ------------------------------------------------------------------ scheduling */

/* Multiply-adds (roughly) above which a call moves to a dirty CPU scheduler: about a
 * millisecond of work on one core. */
#define NIF_DIRTY_WORK (1LL << 24)

typedef ERL_NIF_TERM (*NifImpl)(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
/* Runs impl here, or on a dirty CPU scheduler when `work` is large (or args[:dirty] says so:
 * true forces it, false keeps the call here). */
ERL_NIF_TERM run_sized(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[], ERL_NIF_TERM args,
                       int64_t work, const char* name, NifImpl impl);
/* The elements of args[key]'s shape (0 when absent or malformed; the call itself reports). */
int64_t arg_numel(ErlNifEnv* env, ERL_NIF_TERM args, const char* key);
/* Size `dim` of args[key]'s shape (1 when absent or malformed). */
int64_t arg_dim(ErlNifEnv* env, ERL_NIF_TERM args, const char* key, int dim);

/* ------------------------------------------------------------------ resources and counters */

/* Live objects, for the leak tests: states, models, sessions, streams, and stream threads
 * still running. */
typedef struct {
  atomic_long states, models, sessions, streams, threads;
} LiveCounts;
extern LiveCounts live;

int nif_state_init(ErlNifEnv* env);
int nif_model_init(ErlNifEnv* env);
int nif_stream_init(ErlNifEnv* env);

/* The NIFs (ssmkit_nif.c lists them). */
ERL_NIF_TERM nif_scan_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scan_bwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_ssd_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_ssd_bwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_conv_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_conv_bwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_rmsnorm_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_rmsnorm_bwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_add_rmsnorm_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_add_rmsnorm_bwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_linear_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_linear_bwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_set_num_threads(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_num_threads(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_set_bf16_products(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_bf16_products(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_versions(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_live_counts(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_state_new(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_state_from_tensor(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_state_to_tensor(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_state_release(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_state_update(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_conv_update(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_model_load(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_model_load_default(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_model_config(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_tokenizer_encode(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_tokenizer_decode(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_session_new(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_session_prefill(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_session_decode(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_stream_start(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_stream_cancel(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_to_channels(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_to_tokens(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_add(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_mamba1_net_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);

/* The model resource (nif_model.c), shared with the streams (nif_stream.c). */
typedef struct {
  ssmkit_model* model;
  ssmkit_tokenizer* tokenizer; /* the model's own; NULL when it has none */
  ssmkit_model_config config;
} ModelRes;
extern ErlNifResourceType* model_type;

#endif /* SSMKIT_ELIXIR_NIF_H_ */

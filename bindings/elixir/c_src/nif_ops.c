/* Every op of the C ABI, forward and backward, on {data, type, shape} tensors. Each NIF takes
 * one map of arguments (keys: the C ABI's names in lower case, plus the options) and returns
 * {:ok, %{output name => tensor}} or {:error, message}. Outputs are allocated here, one binary
 * each, in the shapes the C ABI documents; the C ABI then checks every argument against every
 * other, and its message is the error. An output whose shape cannot be read off malformed
 * inputs is left absent: the C ABI then reports the input.
 *
 * Dimension legend: B batch, L length, D channels, N state size, H heads, P head dim, G groups,
 * K conv width (or input features of the linear layer), M rows / output features, E features,
 * S packed sequences, T rows of the linear layer. */
#include <string.h>

#include "nif.h"

/* ------------------------------------------------------------------ shared helpers */

/* An output of `like`'s shape and dtype (absent if `like` is). */
static int output_like(Call* c, const char* name, const ssmkit_tensor* like, ssmkit_tensor* out) {
  memset(out, 0, sizeof *out);
  if (c->failed) return 0;
  if (like->data == NULL) return 1;
  ssmkit_tensor* t = call_output(c, name, like->dtype, like->rank, like->shape);
  if (t == NULL) return 0;
  *out = *t;
  return 1;
}

/* An f32 output of the given shape when `wanted`, else absent. */
static int output_f32(Call* c, const char* name, int wanted, int32_t rank, const int64_t* shape,
                      ssmkit_tensor* out) {
  memset(out, 0, sizeof *out);
  if (c->failed) return 0;
  if (!wanted) return 1;
  ssmkit_tensor* t = call_output(c, name, SSMKIT_F32, rank, shape);
  if (t == NULL) return 0;
  *out = *t;
  return 1;
}

/* The number of packed sequences S of cu_seqlens (S + 1), or 0. */
static int64_t sequences(const ssmkit_tensor* cu_seqlens) {
  return cu_seqlens->data != NULL && cu_seqlens->rank == 1 && cu_seqlens->shape[0] > 1
             ? cu_seqlens->shape[0] - 1
             : 0;
}

static ERL_NIF_TERM finish(Call* c, ssmkit_status status) {
  if (status != SSMKIT_OK) return call_ssmkit_error(c);
  return outputs_map(c);
}

/* finish() for the forwards with optional state outputs: a state asked for that could not be
 * sized (no cu_seqlens for the varlen states; the C ABI reports malformed inputs first) is an
 * error, not a silently missing result. */
static ERL_NIF_TERM finish_requested(Call* c, ssmkit_status status, int missing_state,
                                     int missing_varlen) {
  if (status != SSMKIT_OK) return call_ssmkit_error(c);
  if (missing_varlen) {
    call_fail(c, "return_varlen_states: expected cu_seqlens (S + 1) with S >= 1 to size them");
    return call_error(c);
  }
  if (missing_state) {
    call_fail(c, "the final state: its shape cannot be read off the inputs");
    return call_error(c);
  }
  return outputs_map(c);
}

#define SIZED_NIF(entry, name, impl, work_expr)                             \
  ERL_NIF_TERM entry(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) { \
    const ERL_NIF_TERM args = argv[0];                                      \
    (void)args;                                                             \
    return run_sized(env, argc, argv, argv[0], (work_expr), name, impl);    \
  }

/* ------------------------------------------------------------------ selective scan */

static int scan_args(Call* c, ssmkit_selective_scan_args* a) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  int64_t algorithm, chunk_length;
  arg_tensor(c, "u", &a->u);
  arg_tensor(c, "delta", &a->delta);
  arg_tensor(c, "a", &a->A);
  arg_tensor(c, "b", &a->B);
  arg_tensor(c, "c", &a->C);
  arg_tensor(c, "d", &a->D);
  arg_tensor(c, "z", &a->z);
  arg_tensor(c, "delta_bias", &a->delta_bias);
  arg_tensor(c, "initial_state", &a->initial_state);
  arg_tensor(c, "seq_idx", &a->seq_idx);
  arg_tensor(c, "cu_seqlens", &a->cu_seqlens);
  arg_bool(c, "delta_softplus", 0, &a->delta_softplus);
  arg_int64(c, "algorithm", SSMKIT_SCAN_SEQUENTIAL, &algorithm);
  arg_int64(c, "chunk_length", 0, &chunk_length);
  a->algorithm = (int32_t)algorithm;
  a->chunk_length = chunk_length;
  if (algorithm < INT32_MIN || algorithm > INT32_MAX) {
    return call_fail(c, "algorithm: expected a scan algorithm, given %lld", (long long)algorithm);
  }
  return !c->failed;
}

/* The (B, D, N) state shape of u (B, D, L) and A (D, N), if both have their ranks. */
static int scan_state_shape(const ssmkit_selective_scan_args* a, int64_t rows, int64_t* shape) {
  if (a->u.rank != 3 || a->A.rank != 2) return 0;
  shape[0] = rows;
  shape[1] = a->u.shape[1];
  shape[2] = a->A.shape[1];
  return 1;
}

static ERL_NIF_TERM scan_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_selective_scan_args a;
  int32_t want_last, want_varlen;
  if (!call_begin(&c, env, "selective_scan_fwd", argv[0]) || !scan_args(&c, &a) ||
      !arg_bool(&c, "return_last_state", 0, &want_last) ||
      !arg_bool(&c, "return_varlen_states", 0, &want_varlen)) {
    return call_error(&c);
  }
  ssmkit_tensor out, last, varlen;
  int64_t state[3];
  const int has_state = scan_state_shape(&a, a.u.rank == 3 ? a.u.shape[0] : 0, state);
  output_like(&c, "out", &a.u, &out);
  output_f32(&c, "last_state", want_last && has_state, 3, state, &last);
  int64_t vstate[3] = {sequences(&a.cu_seqlens), state[1], state[2]};
  output_f32(&c, "varlen_states", want_varlen && has_state && vstate[0] > 0, 3, vstate, &varlen);
  if (c.failed) return call_error(&c);
  const ssmkit_status status = want_varlen
                                   ? ssmkit_selective_scan_fwd_varlen(&a, &out, &last, &varlen)
                                   : ssmkit_selective_scan_fwd(&a, &out, &last);
  return finish_requested(&c, status, want_last && last.data == NULL,
                          want_varlen && varlen.data == NULL);
}

static ERL_NIF_TERM scan_bwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_selective_scan_args a;
  ssmkit_tensor dout, dlast, dvarlen;
  if (!call_begin(&c, env, "selective_scan_bwd", argv[0]) || !scan_args(&c, &a) ||
      !arg_tensor(&c, "dout", &dout) || !arg_tensor(&c, "dlast_state", &dlast) ||
      !arg_tensor(&c, "dvarlen_states", &dvarlen)) {
    return call_error(&c);
  }
  ssmkit_selective_scan_grads g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  output_like(&c, "du", &a.u, &g.du);
  output_like(&c, "ddelta", &a.delta, &g.ddelta);
  output_like(&c, "da", &a.A, &g.dA);
  output_like(&c, "db", &a.B, &g.dB);
  output_like(&c, "dc", &a.C, &g.dC);
  output_like(&c, "dd", &a.D, &g.dD);
  output_like(&c, "dz", &a.z, &g.dz);
  output_like(&c, "ddelta_bias", &a.delta_bias, &g.ddelta_bias);
  output_like(&c, "dinitial_state", &a.initial_state, &g.dinitial_state);
  if (c.failed) return call_error(&c);
  if (dvarlen.data != NULL) {
    return finish(&c, ssmkit_selective_scan_bwd_varlen(&a, &dout, &dlast, &dvarlen, &g));
  }
  return finish(&c, ssmkit_selective_scan_bwd(&a, &dout, &dlast, &g));
}

SIZED_NIF(nif_scan_fwd, "selective_scan_fwd", scan_fwd_impl,
          arg_numel(env, args, "u") * arg_dim(env, args, "a", 1) * 4)
SIZED_NIF(nif_scan_bwd, "selective_scan_bwd", scan_bwd_impl,
          arg_numel(env, args, "u") * arg_dim(env, args, "a", 1) * 12)

/* ------------------------------------------------------------------ SSD (Mamba-2) */

static int ssd_args(Call* c, ssmkit_ssd_args* a) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  int64_t algorithm, chunk_size;
  double dt_min, dt_max;
  arg_tensor(c, "x", &a->x);
  arg_tensor(c, "dt", &a->dt);
  arg_tensor(c, "a", &a->A);
  arg_tensor(c, "b", &a->B);
  arg_tensor(c, "c", &a->C);
  arg_tensor(c, "d", &a->D);
  arg_tensor(c, "z", &a->z);
  arg_tensor(c, "dt_bias", &a->dt_bias);
  arg_tensor(c, "initial_states", &a->initial_states);
  arg_tensor(c, "seq_idx", &a->seq_idx);
  arg_tensor(c, "cu_seqlens", &a->cu_seqlens);
  arg_bool(c, "dt_softplus", 0, &a->dt_softplus);
  arg_bool(c, "has_dt_limit", 0, &a->has_dt_limit);
  arg_double(c, "dt_min", 0.0, &dt_min);
  arg_double(c, "dt_max", 0.0, &dt_max);
  arg_int64(c, "algorithm", SSMKIT_SSD_AUTO, &algorithm);
  arg_int64(c, "chunk_size", 0, &chunk_size);
  a->dt_min = (float)dt_min;
  a->dt_max = (float)dt_max;
  a->algorithm = (int32_t)algorithm;
  a->chunk_size = chunk_size;
  if (algorithm < INT32_MIN || algorithm > INT32_MAX) {
    return call_fail(c, "algorithm: expected an SSD algorithm, given %lld", (long long)algorithm);
  }
  return !c->failed;
}

/* (rows, H, P, N) from x (B, L, H, P) and B (B, L, G, N). */
static int ssd_state_shape(const ssmkit_ssd_args* a, int64_t rows, int64_t* shape) {
  if (a->x.rank != 4 || a->B.rank != 4) return 0;
  shape[0] = rows;
  shape[1] = a->x.shape[2];
  shape[2] = a->x.shape[3];
  shape[3] = a->B.shape[3];
  return 1;
}

static ERL_NIF_TERM ssd_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_ssd_args a;
  int32_t want_final, want_varlen;
  if (!call_begin(&c, env, "ssd_fwd", argv[0]) || !ssd_args(&c, &a) ||
      !arg_bool(&c, "return_final_states", 0, &want_final) ||
      !arg_bool(&c, "return_varlen_states", 0, &want_varlen)) {
    return call_error(&c);
  }
  ssmkit_tensor out, final_states, varlen;
  int64_t state[4];
  const int has_state = ssd_state_shape(&a, a.x.rank == 4 ? a.x.shape[0] : 0, state);
  output_like(&c, "out", &a.x, &out);
  output_f32(&c, "final_states", want_final && has_state, 4, state, &final_states);
  int64_t vstate[4] = {sequences(&a.cu_seqlens), state[1], state[2], state[3]};
  output_f32(&c, "varlen_states", want_varlen && has_state && vstate[0] > 0, 4, vstate, &varlen);
  if (c.failed) return call_error(&c);
  const ssmkit_status status = want_varlen ? ssmkit_ssd_fwd_varlen(&a, &out, &final_states, &varlen)
                                           : ssmkit_ssd_fwd(&a, &out, &final_states);
  return finish_requested(&c, status, want_final && final_states.data == NULL,
                          want_varlen && varlen.data == NULL);
}

static ERL_NIF_TERM ssd_bwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_ssd_args a;
  ssmkit_tensor dout, dfinal, dvarlen;
  if (!call_begin(&c, env, "ssd_bwd", argv[0]) || !ssd_args(&c, &a) ||
      !arg_tensor(&c, "dout", &dout) || !arg_tensor(&c, "dfinal_states", &dfinal) ||
      !arg_tensor(&c, "dvarlen_states", &dvarlen)) {
    return call_error(&c);
  }
  ssmkit_ssd_grads g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  output_like(&c, "dx", &a.x, &g.dx);
  output_like(&c, "ddt", &a.dt, &g.ddt);
  output_like(&c, "da", &a.A, &g.dA);
  output_like(&c, "db", &a.B, &g.dB);
  output_like(&c, "dc", &a.C, &g.dC);
  output_like(&c, "dd", &a.D, &g.dD);
  output_like(&c, "dz", &a.z, &g.dz);
  output_like(&c, "ddt_bias", &a.dt_bias, &g.ddt_bias);
  output_like(&c, "dinitial_states", &a.initial_states, &g.dinitial_states);
  if (c.failed) return call_error(&c);
  if (dvarlen.data != NULL) {
    return finish(&c, ssmkit_ssd_bwd_varlen(&a, &dout, &dfinal, &dvarlen, &g));
  }
  return finish(&c, ssmkit_ssd_bwd(&a, &dout, &dfinal, &g));
}

SIZED_NIF(nif_ssd_fwd, "ssd_fwd", ssd_fwd_impl,
          arg_numel(env, args, "x") * arg_dim(env, args, "b", 3) * 2)
SIZED_NIF(nif_ssd_bwd, "ssd_bwd", ssd_bwd_impl,
          arg_numel(env, args, "x") * arg_dim(env, args, "b", 3) * 6)

/* ------------------------------------------------------------------ causal conv1d */

static int conv_args(Call* c, ssmkit_conv1d_args* a) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  int32_t silu;
  arg_tensor(c, "x", &a->x);
  arg_tensor(c, "weight", &a->weight);
  arg_tensor(c, "bias", &a->bias);
  arg_tensor(c, "initial_states", &a->initial_states);
  arg_tensor(c, "seq_idx", &a->seq_idx);
  arg_bool(c, "silu", 0, &silu);
  a->activation = silu ? SSMKIT_ACT_SILU : SSMKIT_ACT_NONE;
  return !c->failed;
}

static ERL_NIF_TERM conv_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_conv1d_args a;
  int32_t want_final;
  if (!call_begin(&c, env, "causal_conv1d_fwd", argv[0]) || !conv_args(&c, &a) ||
      !arg_bool(&c, "return_final_states", 0, &want_final)) {
    return call_error(&c);
  }
  ssmkit_tensor out, final_states;
  output_like(&c, "out", &a.x, &out);
  memset(&final_states, 0, sizeof final_states);
  if (want_final && a.x.rank == 3 && a.weight.rank == 2 && a.weight.shape[1] >= 1) {
    /* (B, D, K - 1), in x's dtype as causal-conv1d returns it (f32 for other dtypes). */
    const int64_t shape[3] = {a.x.shape[0], a.x.shape[1], a.weight.shape[1] - 1};
    const int32_t dtype = a.x.dtype == SSMKIT_BF16 ? SSMKIT_BF16 : SSMKIT_F32;
    ssmkit_tensor* t = call_output(&c, "final_states", dtype, 3, shape);
    if (t != NULL) final_states = *t;
  }
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_causal_conv1d_fwd(&a, &out, &final_states));
}

static ERL_NIF_TERM conv_bwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_conv1d_args a;
  ssmkit_tensor dout, dfinal;
  if (!call_begin(&c, env, "causal_conv1d_bwd", argv[0]) || !conv_args(&c, &a) ||
      !arg_tensor(&c, "dout", &dout) || !arg_tensor(&c, "dfinal_states", &dfinal)) {
    return call_error(&c);
  }
  ssmkit_conv1d_grads g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  output_like(&c, "dx", &a.x, &g.dx);
  output_like(&c, "dweight", &a.weight, &g.dweight);
  output_like(&c, "dbias", &a.bias, &g.dbias);
  output_like(&c, "dinitial_states", &a.initial_states, &g.dinitial_states);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_causal_conv1d_bwd(&a, &dout, &dfinal, &g));
}

SIZED_NIF(nif_conv_fwd, "causal_conv1d_fwd", conv_fwd_impl,
          arg_numel(env, args, "x") * arg_dim(env, args, "weight", 1))
SIZED_NIF(nif_conv_bwd, "causal_conv1d_bwd", conv_bwd_impl,
          arg_numel(env, args, "x") * arg_dim(env, args, "weight", 1) * 3)

/* ------------------------------------------------------------------ RMSNorm */

static int rmsnorm_args(Call* c, ssmkit_rmsnorm_args* a) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  double eps;
  arg_tensor(c, "x", &a->x);
  arg_tensor(c, "weight", &a->weight);
  arg_tensor(c, "bias", &a->bias);
  arg_tensor(c, "z", &a->z);
  arg_double(c, "eps", 1e-6, &eps);
  arg_bool(c, "norm_before_gate", 1, &a->norm_before_gate);
  arg_int64(c, "group_size", 0, &a->group_size);
  a->eps = (float)eps;
  return !c->failed;
}

static ERL_NIF_TERM rmsnorm_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_rmsnorm_args a;
  if (!call_begin(&c, env, "rmsnorm_fwd", argv[0]) || !rmsnorm_args(&c, &a)) return call_error(&c);
  ssmkit_tensor out;
  output_like(&c, "out", &a.x, &out);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_rmsnorm_fwd(&a, &out));
}

static ERL_NIF_TERM rmsnorm_bwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_rmsnorm_args a;
  ssmkit_tensor dout;
  if (!call_begin(&c, env, "rmsnorm_bwd", argv[0]) || !rmsnorm_args(&c, &a) ||
      !arg_tensor(&c, "dout", &dout)) {
    return call_error(&c);
  }
  ssmkit_rmsnorm_grads g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  output_like(&c, "dx", &a.x, &g.dx);
  output_like(&c, "dweight", &a.weight, &g.dweight);
  output_like(&c, "dbias", &a.bias, &g.dbias);
  output_like(&c, "dz", &a.z, &g.dz);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_rmsnorm_bwd(&a, &dout, &g));
}

static int add_rmsnorm_args(Call* c, ssmkit_add_rmsnorm_args* a) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  double eps;
  arg_tensor(c, "x", &a->x);
  arg_tensor(c, "residual", &a->residual);
  arg_tensor(c, "weight", &a->weight);
  arg_tensor(c, "bias", &a->bias);
  arg_double(c, "eps", 1e-6, &eps);
  a->eps = (float)eps;
  return !c->failed;
}

static ERL_NIF_TERM add_rmsnorm_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_add_rmsnorm_args a;
  if (!call_begin(&c, env, "add_rmsnorm_fwd", argv[0]) || !add_rmsnorm_args(&c, &a)) {
    return call_error(&c);
  }
  ssmkit_tensor out, residual_out;
  output_like(&c, "out", &a.x, &out);
  output_f32(&c, "residual_out", a.x.rank >= 1, a.x.rank, a.x.shape, &residual_out);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_add_rmsnorm_fwd(&a, &out, &residual_out));
}

static ERL_NIF_TERM add_rmsnorm_bwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_add_rmsnorm_args a;
  ssmkit_tensor dout, dresidual_out;
  if (!call_begin(&c, env, "add_rmsnorm_bwd", argv[0]) || !add_rmsnorm_args(&c, &a) ||
      !arg_tensor(&c, "dout", &dout) || !arg_tensor(&c, "dresidual_out", &dresidual_out)) {
    return call_error(&c);
  }
  ssmkit_add_rmsnorm_grads g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  output_like(&c, "dx", &a.x, &g.dx);
  output_like(&c, "dresidual", &a.residual, &g.dresidual);
  output_like(&c, "dweight", &a.weight, &g.dweight);
  output_like(&c, "dbias", &a.bias, &g.dbias);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_add_rmsnorm_bwd(&a, &dout, &dresidual_out, &g));
}

SIZED_NIF(nif_rmsnorm_fwd, "rmsnorm_fwd", rmsnorm_fwd_impl, arg_numel(env, args, "x") * 8)
SIZED_NIF(nif_rmsnorm_bwd, "rmsnorm_bwd", rmsnorm_bwd_impl, arg_numel(env, args, "x") * 16)
SIZED_NIF(nif_add_rmsnorm_fwd, "add_rmsnorm_fwd", add_rmsnorm_fwd_impl,
          arg_numel(env, args, "x") * 8)
SIZED_NIF(nif_add_rmsnorm_bwd, "add_rmsnorm_bwd", add_rmsnorm_bwd_impl,
          arg_numel(env, args, "x") * 16)

/* ------------------------------------------------------------------ linear */

static int linear_args(Call* c, ssmkit_linear_args* a) {
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  arg_tensor(c, "x", &a->x);
  arg_tensor(c, "weight", &a->weight);
  arg_tensor(c, "bias", &a->bias);
  return !c->failed;
}

static ERL_NIF_TERM linear_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_linear_args a;
  if (!call_begin(&c, env, "linear_fwd", argv[0]) || !linear_args(&c, &a)) return call_error(&c);
  ssmkit_tensor out;
  const int64_t shape[2] = {a.x.shape[0], a.weight.shape[0]};
  output_f32(&c, "out", a.x.rank == 2 && a.weight.rank == 2, 2, shape, &out);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_linear_fwd(&a, &out));
}

static ERL_NIF_TERM linear_bwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_linear_args a;
  ssmkit_tensor dout;
  if (!call_begin(&c, env, "linear_bwd", argv[0]) || !linear_args(&c, &a) ||
      !arg_tensor(&c, "dout", &dout)) {
    return call_error(&c);
  }
  ssmkit_linear_grads g;
  int32_t want_dx;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  /* A network's first layer has no use for dx (its input is data): want_dx: false skips it. */
  if (!arg_bool(&c, "want_dx", 1, &want_dx)) return call_error(&c);
  if (want_dx) output_like(&c, "dx", &a.x, &g.dx);
  output_like(&c, "dweight", &a.weight, &g.dweight);
  output_like(&c, "dbias", &a.bias, &g.dbias);
  if (c.failed) return call_error(&c);
  return finish(&c, ssmkit_linear_bwd(&a, &dout, &g));
}

SIZED_NIF(nif_linear_fwd, "linear_fwd", linear_fwd_impl,
          arg_numel(env, args, "x") * arg_dim(env, args, "weight", 0))
SIZED_NIF(nif_linear_bwd, "linear_bwd", linear_bwd_impl,
          arg_numel(env, args, "x") * arg_dim(env, args, "weight", 0) * 2)

/* ------------------------------------------------------------------ threads and versions */

ERL_NIF_TERM nif_set_num_threads(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  int n;
  if (!enif_get_int(env, argv[0], &n)) {
    return make_error(env, "set_num_threads: expected an integer (<= 0: the default)");
  }
  ssmkit_set_num_threads(n);
  return atoms.ok;
}

ERL_NIF_TERM nif_num_threads(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  (void)argv;
  return enif_make_int(env, ssmkit_num_threads());
}

ERL_NIF_TERM nif_set_bf16_products(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  int enable;
  if (enif_is_identical(argv[0], atoms.true_)) {
    enable = 1;
  } else if (enif_is_identical(argv[0], atoms.false_)) {
    enable = 0;
  } else {
    return make_error(env, "set_bf16_products: expected true or false");
  }
  return ssmkit_set_bf16_products(enable) ? atoms.true_ : atoms.false_;
}

ERL_NIF_TERM nif_bf16_products(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)env;
  (void)argc;
  (void)argv;
  return ssmkit_bf16_products() ? atoms.true_ : atoms.false_;
}

ERL_NIF_TERM nif_versions(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  (void)argv;
  const char* v = ssmkit_version_string();
  return enif_make_tuple3(env, make_binary_copy(env, v, strlen(v)),
                          enif_make_uint(env, ssmkit_abi_version()),
                          enif_make_uint(env, SSMKIT_ABI_VERSION));
}

ERL_NIF_TERM nif_live_counts(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  (void)argv;
  ERL_NIF_TERM keys[5] = {enif_make_atom(env, "states"), enif_make_atom(env, "models"),
                          enif_make_atom(env, "sessions"), enif_make_atom(env, "streams"),
                          enif_make_atom(env, "threads")};
  ERL_NIF_TERM values[5] = {enif_make_long(env, atomic_load(&live.states)),
                            enif_make_long(env, atomic_load(&live.models)),
                            enif_make_long(env, atomic_load(&live.sessions)),
                            enif_make_long(env, atomic_load(&live.streams)),
                            enif_make_long(env, atomic_load(&live.threads))};
  ERL_NIF_TERM map;
  enif_make_map_from_arrays(env, keys, values, 5, &map);
  return map;
}

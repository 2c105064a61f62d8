/* The forward of a Mamba-1 network over feature vectors (Ssmkit.Policy's: input projection,
 * Mamba-1 layers, final norm, head) for a whole window in one NIF call. The window through
 * one op NIF at a time cost ~25 calls, each a scheduler hop, fresh output binaries and layout
 * moves; here the ops of the C ABI run back to back on buffers this thread keeps, and only
 * the outputs (B, L, O) come back.
 *
 * Dimension legend: B batch, L frames, T = B * L rows, F d_model, I inputs, D d_inner,
 * N state size, R dt_rank, E = R + 2N (x_proj's rows), K conv width, O outputs.
 *
 *   h = x embed^T                                           (T, F) token-major
 *   per layer: n, res = add_rmsnorm(h, res)                 (T, F)
 *              h = mamba1_mixer(n)                          (T, F): in_proj, conv, x_proj,
 *                                                           dt_proj, scan, out_proj in one call
 *   out = add_rmsnorm(h, res) head^T                        (T, O) = (B, L, O)
 *
 * The mixer (ssmkit_mamba1_mixer_fwd) keeps each group of channels on one thread from in_proj
 * through the scan, which the six op calls it replaces could not. The ops check every
 * parameter; this file checks what its buffers rest on (x's rank, sizes that fit). */
#include <string.h>

#include "nif.h"

#define NET_MAX_LAYERS 32
/* Past this many floats of activations a call is refused rather than attempted. */
#define NET_MAX_WORKSPACE (INT64_C(1) << 32)

typedef struct {
  ssmkit_tensor norm, in_proj, conv_w, conv_b, x_proj, dt_proj, dt_bias, a, d, out_proj;
} Layer;

static ssmkit_tensor view(float* data, int32_t rank, const int64_t* shape, const int64_t* strides) {
  ssmkit_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = SSMKIT_F32;
  t.rank = rank;
  for (int i = 0; i < rank; ++i) {
    t.shape[i] = shape[i];
    t.strides[i] = strides[i];
  }
  return t;
}

/* (rows, cols) row-major. */
static ssmkit_tensor rows(float* data, int64_t r, int64_t c) {
  const int64_t shape[2] = {r, c}, strides[2] = {c, 1};
  return view(data, 2, shape, strides);
}

static int required(Call* c, const char* name, ERL_NIF_TERM map, const char* key,
                    ssmkit_tensor* t) {
  ERL_NIF_TERM v;
  if (c->failed) return 0;
  if (!enif_get_map_value(c->env, map, enif_make_atom(c->env, key), &v) ||
      enif_is_identical(v, atoms.nil)) {
    return call_fail(c, "%s: expected a tensor, given none", name);
  }
  return term_tensor(c, name, v, t);
}

static int rank2(Call* c, const char* name, const ssmkit_tensor* t) {
  if (c->failed) return 0;
  if (t->rank != 2) return call_fail(c, "%s: expected rank 2, given rank %d", name, t->rank);
  return 1;
}

static int layer_args(Call* c, ERL_NIF_TERM map, int i, Layer* p) {
  static const char* const keys[] = {"norm",    "in_proj", "conv_w", "conv_b", "x_proj",
                                     "dt_proj", "dt_bias", "a",      "d",      "out_proj"};
  ssmkit_tensor* slots[] = {&p->norm,    &p->in_proj, &p->conv_w, &p->conv_b, &p->x_proj,
                            &p->dt_proj, &p->dt_bias, &p->a,      &p->d,      &p->out_proj};
  char name[64];
  if (!enif_is_map(c->env, map))
    return call_fail(c, "layers[%d]: expected a map, given %T", i, map);
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; ++k) {
    enif_snprintf(name, sizeof name, "layers[%d].%s", i, keys[k]);
    required(c, name, map, keys[k], slots[k]);
  }
  return !c->failed;
}

/* This thread's workspace, kept between calls (dirty schedulers are long-lived threads), so a
 * warm window allocates and page-faults nothing but its output. */
static float* workspace(int64_t floats) {
  static _Thread_local float* buffer = NULL;
  static _Thread_local int64_t capacity = 0;
  if (floats > capacity) {
    float* grown = enif_alloc((size_t)floats * sizeof(float));
    if (grown == NULL) return NULL;
    enif_free(buffer);
    buffer = grown;
    capacity = floats;
  }
  return buffer;
}

static int op(Call* c, const char* what, int layer, ssmkit_status status) {
  if (status == SSMKIT_OK) return 1;
  if (layer < 0) return call_fail(c, "%s: %s", what, ssmkit_last_error());
  return call_fail(c, "layers[%d].%s: %s", layer, what, ssmkit_last_error());
}

static ssmkit_linear_args linear(ssmkit_tensor x, ssmkit_tensor weight) {
  ssmkit_linear_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.x = x;
  a.weight = weight;
  return a;
}

static int norm(Call* c, const char* what, int layer, float* h, float* res, int first,
                const ssmkit_tensor* weight, float eps, float* out, int64_t T, int64_t F) {
  ssmkit_add_rmsnorm_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.x = rows(h, T, F);
  if (!first) a.residual = rows(res, T, F);
  a.weight = *weight;
  a.eps = eps;
  const ssmkit_tensor o = rows(out, T, F), r = rows(res, T, F);
  return op(c, what, layer, ssmkit_add_rmsnorm_fwd(&a, &o, &r));
}

/* One Mamba-1 mixer: h (B, L, F) = mixer(n (B, L, F)). */
static int mixer(Call* c, int i, const Layer* p, const float* n, float* h, int64_t B, int64_t L,
                 int64_t F) {
  const int64_t shape[3] = {B, L, F}, strides[3] = {L * F, F, 1};
  ssmkit_mamba1_mixer_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.x = view((float*)n, 3, shape, strides);
  a.in_proj = p->in_proj;
  a.conv_weight = p->conv_w;
  a.conv_bias = p->conv_b;
  a.x_proj = p->x_proj;
  a.dt_proj = p->dt_proj;
  a.dt_bias = p->dt_bias;
  a.A = p->a;
  a.D = p->d;
  a.out_proj = p->out_proj;
  const ssmkit_tensor out = view(h, 3, shape, strides);
  return op(c, "mixer", i, ssmkit_mamba1_mixer_fwd(&a, &out));
}

static ERL_NIF_TERM net_fwd_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_tensor x, embed, norm_f, head;
  double eps;
  if (!call_begin(&c, env, "mamba1_net_fwd", argv[0])) return call_error(&c);
  required(&c, "x", c.args, "x", &x);
  required(&c, "embed", c.args, "embed", &embed);
  required(&c, "norm_f", c.args, "norm_f", &norm_f);
  required(&c, "head", c.args, "head", &head);
  arg_double(&c, "eps", 1e-5, &eps);
  if (c.failed) return call_error(&c);
  if (x.rank != 3 || x.dtype != SSMKIT_F32 || x.shape[0] < 1 || x.shape[1] < 1) {
    char shape_text[160];
    format_shape(x.rank, x.shape, shape_text, sizeof shape_text);
    call_fail(&c, "x: expected an f32 tensor (B, L, inputs) with B, L >= 1, given shape %s",
              shape_text);
    return call_error(&c);
  }
  if (!rank2(&c, "embed", &embed) || !rank2(&c, "head", &head)) return call_error(&c);

  ERL_NIF_TERM layer_terms, head_term, tail;
  unsigned n_layers = 0;
  if (!enif_get_map_value(env, c.args, enif_make_atom(env, "layers"), &layer_terms) ||
      !enif_get_list_length(env, layer_terms, &n_layers) || n_layers > NET_MAX_LAYERS) {
    call_fail(&c, "layers: expected a list of at most %d maps", NET_MAX_LAYERS);
    return call_error(&c);
  }
  Layer layers[NET_MAX_LAYERS];
  const int64_t B = x.shape[0], L = x.shape[1], T = B * L, F = embed.shape[0];
  tail = layer_terms;
  for (unsigned i = 0; i < n_layers; ++i) {
    enif_get_list_cell(env, tail, &head_term, &tail);
    if (!layer_args(&c, head_term, (int)i, &layers[i])) return call_error(&c);
  }
  /* Sizes as the ops will see them: each >= 0 from parse_shape; bounded before multiplying. */
  const int64_t per_row = 3 * F;
  if (B > NET_MAX_WORKSPACE || L > NET_MAX_WORKSPACE || per_row > NET_MAX_WORKSPACE ||
      per_row > NET_MAX_WORKSPACE / T) {
    call_fail(&c, "the window's activations exceed %ld floats", (long)NET_MAX_WORKSPACE);
    return call_error(&c);
  }
  const int64_t out_shape[3] = {B, L, head.shape[0]};
  ssmkit_tensor* out = call_output(&c, "out", SSMKIT_F32, 3, out_shape);
  if (out == NULL) return call_error(&c);
  float* ws = workspace(T * per_row);
  if (ws == NULL) {
    call_fail(&c, "could not allocate %ld floats of activations", (long)(T * per_row));
    return call_error(&c);
  }
  float *h = ws, *res = h + T * F, *n = res + T * F;

  ssmkit_linear_args la = linear(rows(x.data, T, x.shape[2]), embed);
  ssmkit_tensor h_rows = rows(h, T, F);
  if (!op(&c, "embed", -1, ssmkit_linear_fwd(&la, &h_rows))) return call_error(&c);
  for (unsigned i = 0; i < n_layers; ++i) {
    if (!norm(&c, "norm", (int)i, h, res, i == 0, &layers[i].norm, (float)eps, n, T, F) ||
        !mixer(&c, (int)i, &layers[i], n, h, B, L, F)) {
      return call_error(&c);
    }
  }
  if (!norm(&c, "norm_f", -1, h, res, n_layers == 0, &norm_f, (float)eps, n, T, F)) {
    return call_error(&c);
  }
  la = linear(rows(n, T, F), head);
  const ssmkit_tensor o = rows(out->data, T, head.shape[0]);
  if (!op(&c, "head", -1, ssmkit_linear_fwd(&la, &o))) return call_error(&c);
  return outputs_map(&c);
}

/* The window's multiply-adds, T times the projections' weights (what run_sized weighs against a
 * millisecond of work: the policy window on a normal scheduler only when asked, dirty: false);
 * saturating, whatever the arguments (the call checks them). */
static int64_t window_work(ErlNifEnv* env, ERL_NIF_TERM args) {
  static const char* const kProjections[] = {"in_proj", "x_proj", "dt_proj", "out_proj"};
  const int64_t inputs = arg_dim(env, args, "x", 2);
  const int64_t T = inputs > 0 ? arg_numel(env, args, "x") / inputs : 0;
  int64_t weights = arg_numel(env, args, "embed") + arg_numel(env, args, "head");
  ERL_NIF_TERM layers, layer;
  if (enif_is_map(env, args) &&
      enif_get_map_value(env, args, enif_make_atom(env, "layers"), &layers)) {
    for (int i = 0; i < NET_MAX_LAYERS && enif_get_list_cell(env, layers, &layer, &layers); ++i) {
      for (size_t k = 0; k < sizeof kProjections / sizeof kProjections[0]; ++k) {
        weights += arg_numel(env, layer, kProjections[k]);
      }
    }
  }
  return T > 0 && weights > INT64_MAX / T ? INT64_MAX : T * weights;
}

ERL_NIF_TERM nif_mamba1_net_fwd(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, argv[0], window_work(env, argv[0]), "mamba1_net_fwd",
                   net_fwd_impl);
}

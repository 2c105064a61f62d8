/* Decode-step state held in a NIF resource: an f32 buffer the decode steps
 * (ssmkit_selective_state_update, ssmkit_causal_conv1d_update) update in place, so a game loop
 * calls one step per frame without copying the state in or out. The garbage collector frees it
 * (or release/1 at once); a step on a released state is an error, and a mutex keeps two
 * processes from stepping the same state at once.
 *
 * Dimension legend: B batch, D channels, N state size, H heads, P head dim, S conv state width. */
#include <string.h>

#include "nif.h"

typedef struct {
  ErlNifMutex* lock;
  float* data; /* NULL once released */
  int32_t rank;
  int64_t shape[SSMKIT_MAX_RANK];
  int64_t numel;
} StateRes;

static ErlNifResourceType* state_type;

static void state_dtor(ErlNifEnv* env, void* obj) {
  (void)env;
  StateRes* s = (StateRes*)obj;
  enif_free(s->data);
  if (s->lock != NULL) enif_mutex_destroy(s->lock);
  atomic_fetch_sub(&live.states, 1);
}

int nif_state_init(ErlNifEnv* env) {
  state_type = enif_open_resource_type(env, NULL, "ssmkit_state", state_dtor,
                                       ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, NULL);
  return state_type != NULL;
}

/* A new state of `shape`, its data a copy of `init` (or zeros). */
static ERL_NIF_TERM make_state(ErlNifEnv* env, int32_t rank, const int64_t* shape,
                               const void* init) {
  const int64_t numel = checked_numel(rank, shape, sizeof(float));
  if (numel < 1) return make_error(env, "state: expected a shape of sizes >= 1");
  StateRes* s = (StateRes*)enif_alloc_resource(state_type, sizeof(StateRes));
  if (s == NULL) return make_error(env, "state: out of memory");
  memset(s, 0, sizeof *s);
  atomic_fetch_add(&live.states, 1);
  s->lock = enif_mutex_create("ssmkit_state");
  s->data = (float*)enif_alloc((size_t)numel * sizeof(float));
  if (s->lock == NULL || s->data == NULL) {
    enif_release_resource(s);
    return make_error(env, "state: out of memory");
  }
  s->rank = rank;
  s->numel = numel;
  memcpy(s->shape, shape, (size_t)rank * sizeof(int64_t));
  if (init != NULL) {
    memcpy(s->data, init, (size_t)numel * sizeof(float));
  } else {
    memset(s->data, 0, (size_t)numel * sizeof(float));
  }
  ERL_NIF_TERM term = enif_make_resource(env, s);
  enif_release_resource(s); /* the term holds the only reference */
  return make_ok(env, term);
}

ERL_NIF_TERM nif_state_new(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  int32_t rank;
  int64_t shape[SSMKIT_MAX_RANK];
  if (!parse_shape(env, argv[0], &rank, shape)) {
    return make_error(env, "state: expected a shape tuple of at most 6 sizes");
  }
  return make_state(env, rank, shape, NULL);
}

ERL_NIF_TERM nif_state_from_tensor(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_tensor t;
  call_begin(&c, env, "state", enif_make_new_map(env));
  if (!term_tensor(&c, "tensor", argv[0], &t)) return call_error(&c);
  if (t.dtype != SSMKIT_F32) {
    char type[16];
    format_dtype(t.dtype, type, sizeof type);
    call_fail(&c, "tensor: expected type {:f, 32}, given %s", type);
    return call_error(&c);
  }
  ERL_NIF_TERM result = make_state(env, t.rank, t.shape, t.data);
  call_end(&c);
  return result;
}

/* Locks and returns the live state of argv[index], or NULL with *error set. */
static StateRes* lock_state(ErlNifEnv* env, ERL_NIF_TERM term, ERL_NIF_TERM* error) {
  StateRes* s;
  if (!enif_get_resource(env, term, state_type, (void**)&s)) {
    *error = make_error(env, "state: expected a state made by Ssmkit.State");
    return NULL;
  }
  enif_mutex_lock(s->lock);
  if (s->data == NULL) {
    enif_mutex_unlock(s->lock);
    *error = make_error(env, "state: released");
    return NULL;
  }
  return s;
}

ERL_NIF_TERM nif_state_to_tensor(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ERL_NIF_TERM error;
  StateRes* s = lock_state(env, argv[0], &error);
  if (s == NULL) return error;
  ERL_NIF_TERM data = make_binary_copy(env, s->data, (size_t)s->numel * sizeof(float));
  ERL_NIF_TERM t =
      enif_make_tuple3(env, data, dtype_term(env, SSMKIT_F32), shape_term(env, s->rank, s->shape));
  enif_mutex_unlock(s->lock);
  return make_ok(env, t);
}

ERL_NIF_TERM nif_state_release(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  StateRes* s;
  if (!enif_get_resource(env, argv[0], state_type, (void**)&s)) {
    return make_error(env, "state: expected a state made by Ssmkit.State");
  }
  enif_mutex_lock(s->lock);
  enif_free(s->data);
  s->data = NULL;
  enif_mutex_unlock(s->lock);
  return atoms.ok;
}

/* The state's descriptor (its own shape, f32, contiguous). */
static ssmkit_tensor state_tensor(StateRes* s) {
  ssmkit_tensor t;
  ssmkit_tensor_contiguous(&t, s->data, SSMKIT_F32, s->rank, s->shape);
  return t;
}

/* The step's out, x's shape and dtype; absent when x is (the C ABI then names x). */
static int output_for(Call* c, const ssmkit_tensor* x, ssmkit_tensor* out) {
  memset(out, 0, sizeof *out);
  if (x->data == NULL) return 1;
  ssmkit_tensor* t = call_output(c, "out", x->dtype, x->rank, x->shape);
  if (t == NULL) return 0;
  *out = *t;
  return 1;
}

/* A decode step of the C ABI on a state: args, the state's descriptor, out. */
typedef ssmkit_status (*StepFn)(const void* args, const ssmkit_tensor* state,
                                const ssmkit_tensor* out);

static ssmkit_status StateUpdateStep(const void* args, const ssmkit_tensor* state,
                                     const ssmkit_tensor* out) {
  return ssmkit_selective_state_update((const ssmkit_state_update_args*)args, state, out);
}

static ssmkit_status ConvUpdateStep(const void* args, const ssmkit_tensor* state,
                                    const ssmkit_tensor* out) {
  return ssmkit_causal_conv1d_update((const ssmkit_conv1d_update_args*)args, state, out);
}

/* Runs `step` on the state of `state_term` (locked for the call), out shaped like x; the
 * call's {:ok, %{out: ...}} or {:error, message}. */
static ERL_NIF_TERM step_on_state(Call* c, ERL_NIF_TERM state_term, const ssmkit_tensor* x,
                                  StepFn step, const void* args) {
  if (c->failed) return call_error(c);
  ssmkit_tensor out;
  if (!output_for(c, x, &out)) return call_error(c);
  ERL_NIF_TERM error;
  StateRes* s = lock_state(c->env, state_term, &error);
  if (s == NULL) {
    call_error(c);
    return error;
  }
  const ssmkit_tensor st = state_tensor(s);
  const ssmkit_status status = step(args, &st, &out);
  enif_mutex_unlock(s->lock);
  if (status != SSMKIT_OK) return call_ssmkit_error(c);
  return outputs_map(c);
}

static ERL_NIF_TERM state_update_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_state_update_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  if (!call_begin(&c, env, "selective_state_update", argv[1])) return call_error(&c);
  arg_tensor(&c, "x", &a.x);
  arg_tensor(&c, "dt", &a.dt);
  arg_tensor(&c, "a", &a.A);
  arg_tensor(&c, "b", &a.B);
  arg_tensor(&c, "c", &a.C);
  arg_tensor(&c, "d", &a.D);
  arg_tensor(&c, "z", &a.z);
  arg_tensor(&c, "dt_bias", &a.dt_bias);
  arg_tensor(&c, "state_batch_indices", &a.state_batch_indices);
  arg_bool(&c, "dt_softplus", 0, &a.dt_softplus);
  return step_on_state(&c, argv[0], &a.x, StateUpdateStep, &a);
}

static ERL_NIF_TERM conv_update_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_conv1d_update_args a;
  int32_t silu;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  if (!call_begin(&c, env, "causal_conv1d_update", argv[1])) return call_error(&c);
  arg_tensor(&c, "x", &a.x);
  arg_tensor(&c, "weight", &a.weight);
  arg_tensor(&c, "bias", &a.bias);
  arg_bool(&c, "silu", 0, &silu);
  a.activation = silu ? SSMKIT_ACT_SILU : SSMKIT_ACT_NONE;
  return step_on_state(&c, argv[0], &a.x, ConvUpdateStep, &a);
}

/* The state's elements: one decode step reads and writes each a few times. */
static int64_t state_work(ErlNifEnv* env, ERL_NIF_TERM term) {
  StateRes* s;
  if (!enif_get_resource(env, term, state_type, (void**)&s)) return 0;
  return s->numel * 4;
}

ERL_NIF_TERM nif_state_update(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, argv[1], state_work(env, argv[0]), "selective_state_update",
                   state_update_impl);
}

ERL_NIF_TERM nif_conv_update(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, argv[1], state_work(env, argv[0]), "causal_conv1d_update",
                   conv_update_impl);
}

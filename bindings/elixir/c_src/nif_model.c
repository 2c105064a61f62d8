/* Models, their tokenizers and sessions over the C ABI's handles, each in a NIF resource freed
 * by the garbage collector. Loading runs on a dirty CPU scheduler (it reads and checks every
 * tensor); prefill and decode move there when the model is large enough to take a millisecond.
 * A session is used by one process at a time (a mutex; the C ABI allows one thread per session).
 *
 * Dimension legend: B batch (prompts), V vocab (a row of logits). */
#include <string.h>

#include "nif.h"

ErlNifResourceType* model_type;

typedef struct {
  ErlNifMutex* lock;
  ssmkit_session* session;
  int64_t max_batch, vocab, parameters;
} SessionRes;

static ErlNifResourceType* session_type;

static void model_dtor(ErlNifEnv* env, void* obj) {
  (void)env;
  ModelRes* m = (ModelRes*)obj;
  ssmkit_tokenizer_free(m->tokenizer);
  ssmkit_model_free(m->model); /* sessions keep the C model alive on their own */
  atomic_fetch_sub(&live.models, 1);
}

static void session_dtor(ErlNifEnv* env, void* obj) {
  (void)env;
  SessionRes* s = (SessionRes*)obj;
  ssmkit_session_free(s->session);
  if (s->lock != NULL) enif_mutex_destroy(s->lock);
  atomic_fetch_sub(&live.sessions, 1);
}

int nif_model_init(ErlNifEnv* env) {
  const ErlNifResourceFlags flags = ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER;
  model_type = enif_open_resource_type(env, NULL, "ssmkit_model", model_dtor, flags, NULL);
  session_type = enif_open_resource_type(env, NULL, "ssmkit_session", session_dtor, flags, NULL);
  return model_type != NULL && session_type != NULL;
}

/* {:ok, model} around a loaded handle (or {:error, message} when status failed). */
static ERL_NIF_TERM wrap_model(ErlNifEnv* env, ssmkit_status status, ssmkit_model* model) {
  if (status != SSMKIT_OK) return make_error(env, ssmkit_last_error());
  ModelRes* m = (ModelRes*)enif_alloc_resource(model_type, sizeof(ModelRes));
  if (m == NULL) {
    ssmkit_model_free(model);
    return make_error(env, "model: out of memory");
  }
  memset(m, 0, sizeof *m);
  atomic_fetch_add(&live.models, 1);
  m->model = model;
  m->config.struct_size = sizeof m->config;
  ssmkit_model_get_config(model, &m->config);
  if (ssmkit_model_tokenizer(model, &m->tokenizer) != SSMKIT_OK) m->tokenizer = NULL;
  ERL_NIF_TERM term = enif_make_resource(env, m);
  enif_release_resource(m);
  return make_ok(env, term);
}

ERL_NIF_TERM nif_model_load(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ErlNifBinary path;
  if (!enif_inspect_binary(env, argv[0], &path) || memchr(path.data, 0, path.size) != NULL) {
    return make_error(env, "model_load: dir: expected a path (a string without NUL bytes)");
  }
  char* dir = (char*)enif_alloc(path.size + 1);
  if (dir == NULL) return make_error(env, "model_load: out of memory");
  memcpy(dir, path.data, path.size);
  dir[path.size] = '\0';
  ssmkit_model* model = NULL;
  const ssmkit_status status = ssmkit_model_load(dir, &model);
  enif_free(dir);
  return wrap_model(env, status, model);
}

ERL_NIF_TERM nif_model_load_default(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  (void)argv;
  ssmkit_model* model = NULL;
  const ssmkit_status status = ssmkit_model_load_default(&model);
  return wrap_model(env, status, model);
}

static int get_model(ErlNifEnv* env, ERL_NIF_TERM term, ModelRes** m) {
  return enif_get_resource(env, term, model_type, (void**)m);
}

ERL_NIF_TERM nif_model_config(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ModelRes* m;
  if (!get_model(env, argv[0], &m)) return make_error(env, "model: expected a loaded model");
  const ssmkit_model_config* c = &m->config;
  const char* names[] = {"d_model",      "n_layer",      "vocab_size",     "config_vocab_size",
                         "d_inner",      "d_state",      "d_conv",         "dt_rank",
                         "nheads",       "headdim",      "ngroups",        "bos_token_id",
                         "eos_token_id", "pad_token_id", "parameter_count"};
  const int64_t values[] = {
      c->d_model,      c->n_layer,      c->vocab_size,     c->config_vocab_size,
      c->d_inner,      c->d_state,      c->d_conv,         c->dt_rank,
      c->nheads,       c->headdim,      c->ngroups,        c->bos_token_id,
      c->eos_token_id, c->pad_token_id, c->parameter_count};
  enum { kFields = sizeof values / sizeof *values };
  ERL_NIF_TERM keys[kFields + 2], vals[kFields + 2], map;
  for (int i = 0; i < kFields; ++i) {
    keys[i] = enif_make_atom(env, names[i]);
    vals[i] = enif_make_int64(env, values[i]);
  }
  keys[kFields] = enif_make_atom(env, "arch");
  vals[kFields] = enif_make_atom(env, c->arch == SSMKIT_ARCH_MAMBA2 ? "mamba2" : "mamba1");
  keys[kFields + 1] = enif_make_atom(env, "tokenizer");
  vals[kFields + 1] = m->tokenizer != NULL ? atoms.true_ : atoms.false_;
  enif_make_map_from_arrays(env, keys, vals, kFields + 2, &map);
  return make_ok(env, map);
}

/* A list of token ids in [0, 2^31) as a new int32 array (enif_free it); NULL with *error set. */
static int32_t* token_array(ErlNifEnv* env, ERL_NIF_TERM list, const char* name, unsigned* n,
                            ERL_NIF_TERM* error) {
  char message[160];
  if (!enif_get_list_length(env, list, n)) {
    enif_snprintf(message, sizeof message, "%s: expected a list of token ids, given %T", name,
                  list);
    *error = make_error(env, message);
    return NULL;
  }
  int32_t* ids = (int32_t*)enif_alloc(((size_t)*n + 1) * sizeof(int32_t));
  if (ids == NULL) {
    *error = make_error(env, "out of memory");
    return NULL;
  }
  ERL_NIF_TERM head;
  for (unsigned i = 0; i < *n; ++i) {
    enif_get_list_cell(env, list, &head, &list);
    int v;
    if (!enif_get_int(env, head, &v)) {
      enif_snprintf(message, sizeof message, "%s: expected integer token ids, given %T", name,
                    head);
      enif_free(ids);
      *error = make_error(env, message);
      return NULL;
    }
    ids[i] = v;
  }
  return ids;
}

static ERL_NIF_TERM id_list(ErlNifEnv* env, const int32_t* ids, int64_t n) {
  ERL_NIF_TERM list = enif_make_list(env, 0);
  for (int64_t i = n - 1; i >= 0; --i)
    list = enif_make_list_cell(env, enif_make_int(env, ids[i]), list);
  return list;
}

ERL_NIF_TERM nif_tokenizer_encode(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ModelRes* m;
  ErlNifBinary text;
  if (!get_model(env, argv[0], &m)) return make_error(env, "model: expected a loaded model");
  if (m->tokenizer == NULL) return make_error(env, "encode: the model has no tokenizer");
  if (!enif_inspect_binary(env, argv[1], &text)) {
    return make_error(env, "encode: text: expected a UTF-8 binary");
  }
  int64_t n = 0;
  if (ssmkit_tokenizer_encode(m->tokenizer, (const char*)text.data, text.size, NULL, 0, &n) !=
      SSMKIT_OK) {
    return make_error(env, ssmkit_last_error());
  }
  int32_t* ids = (int32_t*)enif_alloc(((size_t)n + 1) * sizeof(int32_t));
  if (ids == NULL) return make_error(env, "encode: out of memory");
  ERL_NIF_TERM result;
  if (ssmkit_tokenizer_encode(m->tokenizer, (const char*)text.data, text.size, ids, n, &n) !=
      SSMKIT_OK) {
    result = make_error(env, ssmkit_last_error());
  } else {
    result = make_ok(env, id_list(env, ids, n));
  }
  enif_free(ids);
  return result;
}

ERL_NIF_TERM nif_tokenizer_decode(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ModelRes* m;
  if (!get_model(env, argv[0], &m)) return make_error(env, "model: expected a loaded model");
  if (m->tokenizer == NULL) return make_error(env, "decode: the model has no tokenizer");
  const int skip_special = enif_is_identical(argv[2], atoms.true_);
  unsigned n;
  ERL_NIF_TERM error;
  int32_t* ids = token_array(env, argv[1], "decode: ids", &n, &error);
  if (ids == NULL) return error;
  size_t length = 0;
  ERL_NIF_TERM result;
  if (ssmkit_tokenizer_decode(m->tokenizer, ids, n, skip_special, NULL, 0, &length) != SSMKIT_OK) {
    result = make_error(env, ssmkit_last_error());
  } else {
    char* text = (char*)enif_alloc(length + 1);
    if (text == NULL) {
      result = make_error(env, "decode: out of memory");
    } else if (ssmkit_tokenizer_decode(m->tokenizer, ids, n, skip_special, text, length + 1,
                                       &length) != SSMKIT_OK) {
      result = make_error(env, ssmkit_last_error());
    } else {
      result = make_ok(env, make_binary_copy(env, text, length));
    }
    enif_free(text);
  }
  enif_free(ids);
  return result;
}

/* ------------------------------------------------------------------ sessions */

ERL_NIF_TERM nif_session_new(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ModelRes* m;
  ErlNifSInt64 max_batch;
  if (!get_model(env, argv[0], &m)) return make_error(env, "model: expected a loaded model");
  if (!enif_get_int64(env, argv[1], &max_batch)) {
    return make_error(env, "session: max_batch: expected an integer >= 1");
  }
  ssmkit_session* session = NULL;
  if (ssmkit_session_create(m->model, max_batch, &session) != SSMKIT_OK) {
    return make_error(env, ssmkit_last_error());
  }
  SessionRes* s = (SessionRes*)enif_alloc_resource(session_type, sizeof(SessionRes));
  if (s == NULL) {
    ssmkit_session_free(session);
    return make_error(env, "session: out of memory");
  }
  memset(s, 0, sizeof *s);
  atomic_fetch_add(&live.sessions, 1);
  s->session = session;
  s->lock = enif_mutex_create("ssmkit_session");
  s->max_batch = max_batch;
  s->vocab = m->config.vocab_size;
  s->parameters = m->config.parameter_count;
  ERL_NIF_TERM term = enif_make_resource(env, s);
  enif_release_resource(s);
  if (s->lock == NULL) return make_error(env, "session: out of memory");
  return make_ok(env, term);
}

/* A (rows, V) f32 logits binary and its descriptor; 0 when the allocation fails. */
static int logits_output(ErlNifEnv* env, int64_t rows, int64_t vocab, ErlNifBinary* bin,
                         ssmkit_tensor* t) {
  if (rows < 1 || rows > (INT64_C(1) << 40) / (vocab > 0 ? vocab : 1)) return 0;
  if (!enif_alloc_binary((size_t)(rows * vocab) * sizeof(float), bin)) return 0;
  const int64_t shape[2] = {rows, vocab};
  ssmkit_tensor_contiguous(t, bin->data, SSMKIT_F32, 2, shape);
  (void)env;
  return 1;
}

static ERL_NIF_TERM logits_term(ErlNifEnv* env, ErlNifBinary* bin, const ssmkit_tensor* t) {
  return make_ok(env, enif_make_tuple3(env, enif_make_binary(env, bin), dtype_term(env, SSMKIT_F32),
                                       shape_term(env, 2, t->shape)));
}

static int get_session(ErlNifEnv* env, ERL_NIF_TERM term, SessionRes** s) {
  return enif_get_resource(env, term, session_type, (void**)s);
}

static ERL_NIF_TERM session_prefill_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  SessionRes* s;
  unsigned batch;
  if (!get_session(env, argv[0], &s)) return make_error(env, "session: expected a session");
  if (!enif_get_list_length(env, argv[1], &batch) || batch < 1 || batch > s->max_batch) {
    return make_error(env, "prefill: prompts: expected a list of 1 to max_batch token lists");
  }
  int32_t* prompts[64];
  int64_t lengths[64];
  if (batch > 64) return make_error(env, "prefill: prompts: at most 64 prompts per call");
  ERL_NIF_TERM list = argv[1], head, result = atoms.nil;
  unsigned made = 0;
  for (; made < batch; ++made) {
    unsigned n;
    enif_get_list_cell(env, list, &head, &list);
    prompts[made] = token_array(env, head, "prefill: prompts", &n, &result);
    if (prompts[made] == NULL) break;
    lengths[made] = n;
  }
  if (made == batch) {
    ErlNifBinary bin;
    ssmkit_prefill_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.batch = batch;
    a.tokens = (const int32_t* const*)prompts;
    a.lengths = lengths;
    if (!logits_output(env, batch, s->vocab, &bin, &a.logits)) {
      result = make_error(env, "prefill: out of memory");
    } else {
      enif_mutex_lock(s->lock);
      const ssmkit_status status = ssmkit_session_prefill(s->session, &a);
      enif_mutex_unlock(s->lock);
      if (status == SSMKIT_OK) {
        result = logits_term(env, &bin, &a.logits);
      } else {
        result = make_error(env, ssmkit_last_error());
        enif_release_binary(&bin);
      }
    }
  }
  for (unsigned i = 0; i < made; ++i) enif_free(prompts[i]);
  return result;
}

static ERL_NIF_TERM session_decode_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  SessionRes* s;
  unsigned n;
  ERL_NIF_TERM error;
  if (!get_session(env, argv[0], &s)) return make_error(env, "session: expected a session");
  int32_t* tokens = token_array(env, argv[1], "decode: tokens", &n, &error);
  if (tokens == NULL) return error;
  ErlNifBinary bin;
  ssmkit_tensor logits;
  ERL_NIF_TERM result;
  if (n < 1 || n > s->max_batch || !logits_output(env, n, s->vocab, &bin, &logits)) {
    result = make_error(env, "decode: tokens: expected one token id per sequence of the prefill");
  } else {
    enif_mutex_lock(s->lock);
    const ssmkit_status status = ssmkit_session_decode(s->session, tokens, n, &logits);
    enif_mutex_unlock(s->lock);
    if (status == SSMKIT_OK) {
      result = logits_term(env, &bin, &logits);
    } else {
      result = make_error(env, ssmkit_last_error());
      enif_release_binary(&bin);
    }
  }
  enif_free(tokens);
  return result;
}

/* Parameters x tokens: the multiply-adds of a forward. */
static int64_t session_work(ErlNifEnv* env, ERL_NIF_TERM session, ERL_NIF_TERM prompts,
                            int nested) {
  SessionRes* s;
  unsigned n = 0, total = 0;
  if (!get_session(env, session, &s)) return 0;
  if (!nested) return enif_get_list_length(env, prompts, &n) ? s->parameters * n : 0;
  ERL_NIF_TERM head;
  for (int i = 0; i < 64 && enif_get_list_cell(env, prompts, &head, &prompts); ++i) {
    if (enif_get_list_length(env, head, &n)) total += n;
  }
  return s->parameters * total;
}

ERL_NIF_TERM nif_session_prefill(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, atoms.nil, session_work(env, argv[0], argv[1], 1),
                   "session_prefill", session_prefill_impl);
}

ERL_NIF_TERM nif_session_decode(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, atoms.nil, session_work(env, argv[0], argv[1], 0),
                   "session_decode", session_decode_impl);
}

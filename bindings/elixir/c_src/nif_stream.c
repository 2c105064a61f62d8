/* Streaming generation: ssmkit_generate on a thread of its own (a long generation would
 * otherwise hold a scheduler), sending the caller {:token, ref, id, text} for every token as it is
 * produced, then {:done, ref, info} (or {:error, ref, message}). cancel/1 sets a flag the token
 * callback returns, so the generation stops after the token in flight; a caller that has died
 * stops it the same way (its message cannot be delivered). The thread owns a session of its own
 * and a reference to the model, and frees both before it exits: a cancelled stream leaks
 * nothing (the live counters, which the tests read, come back to where they were). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nif.h"

typedef struct {
  atomic_int cancelled;
  atomic_int finished;
  ErlNifPid pid;
  ErlNifEnv* ref_env; /* holds `ref` for the messages */
  ERL_NIF_TERM ref;
  ErlNifEnv* msg_env;
  ModelRes* model; /* a kept reference, released when the thread ends */
  ssmkit_session* session;
  char* prompt;           /* NUL-terminated, or NULL with prompt_tokens */
  int32_t* prompt_tokens; /* enif_alloc'ed */
  int64_t n_prompt_tokens;
  ssmkit_generate_args args;
} StreamRes;

static ErlNifResourceType* stream_type;

static void stream_dtor(ErlNifEnv* env, void* obj) {
  (void)env;
  StreamRes* s = (StreamRes*)obj;
  /* The thread holds a reference until it has finished: nothing here races with it. */
  if (s->ref_env != NULL) enif_free_env(s->ref_env);
  if (s->msg_env != NULL) enif_free_env(s->msg_env);
  ssmkit_session_free(s->session);
  enif_free(s->prompt);
  enif_free(s->prompt_tokens);
  if (s->model != NULL) enif_release_resource(s->model);
  atomic_fetch_sub(&live.streams, 1);
}

int nif_stream_init(ErlNifEnv* env) {
  stream_type = enif_open_resource_type(env, NULL, "ssmkit_stream", stream_dtor,
                                        ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, NULL);
  return stream_type != NULL;
}

/* Sends {tag, ref, a, b} (b may be 0: a 3-tuple) to the caller; 0 if it is gone. */
static int send_message(StreamRes* s, ERL_NIF_TERM tag, ERL_NIF_TERM a, int has_b, ERL_NIF_TERM b) {
  ERL_NIF_TERM ref = enif_make_copy(s->msg_env, s->ref);
  ERL_NIF_TERM msg = has_b ? enif_make_tuple4(s->msg_env, tag, ref, a, b)
                           : enif_make_tuple3(s->msg_env, tag, ref, a);
  const int delivered = enif_send(NULL, &s->pid, s->msg_env, msg);
  enif_clear_env(s->msg_env);
  return delivered;
}

static int32_t on_token(void* user_data, int32_t token, const char* text, size_t text_length) {
  StreamRes* s = (StreamRes*)user_data;
  ERL_NIF_TERM piece =
      make_binary_copy(s->msg_env, text != NULL ? text : "", text != NULL ? text_length : 0);
  const int delivered = send_message(s, atoms.token, enif_make_int(s->msg_env, token), 1, piece);
  return (!delivered || atomic_load(&s->cancelled)) ? 1 : 0;
}

static ERL_NIF_TERM result_map(ErlNifEnv* env, const ssmkit_generate_result* r, int cancelled) {
  ERL_NIF_TERM keys[7] = {
      enif_make_atom(env, "prompt_tokens"),      enif_make_atom(env, "generated_tokens"),
      enif_make_atom(env, "prefill_seconds"),    enif_make_atom(env, "decode_seconds"),
      enif_make_atom(env, "stopped_at_eos"),     enif_make_atom(env, "cancelled"),
      enif_make_atom(env, "stopped_by_callback")};
  ERL_NIF_TERM values[7] = {enif_make_int64(env, r->prompt_tokens),
                            enif_make_int64(env, r->generated_tokens),
                            enif_make_double(env, r->prefill_seconds),
                            enif_make_double(env, r->decode_seconds),
                            r->stopped_at_eos ? atoms.true_ : atoms.false_,
                            cancelled ? atoms.true_ : atoms.false_,
                            r->stopped_by_callback ? atoms.true_ : atoms.false_};
  ERL_NIF_TERM map;
  enif_make_map_from_arrays(env, keys, values, 7, &map);
  return map;
}

static void* stream_main(void* arg) {
  StreamRes* s = (StreamRes*)arg;
  ssmkit_generate_result result;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  const ssmkit_status status = ssmkit_generate(s->session, &s->args, &result);
  if (status == SSMKIT_OK) {
    send_message(s, atoms.done, result_map(s->msg_env, &result, atomic_load(&s->cancelled)), 0, 0);
  } else {
    const char* message = ssmkit_last_error();
    send_message(s, atoms.error, make_binary_copy(s->msg_env, message, strlen(message)), 0, 0);
  }
  /* The session's caches are the stream's largest allocation: free them now rather than when
   * the garbage collector gets to the handle. */
  ssmkit_session_free(s->session);
  s->session = NULL;
  atomic_store(&s->finished, 1);
  atomic_fetch_sub(&live.threads, 1);
  enif_release_resource(s);
  return NULL;
}

/* Reads the options map into s->args; 0 with *error set on a bad one. */
static int read_options(ErlNifEnv* env, ERL_NIF_TERM opts, StreamRes* s, ERL_NIF_TERM* error) {
  Call c;
  int64_t max_tokens, top_k, seed;
  double temperature, top_p;
  int32_t ignore_eos, keep_special;
  call_begin(&c, env, "stream", opts);
  arg_int64(&c, "max_tokens", 64, &max_tokens);
  arg_double(&c, "temperature", 0.0, &temperature);
  arg_double(&c, "top_p", 0.0, &top_p);
  arg_int64(&c, "top_k", 0, &top_k);
  arg_int64(&c, "seed", 0, &seed);
  arg_bool(&c, "ignore_eos", 0, &ignore_eos);
  arg_bool(&c, "keep_special", 0, &keep_special);
  if (c.failed) {
    *error = call_error(&c);
    return 0;
  }
  s->args.max_tokens = max_tokens;
  s->args.temperature = (float)temperature;
  s->args.top_p = (float)top_p;
  s->args.top_k = top_k;
  s->args.seed = (uint64_t)seed;
  s->args.ignore_eos = ignore_eos;
  s->args.keep_special = keep_special;
  return 1;
}

/* Reads the prompt: a binary (text, needs the model's tokenizer) or a list of token ids. */
static int read_prompt(ErlNifEnv* env, ERL_NIF_TERM prompt, StreamRes* s, ERL_NIF_TERM* error) {
  ErlNifBinary text;
  if (enif_inspect_binary(env, prompt, &text)) {
    if (s->model->tokenizer == NULL) {
      *error = make_error(env, "stream: prompt: text needs a tokenizer; give token ids");
      return 0;
    }
    if (memchr(text.data, 0, text.size) != NULL) {
      *error = make_error(env, "stream: prompt: expected text without NUL bytes");
      return 0;
    }
    s->prompt = (char*)enif_alloc(text.size + 1);
    if (s->prompt == NULL) {
      *error = make_error(env, "stream: out of memory");
      return 0;
    }
    memcpy(s->prompt, text.data, text.size);
    s->prompt[text.size] = '\0';
    s->args.prompt = s->prompt;
    return 1;
  }
  unsigned n;
  if (!enif_get_list_length(env, prompt, &n)) {
    *error = make_error(env, "stream: prompt: expected text (a binary) or a list of token ids");
    return 0;
  }
  s->prompt_tokens = (int32_t*)enif_alloc(((size_t)n + 1) * sizeof(int32_t));
  if (s->prompt_tokens == NULL) {
    *error = make_error(env, "stream: out of memory");
    return 0;
  }
  ERL_NIF_TERM head, list = prompt;
  for (unsigned i = 0; i < n; ++i) {
    int v;
    enif_get_list_cell(env, list, &head, &list);
    if (!enif_get_int(env, head, &v)) {
      *error = make_error(env, "stream: prompt: expected integer token ids");
      return 0;
    }
    s->prompt_tokens[i] = v;
  }
  s->n_prompt_tokens = n;
  s->args.prompt_tokens = s->prompt_tokens;
  s->args.n_prompt_tokens = n;
  return 1;
}

/* stream_start(model, prompt, opts, ref) -> {:ok, stream} | {:error, message} */
ERL_NIF_TERM nif_stream_start(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ModelRes* m;
  if (!enif_get_resource(env, argv[0], model_type, (void**)&m)) {
    return make_error(env, "model: expected a loaded model");
  }
  if (!enif_is_ref(env, argv[3])) return make_error(env, "stream: expected a reference");
  StreamRes* s = (StreamRes*)enif_alloc_resource(stream_type, sizeof(StreamRes));
  if (s == NULL) return make_error(env, "stream: out of memory");
  memset(s, 0, sizeof *s);
  atomic_fetch_add(&live.streams, 1);
  enif_keep_resource(m);
  s->model = m;
  s->args.struct_size = sizeof s->args;
  s->args.tokenizer = m->tokenizer;
  s->args.on_token = on_token;
  s->args.user_data = s;
  ERL_NIF_TERM term = enif_make_resource(env, s);
  enif_release_resource(s); /* `term` holds it; the thread takes its own below */
  ERL_NIF_TERM error;
  if (!read_options(env, argv[2], s, &error) || !read_prompt(env, argv[1], s, &error)) {
    return error;
  }
  enif_self(env, &s->pid);
  s->ref_env = enif_alloc_env();
  s->msg_env = enif_alloc_env();
  if (s->ref_env == NULL || s->msg_env == NULL) return make_error(env, "stream: out of memory");
  s->ref = enif_make_copy(s->ref_env, argv[3]);
  if (ssmkit_session_create(m->model, 1, &s->session) != SSMKIT_OK) {
    return make_error(env, ssmkit_last_error());
  }
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  enif_keep_resource(s); /* the thread's reference */
  atomic_fetch_add(&live.threads, 1);
  const int rc = pthread_create(&thread, &attr, stream_main, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_fetch_sub(&live.threads, 1);
    enif_release_resource(s);
    return make_error(env, "stream: could not start a thread");
  }
  return make_ok(env, term);
}

ERL_NIF_TERM nif_stream_cancel(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  StreamRes* s;
  if (!enif_get_resource(env, argv[0], stream_type, (void**)&s)) {
    return make_error(env, "stream: expected a stream");
  }
  atomic_store(&s->cancelled, 1);
  return atoms.ok;
}

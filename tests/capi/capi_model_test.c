/* The C ABI's inference engine from a C11 program (compiled as C, -pedantic -Werror): the tiny
 * checkpoints of scripts/make_model_fixtures.py (tests/fixtures/models; Mamba and, loaded
 * unchanged through the same calls, two hybrid families) loaded through
 * ssmkit_model_load, their logits against the ones transformers recorded (expected.safetensors,
 * read here with a few lines of C): every prefill position, a batch of prompts of different
 * lengths, teacher-forced decode steps; greedy generation (from tokens and from text) against
 * transformers' greedy continuation; the tokenizers; the built-in model; and bad inputs, each
 * giving its status and a message naming the argument, with the outputs left untouched.
 * Prints "N passed, N failed"; exits non-zero on a failure.
 *
 * Dimension legend: B batch, L prompt length, V vocab (304 in the fixtures), S decode steps. */
#include "c_test_harness.h"

#define MODELS SSMKIT_FIXTURES_DIR "/models/"

static const double kTolerance = 1e-4; /* the engine's parity bar (tests/model_parity_test.cpp) */

enum { kPrompts = 4, kFixtureVocab = 304 };
static const char* const kPromptKeys[kPrompts] = {"p0", "p1", "p2", "p3"};
/* The prompts' text (scripts/make_model_fixtures.py PROMPTS), whose ids the file records. */
static const char* const kPromptText[kPrompts] = {
    "The", "It doesn't look back", "A quick brown fox jumps over the lazy dog. Numbers: 12 345",
    "Caf\xC3\xA9, na\xC3\xAFve, \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"};

/* ------------------------------------------------------------------ safetensors, minimally */

/* A whole file in memory: an 8-byte little-endian header length, the JSON header, the data. */
typedef struct {
  unsigned char* bytes;
  char* header; /* NUL-terminated copy */
  const unsigned char* data;
  size_t data_size;
} Safetensors;

static int st_open(const char* path, Safetensors* st) {
  memset(st, 0, sizeof *st);
  FILE* f = fopen(path, "rb");
  if (f == NULL) return 0;
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  st->bytes = (unsigned char*)malloc((size_t)size);
  const size_t got = fread(st->bytes, 1, (size_t)size, f);
  fclose(f);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | st->bytes[i];
  if (got != (size_t)size || size < 8 || n > (uint64_t)size - 8) return 0;
  st->header = (char*)malloc((size_t)n + 1);
  memcpy(st->header, st->bytes + 8, (size_t)n);
  st->header[n] = '\0';
  st->data = st->bytes + 8 + n;
  st->data_size = (size_t)size - 8 - (size_t)n;
  return 1;
}

static void st_close(Safetensors* st) {
  free(st->bytes);
  free(st->header);
}

static size_t dtype_size(const char* dtype) {
  if (strncmp(dtype, "F32\"", 4) == 0 || strncmp(dtype, "I32\"", 4) == 0) return 4;
  if (strncmp(dtype, "BF16\"", 5) == 0 || strncmp(dtype, "F16\"", 4) == 0) return 2;
  return 0;
}

/* The entry whose JSON object starts at `obj` ('{'; its keys in any order): its element size,
 * element count and data. */
static int st_entry(const Safetensors* st, const char* obj, size_t* elem, int64_t* count,
                    const unsigned char** data) {
  const char* end = strchr(obj, '}');
  const char* dtype = strstr(obj, "\"dtype\":\"");
  const char* offsets = strstr(obj, "\"data_offsets\":[");
  if (end == NULL || dtype == NULL || offsets == NULL || dtype > end || offsets > end) return 0;
  *elem = dtype_size(dtype + 9);
  char* after = NULL;
  const long long begin = strtoll(offsets + 16, &after, 10);
  const long long stop = strtoll(after + 1, NULL, 10);
  if (*elem == 0 || begin < 0 || stop < begin || (size_t)stop > st->data_size) return 0;
  *count = (int64_t)((stop - begin) / (long long)*elem);
  *data = st->data + begin;
  return 1;
}

/* The tensor `name` (F32 or I32) copied out: doubles for F32, int32 for I32; NULL if absent. */
static void* st_read(const Safetensors* st, const char* name, int as_int, int64_t* count) {
  char key[128];
  snprintf(key, sizeof key, "\"%s\":{", name);
  const char* p = strstr(st->header, key);
  size_t elem = 0;
  const unsigned char* data = NULL;
  if (p == NULL || !st_entry(st, p + strlen(key) - 1, &elem, count, &data) || elem != 4)
    return NULL;
  if (as_int) {
    int32_t* out = (int32_t*)malloc((size_t)*count * sizeof(int32_t));
    memcpy(out, data, (size_t)*count * sizeof(int32_t));
    return out;
  }
  double* out = (double*)malloc((size_t)*count * sizeof(double));
  for (int64_t i = 0; i < *count; ++i) {
    float v;
    memcpy(&v, data + i * 4, 4);
    out[i] = v;
  }
  return out;
}

/* The number of elements of every tensor in the file: a checkpoint's parameter count. */
static int64_t st_total_elements(const Safetensors* st) {
  int64_t total = 0;
  for (const char* p = strstr(st->header, "\"data_offsets\":["); p != NULL;
       p = strstr(p + 1, "\"data_offsets\":[")) {
    const char* obj = p;
    while (obj > st->header && *obj != '{') --obj;
    size_t elem = 0;
    int64_t count = 0;
    const unsigned char* data = NULL;
    if (st_entry(st, obj, &elem, &count, &data)) total += count;
  }
  return total;
}

/* ------------------------------------------------------------------ the recorded logits */

/* What transformers computed for one prompt. */
typedef struct {
  int32_t* ids; /* (L) */
  int64_t L;
  double* prefill; /* (L, V): the logits at every position */
  int32_t* greedy; /* (S): generate()'s greedy continuation */
  int64_t S;
  double* decode; /* (S, V): the logits before each greedy token */
} Expected;

static int read_expected(const char* fixture, Expected out[kPrompts]) {
  char path[512], name[64];
  snprintf(path, sizeof path, MODELS "%s/expected.safetensors", fixture);
  Safetensors st;
  if (!st_open(path, &st)) {
    CHECK(0, "cannot read %s", path);
    return 0;
  }
  int ok = 1;
  for (int p = 0; p < kPrompts; ++p) {
    int64_t n_prefill = 0, n_decode = 0;
    snprintf(name, sizeof name, "%s.ids", kPromptKeys[p]);
    out[p].ids = (int32_t*)st_read(&st, name, 1, &out[p].L);
    snprintf(name, sizeof name, "%s.greedy_ids", kPromptKeys[p]);
    out[p].greedy = (int32_t*)st_read(&st, name, 1, &out[p].S);
    snprintf(name, sizeof name, "%s.prefill_logits", kPromptKeys[p]);
    out[p].prefill = (double*)st_read(&st, name, 0, &n_prefill);
    snprintf(name, sizeof name, "%s.decode_logits", kPromptKeys[p]);
    out[p].decode = (double*)st_read(&st, name, 0, &n_decode);
    ok &= out[p].ids && out[p].greedy && out[p].prefill && out[p].decode &&
          n_prefill == out[p].L * kFixtureVocab && n_decode == out[p].S * kFixtureVocab;
  }
  CHECK(ok, "%s: a recorded tensor is missing or mis-sized", path);
  st_close(&st);
  return ok;
}

static void free_expected(Expected e[kPrompts]) {
  for (int p = 0; p < kPrompts; ++p) {
    free(e[p].ids), free(e[p].greedy), free(e[p].prefill), free(e[p].decode);
  }
}

/* ------------------------------------------------------------------ helpers */

static float* poisoned(int64_t n) {
  float* a = (float*)malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) a[i] = NAN;
  return a;
}

static int all_nan(const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!isnan(a[i])) return 0;
  }
  return 1;
}

static ssmkit_tensor logits_tensor(float* data, int32_t rank, int64_t d0, int64_t d1, int64_t d2) {
  const int64_t shape[3] = {d0, d1, d2};
  ssmkit_tensor t;
  if (ssmkit_tensor_contiguous(&t, data, SSMKIT_F32, rank, shape) != SSMKIT_OK) {
    fprintf(stderr, "ssmkit_tensor_contiguous: %s\n", ssmkit_last_error());
    exit(2);
  }
  return t;
}

static int32_t argmax(const float* a, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (a[i] > a[best]) best = i;
  }
  return (int32_t)best;
}

/* What the generation callback saw. */
typedef struct {
  int32_t tokens[512];
  int64_t n;
  char text[4096];
  size_t text_len;
  int saw_text;
  int64_t stop_after; /* ask to stop after this many tokens (0: never) */
} Collected;

static int32_t collect(void* user_data, int32_t token, const char* text, size_t text_length) {
  Collected* c = (Collected*)user_data;
  if (c->n < 512) c->tokens[c->n] = token;
  ++c->n;
  if (text != NULL) {
    c->saw_text = 1;
    CHECK(strlen(text) == text_length, "callback text length %zu, strlen %zu", text_length,
          strlen(text));
    if (c->text_len + text_length < sizeof c->text) {
      memcpy(c->text + c->text_len, text, text_length);
      c->text_len += text_length;
      c->text[c->text_len] = '\0';
    }
  }
  return c->stop_after > 0 && c->n >= c->stop_after;
}

static int same_ids(const int32_t* a, const int32_t* b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(int32_t)) == 0;
}

/* ------------------------------------------------------------------ parity with transformers */

typedef struct {
  const char* model;    /* directory under tests/fixtures/models */
  const char* expected; /* the directory whose expected.safetensors applies */
  ssmkit_arch arch;
  int file_counts_parameters; /* every tensor in model.safetensors is a distinct parameter */
  int has_tokenizer;
  int64_t eos_token_id; /* and bos: the HF configs name 0, the state-spaces ones none */
  int hybrid;           /* a hybrid family's fixture: its own layer list and sizes */
} Fixture;

static void check_config(const Fixture* f, const ssmkit_model* model) {
  ssmkit_model_config c = {.struct_size = sizeof c};
  CHECK_OK(ssmkit_model_get_config(model, &c));
  CHECK(c.arch == (int32_t)f->arch && c.vocab_size == kFixtureVocab && c.d_model == 32,
        "%s: config arch %d vocab %lld d_model %lld", f->model, c.arch, (long long)c.vocab_size,
        (long long)c.d_model);
  if (!f->hybrid) { /* the Mamba fixtures' sizes */
    CHECK(c.n_layer == 2 && c.d_inner == 64,
          "%s: config arch %d vocab %lld layers %lld d_model %lld", f->model, c.arch,
          (long long)c.vocab_size, (long long)c.n_layer, (long long)c.d_model);
    if (f->arch == SSMKIT_ARCH_MAMBA2) {
      CHECK(c.nheads == 8 && c.headdim == 8 && c.ngroups == 2 && c.d_state == 16 && c.dt_rank == 0,
            "%s: heads %lld x %lld, groups %lld", f->model, (long long)c.nheads,
            (long long)c.headdim, (long long)c.ngroups);
    } else {
      CHECK(c.dt_rank == 2 && c.d_state == 8 && c.nheads == 0, "%s: dt_rank %lld, d_state %lld",
            f->model, (long long)c.dt_rank, (long long)c.d_state);
    }
  }
  CHECK(c.eos_token_id == f->eos_token_id && c.bos_token_id == f->eos_token_id,
        "%s: eos %lld bos %lld", f->model, (long long)c.eos_token_id, (long long)c.bos_token_id);
  if (f->file_counts_parameters) {
    char path[512];
    snprintf(path, sizeof path, MODELS "%s/model.safetensors", f->model);
    Safetensors st;
    CHECK(st_open(path, &st), "cannot read %s", path);
    const int64_t in_file = st_total_elements(&st);
    CHECK(c.parameter_count == in_file && in_file > 0,
          "%s: parameter_count %lld, the checkpoint holds %lld", f->model,
          (long long)c.parameter_count, (long long)in_file);
    st_close(&st);
  }
}

/* Each prompt alone: every position's logits, then teacher-forced decode steps whose argmax is
 * the greedy continuation. */
static void check_single_prompts(const Fixture* f, ssmkit_session* session, const Expected* e) {
  const int64_t V = kFixtureVocab;
  for (int p = 0; p < kPrompts; ++p) {
    float* last = poisoned(V);
    float* all = poisoned(e[p].L * V);
    const int32_t* tokens[1] = {e[p].ids};
    ssmkit_prefill_args a = {.struct_size = sizeof a};
    a.batch = 1;
    a.tokens = tokens;
    a.lengths = &e[p].L;
    a.logits = logits_tensor(last, 2, 1, V, 0);
    a.all_logits = logits_tensor(all, 3, 1, e[p].L, V);
    CHECK_OK(ssmkit_session_prefill(session, &a));
    const double err_all = rel_err(all, e[p].prefill, e[p].L * V);
    const double err_last = rel_err(last, e[p].prefill + (e[p].L - 1) * V, V);
    CHECK(err_all <= kTolerance && err_last <= kTolerance,
          "%s %s: prefill logits error %.3g (every position), %.3g (last)", f->model,
          kPromptKeys[p], err_all, err_last);
    float* logits = last;
    for (int64_t j = 0; j < e[p].S; ++j) {
      const double err = rel_err(logits, e[p].decode + j * V, V);
      CHECK(err <= kTolerance, "%s %s: decode step %lld logits error %.3g", f->model,
            kPromptKeys[p], (long long)j, err);
      CHECK(argmax(logits, V) == e[p].greedy[j], "%s %s: greedy token %lld is %d, transformers %d",
            f->model, kPromptKeys[p], (long long)j, argmax(logits, V), e[p].greedy[j]);
      for (int64_t i = 0; i < V; ++i) logits[i] = NAN;
      ssmkit_tensor t = logits_tensor(logits, 2, 1, V, 0);
      CHECK_OK(ssmkit_session_decode(session, &e[p].greedy[j], 1, &t));
    }
    free(last);
    free(all);
  }
}

/* The four prompts (2 to 46 tokens) as one batch, then decode steps for all four at once. */
static void check_batch(const Fixture* f, ssmkit_session* session, const Expected* e) {
  const int64_t V = kFixtureVocab, B = kPrompts;
  const int32_t* tokens[kPrompts];
  int64_t lengths[kPrompts], L = 0;
  for (int p = 0; p < kPrompts; ++p) {
    tokens[p] = e[p].ids;
    lengths[p] = e[p].L;
    if (e[p].L > L) L = e[p].L;
  }
  float* last = poisoned(B * V);
  float* all = poisoned(B * L * V);
  ssmkit_prefill_args a = {.struct_size = sizeof a};
  a.batch = B;
  a.tokens = tokens;
  a.lengths = lengths;
  a.logits = logits_tensor(last, 2, B, V, 0);
  a.all_logits = logits_tensor(all, 3, B, L, V);
  CHECK_OK(ssmkit_session_prefill(session, &a));
  for (int p = 0; p < kPrompts; ++p) {
    const double err_all = rel_err(all + p * L * V, e[p].prefill, e[p].L * V);
    const double err_last = rel_err(last + p * V, e[p].decode, V);
    CHECK(err_all <= kTolerance && err_last <= kTolerance,
          "%s %s in a batch of %d: prefill error %.3g, last position %.3g", f->model,
          kPromptKeys[p], kPrompts, err_all, err_last);
    CHECK(all_nan(all + (p * L + e[p].L) * V, (L - e[p].L) * V),
          "%s %s: rows of all_logits past the prompt's end were written", f->model, kPromptKeys[p]);
  }
  for (int64_t j = 0; j + 1 < e[0].S; ++j) {
    int32_t next[kPrompts];
    for (int p = 0; p < kPrompts; ++p) next[p] = e[p].greedy[j];
    for (int64_t i = 0; i < B * V; ++i) last[i] = NAN;
    ssmkit_tensor t = logits_tensor(last, 2, B, V, 0);
    CHECK_OK(ssmkit_session_decode(session, next, B, &t));
    for (int p = 0; p < kPrompts; ++p) {
      const double err = rel_err(last + p * V, e[p].decode + (j + 1) * V, V);
      CHECK(err <= kTolerance, "%s %s: batched decode step %lld error %.3g", f->model,
            kPromptKeys[p], (long long)(j + 1), err);
    }
  }
  free(last);
  free(all);
}

/* ssmkit_generate, greedy: from the recorded ids, and (with the model's tokenizer) from the
 * prompt's text, streaming the continuation's text; then stopped by the callback. */
static void check_generate(const Fixture* f, const ssmkit_model* model, ssmkit_session* session,
                           const Expected* e) {
  ssmkit_tokenizer* tok = NULL;
  if (f->has_tokenizer) CHECK_OK(ssmkit_model_tokenizer(model, &tok));
  for (int p = 0; p < kPrompts; ++p) {
    Collected got;
    memset(&got, 0, sizeof got);
    ssmkit_generate_args a = {.struct_size = sizeof a};
    a.prompt_tokens = e[p].ids;
    a.n_prompt_tokens = e[p].L;
    a.max_tokens = e[p].S;
    a.on_token = collect;
    a.user_data = &got;
    ssmkit_generate_result r = {.struct_size = sizeof r};
    CHECK_OK(ssmkit_generate(session, &a, &r));
    CHECK(got.n == e[p].S && same_ids(got.tokens, e[p].greedy, e[p].S) && !got.saw_text,
          "%s %s: generated %lld tokens, first %d; transformers' first %d", f->model,
          kPromptKeys[p], (long long)got.n, got.tokens[0], e[p].greedy[0]);
    CHECK(r.prompt_tokens == e[p].L && r.generated_tokens == e[p].S && !r.stopped_at_eos &&
              !r.stopped_by_callback && r.prefill_seconds >= 0 && r.decode_seconds >= 0,
          "%s %s: result prompt %lld generated %lld eos %d", f->model, kPromptKeys[p],
          (long long)r.prompt_tokens, (long long)r.generated_tokens, r.stopped_at_eos);
    if (tok == NULL) continue;

    int64_t n = 0;
    int32_t ids[128];
    CHECK_OK(ssmkit_tokenizer_encode(tok, kPromptText[p], strlen(kPromptText[p]), ids, 128, &n));
    CHECK(n == e[p].L && same_ids(ids, e[p].ids, n),
          "%s: \"%s\" encodes to %lld ids, recorded %lld", f->model, kPromptText[p], (long long)n,
          (long long)e[p].L);
    char want[512];
    CHECK_OK(ssmkit_tokenizer_decode(tok, e[p].greedy, e[p].S, 1, want, sizeof want, NULL));
    memset(&got, 0, sizeof got);
    a.prompt = kPromptText[p];
    a.prompt_tokens = NULL;
    a.n_prompt_tokens = 0;
    a.tokenizer = tok;
    CHECK_OK(ssmkit_generate(session, &a, NULL));
    CHECK(got.n == e[p].S && same_ids(got.tokens, e[p].greedy, e[p].S) && got.saw_text &&
              strcmp(got.text, want) == 0,
          "%s %s from text: %lld tokens, streamed \"%s\", decoded \"%s\"", f->model, kPromptKeys[p],
          (long long)got.n, got.text, want);

    memset(&got, 0, sizeof got);
    got.stop_after = 3;
    CHECK_OK(ssmkit_generate(session, &a, &r));
    CHECK(got.n == 3 && r.generated_tokens == 3 && r.stopped_by_callback == 1 &&
              same_ids(got.tokens, e[p].greedy, 3),
          "%s %s: the callback stopped after %lld tokens, result %lld, flag %d", f->model,
          kPromptKeys[p], (long long)got.n, (long long)r.generated_tokens, r.stopped_by_callback);
  }
  ssmkit_tokenizer_free(tok);
}

static void test_fixture(const Fixture* f) {
  char dir[512];
  snprintf(dir, sizeof dir, MODELS "%s", f->model);
  ssmkit_model* model = NULL;
  CHECK_OK(ssmkit_model_load(dir, &model));
  Expected e[kPrompts];
  memset(e, 0, sizeof e);
  if (model == NULL || !read_expected(f->expected, e)) {
    ssmkit_model_free(model);
    free_expected(e);
    return;
  }
  check_config(f, model);
  ssmkit_session* session = NULL;
  CHECK_OK(ssmkit_session_create(model, kPrompts, &session));
  /* The session holds the model: the handle may go first. */
  ssmkit_model_config c = {.struct_size = sizeof c};
  CHECK_OK(ssmkit_model_get_config(model, &c));
  if (session != NULL) {
    check_single_prompts(f, session, e);
    check_batch(f, session, e);
    check_generate(f, model, session, e);
  }
  ssmkit_model_free(model);
  if (session != NULL) check_single_prompts(f, session, e); /* after the model handle is freed */
  ssmkit_session_free(session);
  free_expected(e);
}

/* ------------------------------------------------------------------ the built-in model */

static void test_default_model(void) {
  size_t length = 0;
  CHECK_OK(ssmkit_default_model_dir(NULL, 0, &length));
  char* dir = (char*)malloc(length + 1);
  CHECK_OK(ssmkit_default_model_dir(dir, length + 1, NULL));
  CHECK(strlen(dir) == length && contains(dir, "models/default"), "default model dir \"%s\"", dir);
  char small[4] = "xyz";
  CHECK_FAILS(ssmkit_default_model_dir(small, sizeof small, &length), SSMKIT_INVALID_ARGUMENT,
              "capacity");
  CHECK(strcmp(small, "xyz") == 0, "a failed call wrote its buffer");

  ssmkit_model* model = NULL;
  CHECK_OK(ssmkit_model_load_default(&model));
  if (model == NULL) {
    free(dir);
    return;
  }
  ssmkit_model_config c = {.struct_size = sizeof c};
  CHECK_OK(ssmkit_model_get_config(model, &c));
  char path[1024];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  Safetensors st;
  CHECK(st_open(path, &st), "cannot read %s", path);
  const int64_t in_file = st_total_elements(&st); /* tied LM head: stored once */
  st_close(&st);
  CHECK(c.arch == SSMKIT_ARCH_MAMBA2 && c.vocab_size == 256 && c.d_model == 256 && c.n_layer == 6 &&
            c.parameter_count == in_file && in_file > 2000000,
        "built-in model: arch %d vocab %lld d_model %lld layers %lld parameters %lld (file %lld)",
        c.arch, (long long)c.vocab_size, (long long)c.d_model, (long long)c.n_layer,
        (long long)c.parameter_count, (long long)in_file);

  ssmkit_tokenizer* tok = NULL;
  CHECK_OK(ssmkit_model_tokenizer(model, &tok)); /* no tokenizer.json, vocab 256: bytes */
  ssmkit_session* session = NULL;
  CHECK_OK(ssmkit_session_create(model, 1, &session));
  /* Sampling: the same seed gives the same text, another seed other text; all printable. */
  Collected runs[3];
  const uint64_t seeds[3] = {1, 1, 2};
  for (int i = 0; i < 3; ++i) {
    memset(&runs[i], 0, sizeof runs[i]);
    ssmkit_generate_args a = {.struct_size = sizeof a};
    a.prompt = "And God said";
    a.tokenizer = tok;
    a.max_tokens = 64;
    a.temperature = 0.8f;
    a.top_k = 40;
    a.top_p = 0.95f;
    a.seed = seeds[i];
    a.on_token = collect;
    a.user_data = &runs[i];
    CHECK_OK(ssmkit_generate(session, &a, NULL));
  }
  CHECK(runs[0].n == 64 && runs[0].text_len == 64, "built-in model: %lld tokens, %zu bytes",
        (long long)runs[0].n, runs[0].text_len);
  CHECK(strcmp(runs[0].text, runs[1].text) == 0, "same seed, different text:\n%s\n%s", runs[0].text,
        runs[1].text);
  CHECK(strcmp(runs[0].text, runs[2].text) != 0, "seeds 1 and 2 gave the same text");
  int printable = 1;
  for (size_t i = 0; i < runs[0].text_len; ++i) {
    const unsigned char ch = (unsigned char)runs[0].text[i];
    printable &= ch == '\n' || (ch >= 32 && ch < 127);
  }
  CHECK(printable, "built-in model wrote non-text bytes: %s", runs[0].text);
  printf("  built-in model (%s), seed 1: And God said%s\n", dir, runs[0].text);
  ssmkit_session_free(session);
  ssmkit_tokenizer_free(tok);
  ssmkit_model_free(model);
  free(dir);
}

/* ------------------------------------------------------------------ tokenizers */

static void test_tokenizers(void) {
  ssmkit_tokenizer* tok = NULL;
  CHECK_OK(ssmkit_tokenizer_load(SSMKIT_FIXTURES_DIR "/tokenizer/tokenizer.json", &tok));
  if (tok == NULL) return;
  const char* text = kPromptText[3];
  int64_t n = -1;
  CHECK_OK(ssmkit_tokenizer_encode(tok, text, strlen(text), NULL, 0, &n)); /* the count only */
  int32_t ids[64];
  for (int i = 0; i < 64; ++i) ids[i] = -7;
  CHECK_FAILS(ssmkit_tokenizer_encode(tok, text, strlen(text), ids, n - 1, &n),
              SSMKIT_INVALID_ARGUMENT, "ids: expected room for");
  CHECK(ids[0] == -7, "a failed encode wrote ids");
  int64_t m = 0;
  CHECK_OK(ssmkit_tokenizer_encode(tok, text, strlen(text), ids, 64, &m));
  CHECK(m == n && n > 0 && ids[n - 1] != -7, "encode: %lld ids, counted %lld", (long long)m,
        (long long)n);
  size_t length = 0;
  CHECK_OK(ssmkit_tokenizer_decode(tok, ids, m, 0, NULL, 0, &length));
  CHECK(length == strlen(text), "decode length %zu, text %zu", length, strlen(text));
  char out[64] = "untouched";
  CHECK_FAILS(ssmkit_tokenizer_decode(tok, ids, m, 0, out, length, NULL), SSMKIT_INVALID_ARGUMENT,
              "text: expected capacity >=");
  CHECK(strcmp(out, "untouched") == 0, "a failed decode wrote text");
  CHECK_OK(ssmkit_tokenizer_decode(tok, ids, m, 0, out, sizeof out, &length));
  CHECK(strcmp(out, text) == 0, "round trip \"%s\" -> \"%s\"", text, out);
  /* A special token: decoded, or skipped with skip_special. */
  CHECK_OK(ssmkit_tokenizer_encode(tok, "<|endoftext|>x", 14, ids, 64, &m));
  CHECK(m == 2 && ids[0] == 0, "\"<|endoftext|>x\" -> %lld ids, first %d", (long long)m, ids[0]);
  CHECK_OK(ssmkit_tokenizer_decode(tok, ids, m, 1, out, sizeof out, NULL));
  CHECK(strcmp(out, "x") == 0, "skip_special decode \"%s\"", out);
  CHECK_OK(ssmkit_tokenizer_encode(tok, "", 0, ids, 64, &m));
  CHECK(m == 0, "empty text: %lld ids", (long long)m);
  ssmkit_tokenizer_free(tok);

  CHECK_OK(ssmkit_tokenizer_bytes(&tok));
  CHECK_OK(ssmkit_tokenizer_encode(tok, "A\xC3\xA9", 3, ids, 64, &m));
  CHECK(m == 3 && ids[0] == 65 && ids[1] == 0xC3 && ids[2] == 0xA9, "bytes: %lld ids",
        (long long)m);
  CHECK_OK(ssmkit_tokenizer_decode(tok, ids + 1, 1, 0, out, sizeof out, NULL)); /* half of é */
  CHECK(strcmp(out, "\xEF\xBF\xBD") == 0, "a lone lead byte decodes to U+FFFD, got \"%s\"", out);
  ssmkit_tokenizer_free(tok);
}

/* ------------------------------------------------------------------ bad inputs */

static void test_load_errors(void) {
  ssmkit_model* model = (ssmkit_model*)&g_passed; /* a sentinel: must stay */
  ssmkit_model* const sentinel = model;
  CHECK_FAILS(ssmkit_model_load(MODELS "no-such-model", &model), SSMKIT_INVALID_ARGUMENT,
              "no-such-model");
  CHECK_FAILS(ssmkit_model_load(MODELS "mamba1-hf/config.json", &model), SSMKIT_INVALID_ARGUMENT,
              "mamba1-hf/config.json");
  CHECK_FAILS(ssmkit_model_load(SSMKIT_FIXTURES_DIR "/tokenizer", &model), SSMKIT_INVALID_ARGUMENT,
              "config.json");
  CHECK_FAILS(ssmkit_model_load(NULL, &model), SSMKIT_INVALID_ARGUMENT, "dir: expected");
  CHECK(model == sentinel, "a failed load wrote the handle");
  CHECK_FAILS(ssmkit_model_load(MODELS "mamba1-hf", NULL), SSMKIT_INVALID_ARGUMENT,
              "model: expected");
  CHECK_FAILS(ssmkit_model_load_default(NULL), SSMKIT_INVALID_ARGUMENT, "model: expected");
  CHECK_FAILS(ssmkit_default_model_dir(NULL, 0, NULL), SSMKIT_INVALID_ARGUMENT, "dir");

  model = NULL;
  CHECK_OK(ssmkit_model_load(MODELS "mamba1-ss", &model));
  ssmkit_model_config c = {.struct_size = sizeof c - 8};
  CHECK_FAILS(ssmkit_model_get_config(model, &c), SSMKIT_INVALID_ARGUMENT, "config.struct_size");
  CHECK_FAILS(ssmkit_model_get_config(NULL, &c), SSMKIT_INVALID_ARGUMENT, "model: expected");
  CHECK_FAILS(ssmkit_model_get_config(model, NULL), SSMKIT_INVALID_ARGUMENT, "config");
  ssmkit_tokenizer* tok = NULL;
  CHECK_FAILS(ssmkit_model_tokenizer(model, &tok), SSMKIT_INVALID_ARGUMENT, "no tokenizer.json");
  CHECK(tok == NULL, "a failed call wrote the tokenizer handle");
  CHECK_FAILS(ssmkit_tokenizer_load(MODELS "no-such-tokenizer.json", &tok), SSMKIT_INVALID_ARGUMENT,
              "no-such-tokenizer.json");
  CHECK_FAILS(ssmkit_tokenizer_load(MODELS "mamba1-ss/config.json", &tok), SSMKIT_INVALID_ARGUMENT,
              "config.json");
  CHECK_FAILS(ssmkit_tokenizer_load(NULL, &tok), SSMKIT_INVALID_ARGUMENT, "path");
  CHECK_FAILS(ssmkit_tokenizer_bytes(NULL), SSMKIT_INVALID_ARGUMENT, "tokenizer");
  int64_t n = 0;
  CHECK_FAILS(ssmkit_tokenizer_encode(NULL, "x", 1, NULL, 0, &n), SSMKIT_INVALID_ARGUMENT,
              "tokenizer");
  CHECK(tok == NULL, "a failed call wrote the tokenizer handle");
  CHECK_OK(ssmkit_tokenizer_bytes(&tok));
  CHECK_FAILS(ssmkit_tokenizer_encode(tok, NULL, 3, NULL, 0, &n), SSMKIT_INVALID_ARGUMENT, "text");
  CHECK_FAILS(ssmkit_tokenizer_encode(tok, "x", 1, NULL, 0, NULL), SSMKIT_INVALID_ARGUMENT,
              "n_ids");
  CHECK_FAILS(ssmkit_tokenizer_decode(tok, NULL, 2, 0, NULL, 0, &c.struct_size),
              SSMKIT_INVALID_ARGUMENT, "ids");
  CHECK_FAILS(ssmkit_tokenizer_decode(tok, NULL, -1, 0, NULL, 0, &c.struct_size),
              SSMKIT_INVALID_ARGUMENT, "n_ids: expected >= 0");
  ssmkit_tokenizer_free(tok);

  ssmkit_session* session = NULL;
  CHECK_FAILS(ssmkit_session_create(model, 0, &session), SSMKIT_INVALID_ARGUMENT,
              "max_batch: expected >= 1, given 0");
  CHECK_FAILS(ssmkit_session_create(NULL, 1, &session), SSMKIT_INVALID_ARGUMENT, "model");
  CHECK_FAILS(ssmkit_session_create(model, 1, NULL), SSMKIT_INVALID_ARGUMENT, "session");
  CHECK_FAILS(ssmkit_session_create_on(model, 1, 7, &session), SSMKIT_INVALID_ARGUMENT,
              "device: expected SSMKIT_CPU (0) or SSMKIT_CUDA (1), given 7");
  CHECK(session == NULL, "a failed call wrote the session handle");
  CHECK_OK(ssmkit_session_create_on(model, 1, SSMKIT_CPU, &session));
  ssmkit_session_free(session);
  session = NULL;
  ssmkit_model_free(model);
  ssmkit_model_free(NULL);
  ssmkit_session_free(NULL);
  ssmkit_tokenizer_free(NULL);
}

static void test_session_errors(void) {
  const int64_t V = kFixtureVocab;
  ssmkit_model* model = NULL;
  ssmkit_session* session = NULL;
  CHECK_OK(ssmkit_model_load(MODELS "mamba2-hf", &model));
  CHECK_OK(ssmkit_session_create(model, 2, &session));
  if (session == NULL) {
    ssmkit_model_free(model);
    return;
  }
  float* logits = poisoned(3 * V);
  float* all = poisoned(2 * 4 * V);
  ssmkit_tensor t = logits_tensor(logits, 2, 1, V, 0);
  const int32_t one = 5;
  CHECK_FAILS(ssmkit_session_decode(session, &one, 1, &t), SSMKIT_INVALID_ARGUMENT,
              "call ssmkit_session_prefill first");

  const int32_t p0[4] = {5, 6, 7, 8}, p1[2] = {9, 10}, bad[2] = {9, (int32_t)V};
  const int32_t* tokens[3] = {p0, p1, p1};
  int64_t lengths[3] = {4, 2, 2};
  ssmkit_prefill_args a = {.struct_size = sizeof a};
  a.batch = 2;
  a.tokens = tokens;
  a.lengths = lengths;
  a.logits = logits_tensor(logits, 2, 2, V, 0);
  a.all_logits = logits_tensor(all, 3, 2, 4, V);

  ssmkit_prefill_args b = a;
  CHECK_FAILS(ssmkit_session_prefill(session, NULL), SSMKIT_INVALID_ARGUMENT, "args: expected");
  b.struct_size = sizeof b + 8;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT, "args.struct_size");
  CHECK_FAILS(ssmkit_session_prefill(NULL, &a), SSMKIT_INVALID_ARGUMENT, "session: expected");
  b = a, b.batch = 3;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT,
              "args.batch: expected 1 to 2 (the session's max_batch), given 3");
  b = a, b.batch = 0;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT, "args.batch");
  b = a, b.tokens = NULL;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT,
              "args.tokens: expected");
  b = a, b.lengths = NULL;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT,
              "args.lengths: expected");
  lengths[1] = 0;
  CHECK_FAILS(ssmkit_session_prefill(session, &a), SSMKIT_INVALID_ARGUMENT,
              "args.lengths[1]: expected >= 1 tokens, given 0");
  lengths[1] = 2;
  tokens[1] = NULL;
  CHECK_FAILS(ssmkit_session_prefill(session, &a), SSMKIT_INVALID_ARGUMENT, "args.tokens[1]");
  tokens[1] = bad;
  CHECK_FAILS(ssmkit_session_prefill(session, &a), SSMKIT_INVALID_ARGUMENT,
              "token 304 at position 1 outside the vocabulary [0, 304)");
  tokens[1] = p1;
  b = a, b.logits = logits_tensor(logits, 2, 2, V - 1, 0);
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT,
              "args.logits: expected a dense f32 CPU tensor (B, V) = (2, 304), given (2, 303)");
  b = a, b.logits.dtype = SSMKIT_BF16;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT, "given dtype 1");
  b = a, b.logits.data = NULL;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT, "args.logits");
  b = a, b.logits.strides[0] = V + 1;
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT, "not dense");
  b = a, b.all_logits = logits_tensor(all, 3, 2, 3, V);
  CHECK_FAILS(ssmkit_session_prefill(session, &b), SSMKIT_INVALID_ARGUMENT,
              "args.all_logits: expected a dense f32 CPU tensor (B, L, V) = (2, 4, 304), given (2, "
              "3, 304)");
  CHECK(all_nan(logits, 3 * V) && all_nan(all, 2 * 4 * V), "a failed prefill wrote logits");

  CHECK_OK(ssmkit_session_prefill(session, &a));
  for (int64_t i = 0; i < 3 * V; ++i) logits[i] = NAN;
  const int32_t next[3] = {11, 12, 13}, bad_next[2] = {11, -1};
  t = logits_tensor(logits, 2, 2, V, 0);
  CHECK_FAILS(ssmkit_session_decode(session, next, 3, &t), SSMKIT_INVALID_ARGUMENT,
              "batch: expected 2 (the last prefill's), given 3");
  CHECK_FAILS(ssmkit_session_decode(session, NULL, 2, &t), SSMKIT_INVALID_ARGUMENT, "tokens");
  CHECK_FAILS(ssmkit_session_decode(session, next, 2, NULL), SSMKIT_INVALID_ARGUMENT, "logits");
  CHECK_FAILS(ssmkit_session_decode(NULL, next, 2, &t), SSMKIT_INVALID_ARGUMENT, "session");
  CHECK_FAILS(ssmkit_session_decode(session, bad_next, 2, &t), SSMKIT_INVALID_ARGUMENT,
              "token -1 at position 1 outside the vocabulary");
  ssmkit_tensor wrong = logits_tensor(logits, 2, 1, 2 * V, 0);
  CHECK_FAILS(ssmkit_session_decode(session, next, 2, &wrong), SSMKIT_INVALID_ARGUMENT,
              "logits: expected a dense f32 CPU tensor (B, V) = (2, 304), given (1, 608)");
  CHECK(all_nan(logits, 3 * V), "a failed decode wrote logits");
  CHECK_OK(ssmkit_session_decode(session, next, 2, &t)); /* the failures left the state usable */
  CHECK(!all_nan(logits, 2 * V) && all_nan(logits + 2 * V, V), "decode wrote outside (B, V)");

  /* generation */
  ssmkit_generate_args g = {.struct_size = sizeof g};
  g.prompt_tokens = p0;
  g.n_prompt_tokens = 4;
  g.max_tokens = 4;
  ssmkit_generate_args h = g;
  CHECK_FAILS(ssmkit_generate(session, NULL, NULL), SSMKIT_INVALID_ARGUMENT, "args: expected");
  CHECK_FAILS(ssmkit_generate(NULL, &g, NULL), SSMKIT_INVALID_ARGUMENT, "session");
  h.struct_size = 8;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT, "args.struct_size");
  ssmkit_generate_result r = {.struct_size = 3};
  CHECK_FAILS(ssmkit_generate(session, &g, &r), SSMKIT_INVALID_ARGUMENT, "result.struct_size");
  h = g, h.prompt = "text";
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT,
              "args.tokenizer: expected a tokenizer to encode args.prompt");
  h = g, h.prompt_tokens = NULL;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT, "args.prompt_tokens");
  h = g, h.n_prompt_tokens = -2;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT, "n_prompt_tokens");
  h = g, h.max_tokens = -1;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT,
              "max_tokens: expected >= 0, given -1");
  h = g, h.top_p = 1.5f;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT, "top_p");
  h = g, h.temperature = -1.0f;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT, "temperature");
  h = g, h.top_k = -3;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT, "top_k");
  h = g, h.prompt_tokens = bad, h.n_prompt_tokens = 2;
  CHECK_FAILS(ssmkit_generate(session, &h, NULL), SSMKIT_INVALID_ARGUMENT,
              "outside the vocabulary");
  CHECK(r.struct_size == 3, "a failed generate wrote its result");
  /* An empty prompt starts from the bos token; max_tokens 0 generates nothing. */
  Collected got;
  memset(&got, 0, sizeof got);
  h = g, h.n_prompt_tokens = 0, h.prompt_tokens = NULL, h.on_token = collect, h.user_data = &got;
  r.struct_size = sizeof r;
  CHECK_OK(ssmkit_generate(session, &h, &r));
  CHECK(r.prompt_tokens == 1 && r.generated_tokens == 4 && got.n == 4,
        "from an empty prompt: prompt %lld, generated %lld", (long long)r.prompt_tokens,
        (long long)r.generated_tokens);
  h.max_tokens = 0;
  CHECK_OK(ssmkit_generate(session, &h, &r));
  CHECK(r.generated_tokens == 0 && got.n == 4, "max_tokens 0 generated %lld",
        (long long)r.generated_tokens);

  free(logits);
  free(all);
  ssmkit_session_free(session);
  ssmkit_model_free(model);
}

int main(void) {
  harness_start("capi_model_test");
  const Fixture fixtures[] = {
      {"mamba1-hf", "mamba1-hf", SSMKIT_ARCH_MAMBA1, 1, 1, 0, 0},
      {"mamba1-hf-bf16", "mamba1-hf-bf16", SSMKIT_ARCH_MAMBA1, 1, 1, 0, 0},
      {"mamba1-ss", "mamba1-hf", SSMKIT_ARCH_MAMBA1, 0, 0, -1, 0},
      {"mamba2-hf", "mamba2-hf", SSMKIT_ARCH_MAMBA2, 1, 1, 0, 0},
      {"mamba2-ss", "mamba2-hf", SSMKIT_ARCH_MAMBA2, 1, 0, -1, 0},
      /* GraniteMoeHybrid (Mamba-2, attention with rope, MoE) and Falcon-H1 (parallel blocks) */
      {"granitemoehybrid-moe", "granitemoehybrid-moe", SSMKIT_ARCH_MAMBA2, 1, 1, 0, 1},
      {"falcon_h1", "falcon_h1", SSMKIT_ARCH_MAMBA2, 1, 1, 0, 1},
  };
  for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; ++i) test_fixture(&fixtures[i]);
  test_default_model();
  test_tokenizers();
  test_load_errors();
  test_session_errors();
  return harness_finish();
}

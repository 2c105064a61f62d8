/* Layout moves a network built on the ops needs between its projections and its scans, which
 * are not ops of the C ABI: a linear layer works on rows of tokens (B * L, F) while the scan and
 * the convolution take channels first (B, F, L). Nx users have Nx.transpose/split/concatenate/
 * add for these; this package has no Nx, so they are here, f32 only, one pass each.
 *
 *   tokens_to_channels(x (B, L, F), [F_0, F_1, ...]) -> [(B, F_0, L), (B, F_1, L), ...]
 *   channels_to_tokens([(B, F_0, L), ...])            -> (B, L, F_0 + F_1 + ...)
 *   add(a, b)                                         -> a + b (same shape)
 *
 * Dimension legend: B batch, L length, F features. */
#include <string.h>

#include "nif.h"

#define MAX_PARTS 16

static ERL_NIF_TERM tensor_list(Call* c, int n) {
  ERL_NIF_TERM items[MAX_PARTS];
  for (int i = 0; i < n; ++i) items[i] = output_term(c, i);
  c->n_outputs = 0;
  call_end(c);
  return make_ok(c->env, enif_make_list_from_array(c->env, items, (unsigned)n));
}

static int f32_rank3(Call* c, const char* name, const ssmkit_tensor* t) {
  if (t->dtype != SSMKIT_F32 || t->rank != 3) {
    char shape[160], type[16];
    format_shape(t->rank, t->shape, shape, sizeof shape);
    format_dtype(t->dtype, type, sizeof type);
    return call_fail(c, "%s: expected an f32 tensor of rank 3, given type %s and shape %s", name,
                     type, shape);
  }
  return 1;
}

static ERL_NIF_TERM to_channels_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_tensor x;
  call_begin(&c, env, "tokens_to_channels", enif_make_new_map(env));
  if (!term_tensor(&c, "x", argv[0], &x) || !f32_rank3(&c, "x", &x)) return call_error(&c);
  const int64_t B = x.shape[0], L = x.shape[1], F = x.shape[2];
  int64_t sizes[MAX_PARTS], total = 0;
  unsigned n;
  ERL_NIF_TERM list = argv[1], head;
  if (!enif_get_list_length(env, list, &n) || n < 1 || n > MAX_PARTS) {
    call_fail(&c, "sizes: expected a list of 1 to %d sizes, given %T", MAX_PARTS, argv[1]);
    return call_error(&c);
  }
  for (unsigned i = 0; i < n; ++i) {
    ErlNifSInt64 v;
    enif_get_list_cell(env, list, &head, &list);
    if (!enif_get_int64(env, head, &v) || v < 1 || v > F) {
      call_fail(&c, "sizes: expected sizes >= 1, given %T", argv[1]);
      return call_error(&c);
    }
    sizes[i] = v;
    total += v;
  }
  if (total != F) {
    call_fail(&c, "sizes: expected sizes adding up to F = %ld, given %T", (long)F, argv[1]);
    return call_error(&c);
  }
  const float* in = (const float*)x.data; /* (B, L, F) */
  int64_t f0 = 0;
  for (unsigned i = 0; i < n; ++i) {
    const int64_t shape[3] = {B, sizes[i], L};
    ssmkit_tensor* o = call_output(&c, "part", SSMKIT_F32, 3, shape);
    if (o == NULL) return call_error(&c);
    float* out = (float*)o->data; /* (B, F_i, L) */
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t l = 0; l < L; ++l) {
        const float* row = in + (b * L + l) * F + f0;
        float* col = out + b * sizes[i] * L + l;
        for (int64_t f = 0; f < sizes[i]; ++f) col[f * L] = row[f];
      }
    }
    f0 += sizes[i];
  }
  return tensor_list(&c, (int)n);
}

static ERL_NIF_TERM to_tokens_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_tensor parts[MAX_PARTS];
  unsigned n;
  ERL_NIF_TERM list = argv[0], head;
  call_begin(&c, env, "channels_to_tokens", enif_make_new_map(env));
  if (!enif_get_list_length(env, list, &n) || n < 1 || n > MAX_PARTS) {
    call_fail(&c, "parts: expected a list of 1 to %d tensors", MAX_PARTS);
    return call_error(&c);
  }
  int64_t F = 0;
  for (unsigned i = 0; i < n; ++i) {
    enif_get_list_cell(env, list, &head, &list);
    if (!term_tensor(&c, "parts", head, &parts[i]) || !f32_rank3(&c, "parts", &parts[i])) {
      return call_error(&c);
    }
    if (parts[i].shape[0] != parts[0].shape[0] || parts[i].shape[2] != parts[0].shape[2]) {
      char first[160], other[160];
      format_shape(3, parts[0].shape, first, sizeof first);
      format_shape(3, parts[i].shape, other, sizeof other);
      call_fail(&c, "parts: expected the same B and L in every part, given %s and %s", first,
                other);
      return call_error(&c);
    }
    F += parts[i].shape[1];
  }
  const int64_t B = parts[0].shape[0], L = parts[0].shape[2];
  const int64_t shape[3] = {B, L, F};
  ssmkit_tensor* o = call_output(&c, "out", SSMKIT_F32, 3, shape);
  if (o == NULL) return call_error(&c);
  float* out = (float*)o->data; /* (B, L, F) */
  int64_t f0 = 0;
  for (unsigned i = 0; i < n; ++i) {
    const int64_t Fi = parts[i].shape[1];
    const float* in = (const float*)parts[i].data; /* (B, F_i, L) */
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t l = 0; l < L; ++l) {
        float* row = out + (b * L + l) * F + f0;
        const float* col = in + b * Fi * L + l;
        for (int64_t f = 0; f < Fi; ++f) row[f] = col[f * L];
      }
    }
    f0 += Fi;
  }
  ERL_NIF_TERM t = output_term(&c, 0);
  c.n_outputs = 0;
  call_end(&c);
  return make_ok(env, t);
}

static ERL_NIF_TERM add_impl(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  Call c;
  ssmkit_tensor a, b;
  call_begin(&c, env, "add", enif_make_new_map(env));
  if (!term_tensor(&c, "a", argv[0], &a) || !term_tensor(&c, "b", argv[1], &b)) {
    return call_error(&c);
  }
  if (a.dtype != SSMKIT_F32 || b.dtype != SSMKIT_F32 || a.rank != b.rank ||
      memcmp(a.shape, b.shape, (size_t)a.rank * sizeof(int64_t)) != 0) {
    char want[160], shape[160], type[16];
    format_shape(a.rank, a.shape, want, sizeof want);
    format_shape(b.rank, b.shape, shape, sizeof shape);
    format_dtype(b.dtype, type, sizeof type);
    call_fail(&c, "b: expected an f32 tensor of a's shape %s, given type %s and shape %s", want,
              type, shape);
    return call_error(&c);
  }
  ssmkit_tensor* o = call_output(&c, "out", SSMKIT_F32, a.rank, a.shape);
  if (o == NULL) return call_error(&c);
  const int64_t numel = checked_numel(a.rank, a.shape, 4);
  const float* x = (const float*)a.data;
  const float* y = (const float*)b.data;
  float* out = (float*)o->data;
  for (int64_t i = 0; i < numel; ++i) out[i] = x[i] + y[i];
  ERL_NIF_TERM t = output_term(&c, 0);
  c.n_outputs = 0;
  call_end(&c);
  return make_ok(env, t);
}

/* The bytes of a {data, type, shape} term (0 if it is not one). */
static int64_t term_bytes(ErlNifEnv* env, ERL_NIF_TERM term) {
  int arity;
  const ERL_NIF_TERM* parts;
  ErlNifBinary bin;
  if (!enif_get_tuple(env, term, &arity, &parts) || arity != 3) return 0;
  if (!enif_inspect_binary(env, parts[0], &bin)) return 0;
  return (int64_t)bin.size;
}

/* A copy moves about one element per multiply-add's time: sized like the ops. */
ERL_NIF_TERM nif_to_channels(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, atoms.nil, term_bytes(env, argv[0]) * 2, "tokens_to_channels",
                   to_channels_impl);
}

ERL_NIF_TERM nif_to_tokens(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  int64_t bytes = 0;
  ERL_NIF_TERM list = argv[0], head;
  for (int i = 0; i < MAX_PARTS && enif_get_list_cell(env, list, &head, &list); ++i) {
    bytes += term_bytes(env, head);
  }
  return run_sized(env, argc, argv, atoms.nil, bytes * 2, "channels_to_tokens", to_tokens_impl);
}

ERL_NIF_TERM nif_add(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  return run_sized(env, argc, argv, atoms.nil, term_bytes(env, argv[0]), "add", add_impl);
}

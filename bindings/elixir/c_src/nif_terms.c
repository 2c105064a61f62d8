/* Terms to ssmkit_tensor descriptors and back, the per-call bookkeeping (first error, copies of
 * misaligned inputs, outputs released on error) and the choice of scheduler. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nif.h"

Atoms atoms;
LiveCounts live;

/* ------------------------------------------------------------------ small terms */

ERL_NIF_TERM make_error(ErlNifEnv* env, const char* message) {
  return enif_make_tuple2(env, atoms.error, make_binary_copy(env, message, strlen(message)));
}

ERL_NIF_TERM make_ok(ErlNifEnv* env, ERL_NIF_TERM value) {
  return enif_make_tuple2(env, atoms.ok, value);
}

ERL_NIF_TERM make_binary_copy(ErlNifEnv* env, const void* data, size_t n) {
  ERL_NIF_TERM term;
  unsigned char* bytes = enif_make_new_binary(env, n, &term);
  if (n > 0) memcpy(bytes, data, n);
  return term;
}

int32_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case SSMKIT_F32:
    case SSMKIT_I32:
      return 4;
    case SSMKIT_BF16:
    case SSMKIT_F16:
      return 2;
    case SSMKIT_I64:
      return 8;
    default:
      return 0;
  }
}

ERL_NIF_TERM dtype_term(ErlNifEnv* env, int32_t dtype) {
  switch (dtype) {
    case SSMKIT_F32:
      return enif_make_tuple2(env, atoms.f, enif_make_int(env, 32));
    case SSMKIT_BF16:
      return enif_make_tuple2(env, atoms.bf, enif_make_int(env, 16));
    case SSMKIT_F16:
      return enif_make_tuple2(env, atoms.f, enif_make_int(env, 16));
    case SSMKIT_I32:
      return enif_make_tuple2(env, atoms.s, enif_make_int(env, 32));
    default:
      return enif_make_tuple2(env, atoms.s, enif_make_int(env, 64));
  }
}

/* Nx's {kind, bits} to an ssmkit_dtype; -1 for a type the C ABI does not take. */
static int32_t parse_dtype(ErlNifEnv* env, ERL_NIF_TERM term) {
  int arity;
  const ERL_NIF_TERM* parts;
  int bits;
  if (!enif_get_tuple(env, term, &arity, &parts) || arity != 2) return -1;
  if (!enif_get_int(env, parts[1], &bits)) return -1;
  if (enif_is_identical(parts[0], atoms.f) && bits == 32) return SSMKIT_F32;
  if (enif_is_identical(parts[0], atoms.bf) && bits == 16) return SSMKIT_BF16;
  if (enif_is_identical(parts[0], atoms.f) && bits == 16) return SSMKIT_F16;
  if (enif_is_identical(parts[0], atoms.s) && bits == 32) return SSMKIT_I32;
  if (enif_is_identical(parts[0], atoms.s) && bits == 64) return SSMKIT_I64;
  return -1;
}

void format_shape(int32_t rank, const int64_t* shape, char* out, size_t size) {
  size_t n = (size_t)snprintf(out, size, "{");
  for (int32_t i = 0; i < rank && n < size; ++i) {
    n += (size_t)snprintf(out + n, size - n, i ? ", %ld" : "%ld", (long)shape[i]);
  }
  if (n < size) snprintf(out + n, size - n, "}");
}

void format_dtype(int32_t dtype, char* out, size_t size) {
  const char* names[] = {"{:f, 32}", "{:bf, 16}", "{:f, 16}", "{:s, 32}", "{:s, 64}"};
  snprintf(out, size, "%s", dtype >= 0 && dtype <= 4 ? names[dtype] : "?");
}

ERL_NIF_TERM shape_term(ErlNifEnv* env, int32_t rank, const int64_t* shape) {
  ERL_NIF_TERM dims[SSMKIT_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) dims[i] = enif_make_int64(env, shape[i]);
  return enif_make_tuple_from_array(env, dims, (unsigned)rank);
}

int parse_shape(ErlNifEnv* env, ERL_NIF_TERM term, int32_t* rank, int64_t* shape) {
  int arity;
  const ERL_NIF_TERM* dims;
  if (!enif_get_tuple(env, term, &arity, &dims) || arity > SSMKIT_MAX_RANK) return 0;
  for (int i = 0; i < arity; ++i) {
    ErlNifSInt64 d;
    if (!enif_get_int64(env, dims[i], &d) || d < 0) return 0;
    shape[i] = d;
  }
  *rank = arity;
  return 1;
}

int64_t checked_numel(int32_t rank, const int64_t* shape, int64_t elem) {
  const int64_t limit = (INT64_C(1) << 62) / (elem > 0 ? elem : 1);
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) {
    if (shape[i] != 0 && n > limit / shape[i]) return -1;
    n *= shape[i];
  }
  return n;
}

/* ------------------------------------------------------------------ calls */

int call_begin(Call* c, ErlNifEnv* env, const char* fn, ERL_NIF_TERM args) {
  memset(c, 0, sizeof *c);
  c->env = env;
  c->fn = fn;
  c->args = args;
  if (!enif_is_map(env, args)) return call_fail(c, "arguments: expected a map, given %T", args);
  return 1;
}

int call_fail(Call* c, const char* fmt, ...) {
  if (c->failed) return 0;
  c->failed = 1;
  int n = snprintf(c->error, sizeof c->error, "%s: ", c->fn);
  if (n < 0 || (size_t)n >= sizeof c->error) return 0;
  va_list ap;
  va_start(ap, fmt);
  enif_vsnprintf(c->error + n, sizeof c->error - (size_t)n, fmt, ap);
  va_end(ap);
  return 0;
}

static void release_outputs(Call* c) {
  for (int i = 0; i < c->n_outputs; ++i) enif_release_binary(&c->outputs[i].bin);
  c->n_outputs = 0;
}

void call_end(Call* c) {
  for (int i = 0; i < c->n_copies; ++i) enif_free(c->copies[i]);
  c->n_copies = 0;
}

ERL_NIF_TERM call_error(Call* c) {
  release_outputs(c);
  call_end(c);
  return make_error(c->env, c->failed ? c->error : "unknown error");
}

ERL_NIF_TERM call_ssmkit_error(Call* c) {
  const char* message = ssmkit_last_error();
  release_outputs(c);
  call_end(c);
  return make_error(c->env, message[0] ? message : "the C ABI failed without a message");
}

static int map_get(Call* c, const char* key, ERL_NIF_TERM* value) {
  if (!enif_get_map_value(c->env, c->args, enif_make_atom(c->env, key), value)) return 0;
  return !enif_is_identical(*value, atoms.nil);
}

int term_tensor(Call* c, const char* name, ERL_NIF_TERM term, ssmkit_tensor* t) {
  memset(t, 0, sizeof *t);
  if (c->failed) return 0;
  int arity;
  const ERL_NIF_TERM* parts;
  if (!enif_get_tuple(c->env, term, &arity, &parts) || arity != 3) {
    return call_fail(c, "%s: expected a tensor {data, type, shape}, given %T", name, term);
  }
  ErlNifBinary bin;
  if (!enif_inspect_binary(c->env, parts[0], &bin)) {
    return call_fail(c, "%s: expected a binary as data, given %T", name, parts[0]);
  }
  const int32_t dtype = parse_dtype(c->env, parts[1]);
  if (dtype < 0) {
    return call_fail(c,
                     "%s: expected type {:f, 32}, {:bf, 16}, {:f, 16}, {:s, 32} or {:s, 64}, "
                     "given %T",
                     name, parts[1]);
  }
  int32_t rank;
  int64_t shape[SSMKIT_MAX_RANK];
  if (!parse_shape(c->env, parts[2], &rank, shape)) {
    return call_fail(c, "%s: expected a shape tuple of at most %d sizes >= 0, given %T", name,
                     SSMKIT_MAX_RANK, parts[2]);
  }
  const int64_t elem = dtype_size(dtype);
  const int64_t numel = checked_numel(rank, shape, elem);
  if (numel < 0 || (uint64_t)(numel * elem) != (uint64_t)bin.size) {
    char shape_text[160], type_text[16];
    format_shape(rank, shape, shape_text, sizeof shape_text);
    format_dtype(dtype, type_text, sizeof type_text);
    if (numel < 0) return call_fail(c, "%s: shape %s is too large", name, shape_text);
    return call_fail(c, "%s: expected %ld bytes for shape %s of type %s, given %lu bytes", name,
                     (long)(numel * elem), shape_text, type_text, (unsigned long)bin.size);
  }
  void* data = bin.data;
  static unsigned char empty[8];
  if (bin.size == 0) {
    data = empty; /* present but empty: the op reports the zero size, not an absent argument */
  } else if ((uintptr_t)data % (uintptr_t)elem != 0) {
    /* A sub-binary at an odd offset: the op reads whole elements, so it gets an aligned copy. */
    if (c->n_copies == NIF_MAX_INPUTS) return call_fail(c, "%s: too many misaligned inputs", name);
    void* copy = enif_alloc(bin.size);
    if (copy == NULL) return call_fail(c, "%s: out of memory copying a misaligned binary", name);
    memcpy(copy, bin.data, bin.size);
    c->copies[c->n_copies++] = copy;
    data = copy;
  }
  if (ssmkit_tensor_contiguous(t, data, (ssmkit_dtype)dtype, rank, shape) != SSMKIT_OK) {
    return call_fail(c, "%s: %s", name, ssmkit_last_error());
  }
  return 1;
}

int arg_tensor(Call* c, const char* key, ssmkit_tensor* t) {
  ERL_NIF_TERM v;
  memset(t, 0, sizeof *t);
  if (c->failed) return 0;
  if (!map_get(c, key, &v)) return 1;
  return term_tensor(c, key, v, t);
}

int arg_bool(Call* c, const char* key, int def, int32_t* out) {
  ERL_NIF_TERM v;
  *out = def;
  if (c->failed) return 0;
  if (!map_get(c, key, &v)) return 1;
  if (enif_is_identical(v, atoms.true_)) {
    *out = 1;
  } else if (enif_is_identical(v, atoms.false_)) {
    *out = 0;
  } else {
    return call_fail(c, "%s: expected true or false, given %T", key, v);
  }
  return 1;
}

int arg_int64(Call* c, const char* key, int64_t def, int64_t* out) {
  ERL_NIF_TERM v;
  ErlNifSInt64 i;
  *out = def;
  if (c->failed) return 0;
  if (!map_get(c, key, &v)) return 1;
  if (!enif_get_int64(c->env, v, &i))
    return call_fail(c, "%s: expected an integer, given %T", key, v);
  *out = i;
  return 1;
}

int arg_double(Call* c, const char* key, double def, double* out) {
  ERL_NIF_TERM v;
  ErlNifSInt64 i;
  *out = def;
  if (c->failed) return 0;
  if (!map_get(c, key, &v)) return 1;
  if (enif_get_double(c->env, v, out)) return 1;
  if (enif_get_int64(c->env, v, &i)) {
    *out = (double)i;
    return 1;
  }
  return call_fail(c, "%s: expected a number, given %T", key, v);
}

ssmkit_tensor* call_output(Call* c, const char* name, int32_t dtype, int32_t rank,
                           const int64_t* shape) {
  if (c->failed) return NULL;
  if (c->n_outputs == NIF_MAX_OUTPUTS) {
    call_fail(c, "%s: too many outputs", name);
    return NULL;
  }
  const int64_t elem = dtype_size(dtype);
  const int64_t numel = checked_numel(rank, shape, elem);
  if (numel < 0) {
    call_fail(c, "%s: the output's size overflows", name);
    return NULL;
  }
  Output* o = &c->outputs[c->n_outputs];
  if (!enif_alloc_binary((size_t)(numel * elem), &o->bin)) {
    call_fail(c, "%s: out of memory allocating %lld bytes", name, (long long)(numel * elem));
    return NULL;
  }
  ++c->n_outputs;
  o->name = name;
  static unsigned char empty[8];
  void* data = numel > 0 ? o->bin.data : empty;
  if (ssmkit_tensor_contiguous(&o->tensor, data, (ssmkit_dtype)dtype, rank, shape) != SSMKIT_OK) {
    call_fail(c, "%s: %s", name, ssmkit_last_error());
    return NULL;
  }
  return &o->tensor;
}

ERL_NIF_TERM output_term(Call* c, int index) {
  Output* o = &c->outputs[index];
  ERL_NIF_TERM data = enif_make_binary(c->env, &o->bin);
  return enif_make_tuple3(c->env, data, dtype_term(c->env, o->tensor.dtype),
                          shape_term(c->env, o->tensor.rank, o->tensor.shape));
}

ERL_NIF_TERM outputs_map(Call* c) {
  ERL_NIF_TERM keys[NIF_MAX_OUTPUTS], values[NIF_MAX_OUTPUTS], map;
  const int n = c->n_outputs;
  for (int i = 0; i < n; ++i) {
    keys[i] = enif_make_atom(c->env, c->outputs[i].name);
    values[i] = output_term(c, i);
  }
  c->n_outputs = 0; /* the binaries belong to the terms now */
  call_end(c);
  if (!enif_make_map_from_arrays(c->env, keys, values, (size_t)n, &map)) {
    return make_error(c->env, "internal: duplicate output names");
  }
  return make_ok(c->env, map);
}

/* ------------------------------------------------------------------ scheduling */

ERL_NIF_TERM run_sized(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[], ERL_NIF_TERM args,
                       int64_t work, const char* name, NifImpl impl) {
  if (enif_thread_type() == ERL_NIF_THR_DIRTY_CPU_SCHEDULER) return impl(env, argc, argv);
  int dirty = work > NIF_DIRTY_WORK;
  ERL_NIF_TERM v;
  if (enif_is_map(env, args) && enif_get_map_value(env, args, enif_make_atom(env, "dirty"), &v)) {
    if (enif_is_identical(v, atoms.true_)) dirty = 1;
    if (enif_is_identical(v, atoms.false_)) dirty = 0;
  }
  if (!dirty) return impl(env, argc, argv);
  return enif_schedule_nif(env, name, ERL_NIF_DIRTY_JOB_CPU_BOUND, impl, argc, argv);
}

static int arg_shape(ErlNifEnv* env, ERL_NIF_TERM args, const char* key, int32_t* rank,
                     int64_t* shape) {
  ERL_NIF_TERM v;
  int arity;
  const ERL_NIF_TERM* parts;
  if (!enif_is_map(env, args) || !enif_get_map_value(env, args, enif_make_atom(env, key), &v)) {
    return 0;
  }
  if (!enif_get_tuple(env, v, &arity, &parts) || arity != 3) return 0;
  return parse_shape(env, parts[2], rank, shape);
}

int64_t arg_numel(ErlNifEnv* env, ERL_NIF_TERM args, const char* key) {
  int32_t rank;
  int64_t shape[SSMKIT_MAX_RANK];
  if (!arg_shape(env, args, key, &rank, shape)) return 0;
  const int64_t n = checked_numel(rank, shape, 1);
  return n < 0 ? INT64_MAX / 64 : n;
}

int64_t arg_dim(ErlNifEnv* env, ERL_NIF_TERM args, const char* key, int dim) {
  int32_t rank;
  int64_t shape[SSMKIT_MAX_RANK];
  if (!arg_shape(env, args, key, &rank, shape) || dim >= rank || shape[dim] < 1) return 1;
  return shape[dim];
}

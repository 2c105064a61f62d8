/* The C ABI from a C11 program (compiled as C, -pedantic -Werror): versions, error reporting,
 * and every op through include/ssmkit/ssmkit.h: forwards against short fp64 references written
 * here, backwards against central finite differences of the forward along random directions
 * (which catches any gradient wired to the wrong argument). Fresh random inputs each run; the
 * seed is printed, SSMKIT_TEST_SEED pins it. Prints "N passed, N failed"; exits non-zero on a
 * failure.
 *
 * Dimension legend: B batch, L length, D channels, N state size, H heads, P head dim, G groups,
 * K conv width, M rows, E features. */
#include <float.h>
#include <stddef.h>

#include "c_test_harness.h"

/* A float array with its shape, and its ssmkit_tensor view. */
typedef struct {
  float* data;
  int64_t n;
  int32_t rank;
  int64_t shape[SSMKIT_MAX_RANK];
} Arr;

static Arr arr(int32_t rank, const int64_t* shape) {
  Arr a;
  memset(&a, 0, sizeof a);
  a.rank = rank;
  a.n = 1;
  for (int i = 0; i < rank; ++i) {
    a.shape[i] = shape[i];
    a.n *= shape[i];
  }
  a.data = (float*)calloc((size_t)a.n, sizeof(float));
  return a;
}
static Arr normal_arr(int32_t rank, const int64_t* shape, double scale) {
  Arr a = arr(rank, shape);
  for (int64_t i = 0; i < a.n; ++i) a.data[i] = (float)(scale * normal());
  return a;
}
static Arr uniform_arr(int32_t rank, const int64_t* shape, double lo, double hi) {
  Arr a = arr(rank, shape);
  for (int64_t i = 0; i < a.n; ++i) a.data[i] = (float)uniform(lo, hi);
  return a;
}
static void poison(Arr* a) {
  for (int64_t i = 0; i < a->n; ++i) a->data[i] = NAN;
}
static ssmkit_tensor view(Arr* a) {
  ssmkit_tensor t;
  if (ssmkit_tensor_contiguous(&t, a->data, SSMKIT_F32, a->rank, a->shape) != SSMKIT_OK) {
    fprintf(stderr, "ssmkit_tensor_contiguous: %s\n", ssmkit_last_error());
    exit(2);
  }
  return t;
}
static void release(Arr* a) { free(a->data); }

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define RANK(...) ((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define NEW(...) arr(RANK(__VA_ARGS__), SHAPE(__VA_ARGS__))
#define NORMAL(scale, ...) normal_arr(RANK(__VA_ARGS__), SHAPE(__VA_ARGS__), scale)
#define UNIFORM(lo, hi, ...) uniform_arr(RANK(__VA_ARGS__), SHAPE(__VA_ARGS__), lo, hi)

static double softplus(double v) { return v <= 20.0 ? log1p(exp(v)) : v; }
static double silu(double v) { return v / (1.0 + exp(-v)); }

static const double kFwdTol = 1e-5;

/* -------------------------------------------------- gradients by finite differences */

/* The loss sum(out * w_out) (+ sum(final * w_final)) of one forward through the ABI. */
typedef double (*LossFn)(void* ctx);

/* The sum of (a_i w_i)^2 over the losses' terms since check_direction last cleared it: the scale
 * of their f32 rounding. */
static double g_loss_squares;

/* Checks <grad, v> against (loss(x + h v) - loss(x - h v)) / 2h for a random direction v. */
static void check_direction(const char* op, const char* name, Arr* x, const float* grad,
                            LossFn loss, void* ctx) {
  /* Small enough for the curvature of a random direction through every element at once, large
   * enough for the f32 rounding of the loss. */
  const double h = 1e-3;
  float* saved = (float*)malloc((size_t)x->n * sizeof(float));
  double* v = (double*)malloc((size_t)x->n * sizeof(double));
  memcpy(saved, x->data, (size_t)x->n * sizeof(float));
  double analytic = 0, mass = 0;
  for (int64_t i = 0; i < x->n; ++i) {
    v[i] = normal();
    analytic += (double)grad[i] * v[i];
    mass += fabs((double)grad[i] * v[i]);
  }
  for (int64_t i = 0; i < x->n; ++i) x->data[i] = (float)(saved[i] + h * v[i]);
  g_loss_squares = 0;
  const double plus = loss(ctx);
  for (int64_t i = 0; i < x->n; ++i) x->data[i] = (float)(saved[i] - h * v[i]);
  const double minus = loss(ctx);
  memcpy(x->data, saved, (size_t)x->n * sizeof(float));
  const double fd = (plus - minus) / (2 * h);
  /* Terms of both signs can cancel in <grad, v>: the error is measured against a twentieth of
   * the sum of their sizes at least (a gradient wired to the wrong input misses by all of it). */
  const double scale = fmax(fmax(fabs(analytic), fabs(fd)), fmax(0.05 * mass, 1e-4));
  /* The finite difference itself errs by the f32 rounding of the outputs in the two losses: half
   * an ulp per output at random, 4 standard deviations of their sum. A small gradient (an SSD's
   * dA over a few heads: ~1e-4) can sit below it; h 3x smaller or larger moved such a difference
   * by its own size. */
  const double rounding = 4.0 * FLT_EPSILON * 0.5 * sqrt(g_loss_squares) / (2 * h);
  CHECK(fabs(fd - analytic) < 2e-2 * scale + rounding,
        "%s: d%s: <grad, v> = %.6g, finite difference %.6g (its rounding %.3g)", op, name, analytic,
        fd, rounding);
  free(saved);
  free(v);
}

/* One directional check per differentiable input of an op. */
typedef struct {
  const char* name;
  Arr* input;
  const Arr* grad;
} GradCheck;

static void check_gradients(const char* op, const GradCheck* checks, size_t n, LossFn loss,
                            void* ctx) {
  for (size_t i = 0; i < n; ++i) {
    check_direction(op, checks[i].name, checks[i].input, checks[i].grad->data, loss, ctx);
  }
}

static double dot(const Arr* a, const Arr* w) {
  double s = 0;
  for (int64_t i = 0; i < a->n; ++i) {
    const double term = (double)a->data[i] * w->data[i];
    s += term;
    g_loss_squares += term * term;
  }
  return s;
}

/* ------------------------------------------------------------------ versions, errors */

static void test_versions(void) {
  CHECK(ssmkit_version() == SSMKIT_VERSION, "ssmkit_version %u, header %d",
        (unsigned)ssmkit_version(), SSMKIT_VERSION);
  CHECK(ssmkit_abi_version() == SSMKIT_ABI_VERSION, "abi %u", (unsigned)ssmkit_abi_version());
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SSMKIT_VERSION_MAJOR, SSMKIT_VERSION_MINOR,
           SSMKIT_VERSION_PATCH);
  CHECK(strcmp(ssmkit_version_string(), want) == 0, "version string %s", ssmkit_version_string());
  CHECK(strcmp(ssmkit_status_name(SSMKIT_INVALID_ARGUMENT), "invalid argument") == 0, "name");
  CHECK(strcmp(ssmkit_status_name((ssmkit_status)42), "unknown") == 0, "unknown status name");
  ssmkit_set_num_threads(3);
  CHECK(ssmkit_num_threads() == 3, "threads %d", ssmkit_num_threads());
  ssmkit_set_num_threads(0);
  CHECK(ssmkit_num_threads() >= 1, "default threads %d", ssmkit_num_threads());
  /* On where the CPU has AVX-512 BF16 (1), else it stays off (0); off again after. */
  const int32_t on = ssmkit_set_bf16_products(1);
  CHECK(ssmkit_bf16_products() == on, "bf16 products %d after setting them (%d)",
        ssmkit_bf16_products(), on);
  CHECK(ssmkit_set_bf16_products(0) == 0 && ssmkit_bf16_products() == 0, "bf16 products off");
}

static void test_errors(void) {
  Arr u = NORMAL(1, 1, 4, 5), delta = NORMAL(1, 1, 4, 5), A = UNIFORM(-2, -0.5, 4, 3);
  Arr Bc = NORMAL(1, 4, 3), Cc = NORMAL(1, 4, 3), out = NEW(1, 4, 5);
  ssmkit_selective_scan_args a = {.struct_size = sizeof a};
  a.u = view(&u);
  a.delta = view(&delta);
  a.A = view(&A);
  a.B = view(&Bc);
  a.C = view(&Cc);
  ssmkit_tensor o = view(&out);

  CHECK(ssmkit_selective_scan_fwd(NULL, &o, NULL) == SSMKIT_INVALID_ARGUMENT, "NULL args");
  CHECK(contains(ssmkit_last_error(), "args"), "message: %s", ssmkit_last_error());

  ssmkit_selective_scan_args wrong_size = a;
  wrong_size.struct_size = sizeof a - 8;
  CHECK(ssmkit_selective_scan_fwd(&wrong_size, &o, NULL) == SSMKIT_INVALID_ARGUMENT, "size");
  CHECK(contains(ssmkit_last_error(), "args.struct_size"), "message: %s", ssmkit_last_error());

  ssmkit_selective_scan_args bad_dtype = a;
  bad_dtype.u.dtype = 9;
  CHECK(ssmkit_selective_scan_fwd(&bad_dtype, &o, NULL) == SSMKIT_INVALID_ARGUMENT, "dtype");
  CHECK(contains(ssmkit_last_error(), "args.u.dtype") && contains(ssmkit_last_error(), "given 9"),
        "message: %s", ssmkit_last_error());

  /* The op's own check, its message passed through, nothing written. */
  Arr short_delta = NORMAL(1, 1, 4, 4);
  ssmkit_selective_scan_args bad_shape = a;
  bad_shape.delta = view(&short_delta);
  poison(&out);
  CHECK(ssmkit_selective_scan_fwd(&bad_shape, &o, NULL) == SSMKIT_INVALID_ARGUMENT, "shape");
  CHECK(contains(ssmkit_last_error(), "selective_scan: delta: expected") &&
            contains(ssmkit_last_error(), "given (1, 4, 4)"),
        "message: %s", ssmkit_last_error());
  int untouched = 1;
  for (int64_t i = 0; i < out.n; ++i) untouched &= isnan(out.data[i]);
  CHECK(untouched, "a failed call wrote its output");

  ssmkit_tensor bf16_out = o;
  bf16_out.dtype = SSMKIT_BF16;
  CHECK(ssmkit_selective_scan_fwd(&a, &bf16_out, NULL) == SSMKIT_INVALID_ARGUMENT, "out dtype");
  CHECK(contains(ssmkit_last_error(), "out"), "message: %s", ssmkit_last_error());

  ssmkit_selective_scan_grads g = {.struct_size = sizeof g};
  ssmkit_tensor dz = o; /* a gradient for z, which is absent */
  g.dz = dz;
  CHECK(ssmkit_selective_scan_bwd(&a, &o, NULL, &g) == SSMKIT_INVALID_ARGUMENT, "dz without z");
  CHECK(contains(ssmkit_last_error(), "dz"), "message: %s", ssmkit_last_error());
  CHECK(ssmkit_selective_scan_bwd(&a, &o, NULL, NULL) == SSMKIT_INVALID_ARGUMENT, "NULL grads");
  CHECK(contains(ssmkit_last_error(), "grads"), "message: %s", ssmkit_last_error());

  CHECK_OK(ssmkit_selective_scan_fwd(&a, &o, NULL));
  CHECK(ssmkit_last_error()[0] == '\0', "last error not cleared: %s", ssmkit_last_error());

  ssmkit_tensor t;
  CHECK(ssmkit_tensor_contiguous(&t, u.data, SSMKIT_F32, 7, SHAPE(1, 1, 1, 1, 1, 1, 1)) ==
            SSMKIT_INVALID_ARGUMENT,
        "rank 7");
  CHECK(contains(ssmkit_last_error(), "rank"), "message: %s", ssmkit_last_error());
  CHECK(ssmkit_tensor_contiguous(NULL, u.data, SSMKIT_F32, 1, SHAPE(3)) == SSMKIT_INVALID_ARGUMENT,
        "NULL tensor");

  ssmkit_rmsnorm_args r = {.struct_size = sizeof r};
  r.x = view(&A); /* (4, 3), no weight given */
  r.eps = 1e-6f;
  CHECK(ssmkit_rmsnorm_fwd(&r, &o) == SSMKIT_INVALID_ARGUMENT, "rmsnorm without weight");
  CHECK(contains(ssmkit_last_error(), "weight"), "message: %s", ssmkit_last_error());

  release(&u), release(&delta), release(&A), release(&Bc), release(&Cc), release(&out);
  release(&short_delta);
}

/* ------------------------------------------------------------------ selective scan */

enum { SB = 2, SD = 4, SN = 3, SL = 7 };

typedef struct {
  Arr u, delta, A, B, C, D, z, bias, h0, out, fin, w_out, w_fin;
  ssmkit_selective_scan_args args;
} ScanCase;

static void scan_bind(ScanCase* c) {
  ssmkit_selective_scan_args a = {.struct_size = sizeof a};
  a.u = view(&c->u), a.delta = view(&c->delta), a.A = view(&c->A), a.B = view(&c->B);
  a.C = view(&c->C), a.D = view(&c->D), a.z = view(&c->z), a.delta_bias = view(&c->bias);
  a.initial_state = view(&c->h0);
  a.delta_softplus = 1;
  c->args = a;
}

static double scan_loss(void* ctx) {
  ScanCase* c = (ScanCase*)ctx;
  ssmkit_tensor o = view(&c->out), f = view(&c->fin);
  CHECK_OK(ssmkit_selective_scan_fwd(&c->args, &o, &f));
  return dot(&c->out, &c->w_out) + dot(&c->fin, &c->w_fin);
}

static void test_selective_scan(void) {
  ScanCase c;
  c.u = NORMAL(1, SB, SD, SL), c.delta = UNIFORM(-1.5, 0.5, SB, SD, SL);
  c.A = UNIFORM(-2.0, -0.3, SD, SN), c.B = NORMAL(1, SB, SN, SL), c.C = NORMAL(1, SB, SN, SL);
  c.D = NORMAL(1, SD), c.z = NORMAL(1, SB, SD, SL), c.bias = UNIFORM(-0.5, 0.5, SD);
  c.h0 = NORMAL(1, SB, SD, SN), c.out = NEW(SB, SD, SL), c.fin = NEW(SB, SD, SN);
  c.w_out = NORMAL(1, SB, SD, SL), c.w_fin = NORMAL(1, SB, SD, SN);
  scan_bind(&c);

  static double want_out[SB * SD * SL], want_fin[SB * SD * SN];
  for (int b = 0; b < SB; ++b) {
    for (int d = 0; d < SD; ++d) {
      double h[SN];
      for (int n = 0; n < SN; ++n) h[n] = c.h0.data[(b * SD + d) * SN + n];
      for (int l = 0; l < SL; ++l) {
        const int i = (b * SD + d) * SL + l;
        const double dt = softplus((double)c.delta.data[i] + c.bias.data[d]), u = c.u.data[i];
        double y = (double)c.D.data[d] * u;
        for (int n = 0; n < SN; ++n) {
          const int bl = (b * SN + n) * SL + l;
          h[n] = exp(dt * c.A.data[d * SN + n]) * h[n] + dt * c.B.data[bl] * u;
          y += (double)c.C.data[bl] * h[n];
        }
        want_out[i] = y * silu(c.z.data[i]);
      }
      for (int n = 0; n < SN; ++n) want_fin[(b * SD + d) * SN + n] = h[n];
    }
  }
  for (int algorithm = SSMKIT_SCAN_SEQUENTIAL; algorithm <= SSMKIT_SCAN_LOG_SPACE; ++algorithm) {
    c.args.algorithm = algorithm;
    c.args.chunk_length = 3;
    poison(&c.out), poison(&c.fin);
    scan_loss(&c);
    CHECK(rel_err(c.out.data, want_out, c.out.n) < kFwdTol, "scan algorithm %d: out error %g",
          algorithm, rel_err(c.out.data, want_out, c.out.n));
    CHECK(rel_err(c.fin.data, want_fin, c.fin.n) < kFwdTol, "scan algorithm %d: final error %g",
          algorithm, rel_err(c.fin.data, want_fin, c.fin.n));
  }
  c.args.algorithm = SSMKIT_SCAN_SEQUENTIAL;

  Arr du = NEW(SB, SD, SL), dd = NEW(SB, SD, SL), dA = NEW(SD, SN), dB = NEW(SB, SN, SL);
  Arr dC = NEW(SB, SN, SL), dD = NEW(SD), dz = NEW(SB, SD, SL), dbias = NEW(SD);
  Arr dh0 = NEW(SB, SD, SN);
  ssmkit_selective_scan_grads g = {.struct_size = sizeof g};
  g.du = view(&du), g.ddelta = view(&dd), g.dA = view(&dA), g.dB = view(&dB), g.dC = view(&dC);
  g.dD = view(&dD), g.dz = view(&dz), g.ddelta_bias = view(&dbias), g.dinitial_state = view(&dh0);
  ssmkit_tensor dout = view(&c.w_out), dfin = view(&c.w_fin);
  CHECK_OK(ssmkit_selective_scan_bwd(&c.args, &dout, &dfin, &g));
  const GradCheck checks[] = {
      {"u", &c.u, &du},
      {"delta", &c.delta, &dd},
      {"A", &c.A, &dA},
      {"B", &c.B, &dB},
      {"C", &c.C, &dC},
      {"D", &c.D, &dD},
      {"z", &c.z, &dz},
      {"delta_bias", &c.bias, &dbias},
      {"initial_state", &c.h0, &dh0},
  };
  check_gradients("selective_scan", checks, sizeof checks / sizeof *checks, scan_loss, &c);

  Arr* all[] = {&c.u,     &c.delta, &c.A, &c.B, &c.C, &c.D, &c.z, &c.bias, &c.h0, &c.out, &c.fin,
                &c.w_out, &c.w_fin, &du,  &dd,  &dA,  &dB,  &dC,  &dD,     &dz,   &dbias, &dh0};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

/* ------------------------------------------------------------------ SSD */

enum { QB = 2, QL = 6, QH = 4, QP = 3, QG = 2, QN = 3 };

typedef struct {
  Arr x, dt, A, B, C, D, z, bias, h0, out, fin, w_out, w_fin;
  ssmkit_ssd_args args;
} SsdCase;

static double ssd_loss(void* ctx) {
  SsdCase* c = (SsdCase*)ctx;
  ssmkit_tensor o = view(&c->out), f = view(&c->fin);
  CHECK_OK(ssmkit_ssd_fwd(&c->args, &o, &f));
  return dot(&c->out, &c->w_out) + dot(&c->fin, &c->w_fin);
}

static void test_ssd(void) {
  SsdCase c;
  c.x = NORMAL(1, QB, QL, QH, QP), c.dt = UNIFORM(-3.0, -1.0, QB, QL, QH);
  c.A = UNIFORM(-4.0, -1.0, QH), c.B = NORMAL(1, QB, QL, QG, QN), c.C = NORMAL(1, QB, QL, QG, QN);
  c.D = NORMAL(1, QH), c.z = NORMAL(1, QB, QL, QH, QP), c.bias = UNIFORM(-0.5, 0.5, QH);
  c.h0 = NORMAL(1, QB, QH, QP, QN), c.out = NEW(QB, QL, QH, QP), c.fin = NEW(QB, QH, QP, QN);
  c.w_out = NORMAL(1, QB, QL, QH, QP), c.w_fin = NORMAL(1, QB, QH, QP, QN);
  ssmkit_ssd_args a = {.struct_size = sizeof a};
  a.x = view(&c.x), a.dt = view(&c.dt), a.A = view(&c.A), a.B = view(&c.B), a.C = view(&c.C);
  a.D = view(&c.D), a.z = view(&c.z), a.dt_bias = view(&c.bias), a.initial_states = view(&c.h0);
  a.dt_softplus = 1;
  c.args = a;

  static double want_out[QB * QL * QH * QP], want_fin[QB * QH * QP * QN];
  for (int b = 0; b < QB; ++b) {
    for (int h = 0; h < QH; ++h) {
      const int g = h / (QH / QG);
      for (int p = 0; p < QP; ++p) {
        double s[QN];
        for (int n = 0; n < QN; ++n) s[n] = c.h0.data[((b * QH + h) * QP + p) * QN + n];
        for (int l = 0; l < QL; ++l) {
          const double dt = softplus((double)c.dt.data[(b * QL + l) * QH + h] + c.bias.data[h]);
          const int xi = ((b * QL + l) * QH + h) * QP + p;
          const double x = c.x.data[xi];
          double y = (double)c.D.data[h] * x;
          for (int n = 0; n < QN; ++n) {
            const int bi = ((b * QL + l) * QG + g) * QN + n;
            s[n] = exp(dt * c.A.data[h]) * s[n] + dt * x * c.B.data[bi];
            y += (double)c.C.data[bi] * s[n];
          }
          want_out[xi] = y * silu(c.z.data[xi]);
        }
        for (int n = 0; n < QN; ++n) want_fin[((b * QH + h) * QP + p) * QN + n] = s[n];
      }
    }
  }
  for (int algorithm = SSMKIT_SSD_AUTO; algorithm <= SSMKIT_SSD_SEQUENTIAL; ++algorithm) {
    c.args.algorithm = algorithm;
    c.args.chunk_size = 4; /* not dividing L */
    poison(&c.out), poison(&c.fin);
    ssd_loss(&c);
    CHECK(rel_err(c.out.data, want_out, c.out.n) < kFwdTol, "ssd algorithm %d: out error %g",
          algorithm, rel_err(c.out.data, want_out, c.out.n));
    CHECK(rel_err(c.fin.data, want_fin, c.fin.n) < kFwdTol, "ssd algorithm %d: final error %g",
          algorithm, rel_err(c.fin.data, want_fin, c.fin.n));
  }

  Arr dx = NEW(QB, QL, QH, QP), ddt = NEW(QB, QL, QH), dA = NEW(QH), dB = NEW(QB, QL, QG, QN);
  Arr dC = NEW(QB, QL, QG, QN), dD = NEW(QH), dz = NEW(QB, QL, QH, QP), dbias = NEW(QH);
  Arr dh0 = NEW(QB, QH, QP, QN);
  ssmkit_ssd_grads g = {.struct_size = sizeof g};
  g.dx = view(&dx), g.ddt = view(&ddt), g.dA = view(&dA), g.dB = view(&dB), g.dC = view(&dC);
  g.dD = view(&dD), g.dz = view(&dz), g.ddt_bias = view(&dbias), g.dinitial_states = view(&dh0);
  ssmkit_tensor dout = view(&c.w_out), dfin = view(&c.w_fin);
  CHECK_OK(ssmkit_ssd_bwd(&c.args, &dout, &dfin, &g));
  const GradCheck checks[] = {
      {"x", &c.x, &dx},
      {"dt", &c.dt, &ddt},
      {"A", &c.A, &dA},
      {"B", &c.B, &dB},
      {"C", &c.C, &dC},
      {"D", &c.D, &dD},
      {"z", &c.z, &dz},
      {"dt_bias", &c.bias, &dbias},
      {"initial_states", &c.h0, &dh0},
  };
  check_gradients("ssd", checks, sizeof checks / sizeof *checks, ssd_loss, &c);

  Arr* all[] = {&c.x,     &c.dt,    &c.A, &c.B, &c.C, &c.D, &c.z, &c.bias, &c.h0, &c.out, &c.fin,
                &c.w_out, &c.w_fin, &dx,  &ddt, &dA,  &dB,  &dC,  &dD,     &dz,   &dbias, &dh0};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

/* ------------------------------------------------------------------ decode step */

static void test_state_update(void) {
  enum { B = 3, D = 5, N = 4 };
  Arr state = NORMAL(1, B, D, N), x = NORMAL(1, B, D), dt = UNIFORM(-2, 0, B, D);
  Arr A = UNIFORM(-2, -0.3, D, N), Bm = NORMAL(1, B, N), Cm = NORMAL(1, B, N), Dv = NORMAL(1, D);
  Arr z = NORMAL(1, B, D), bias = UNIFORM(-0.5, 0.5, D), out = NEW(B, D);
  double want_state[B * D * N], want_out[B * D];
  for (int b = 0; b < B; ++b) {
    for (int d = 0; d < D; ++d) {
      const double t = softplus((double)dt.data[b * D + d] + bias.data[d]), u = x.data[b * D + d];
      double y = (double)Dv.data[d] * u;
      for (int n = 0; n < N; ++n) {
        const int i = (b * D + d) * N + n;
        want_state[i] = exp(t * A.data[d * N + n]) * state.data[i] + t * Bm.data[b * N + n] * u;
        y += (double)Cm.data[b * N + n] * want_state[i];
      }
      want_out[b * D + d] = y * silu(z.data[b * D + d]);
    }
  }
  ssmkit_state_update_args a = {.struct_size = sizeof a};
  a.x = view(&x), a.dt = view(&dt), a.A = view(&A), a.B = view(&Bm), a.C = view(&Cm);
  a.D = view(&Dv), a.z = view(&z), a.dt_bias = view(&bias);
  a.dt_softplus = 1;
  ssmkit_tensor s = view(&state), o = view(&out);
  poison(&out);
  CHECK_OK(ssmkit_selective_state_update(&a, &s, &o));
  CHECK(rel_err(state.data, want_state, state.n) < kFwdTol, "state_update: state error %g",
        rel_err(state.data, want_state, state.n));
  CHECK(rel_err(out.data, want_out, out.n) < kFwdTol, "state_update: out error %g",
        rel_err(out.data, want_out, out.n));
  Arr* all[] = {&state, &x, &dt, &A, &Bm, &Cm, &Dv, &z, &bias, &out};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

/* ------------------------------------------------------------------ causal conv1d */

enum { CB = 2, CD = 3, CL = 6, CK = 4 };

typedef struct {
  Arr x, w, bias, init, out, fin, w_out, w_fin;
  ssmkit_conv1d_args args;
} ConvCase;

static double conv_loss(void* ctx) {
  ConvCase* c = (ConvCase*)ctx;
  ssmkit_tensor o = view(&c->out), f = view(&c->fin);
  CHECK_OK(ssmkit_causal_conv1d_fwd(&c->args, &o, &f));
  return dot(&c->out, &c->w_out) + dot(&c->fin, &c->w_fin);
}

static void test_conv1d(void) {
  ConvCase c;
  c.x = NORMAL(1, CB, CD, CL), c.w = NORMAL(0.5, CD, CK), c.bias = NORMAL(0.5, CD);
  c.init = NORMAL(1, CB, CD, CK - 1), c.out = NEW(CB, CD, CL), c.fin = NEW(CB, CD, CK - 1);
  c.w_out = NORMAL(1, CB, CD, CL), c.w_fin = NORMAL(1, CB, CD, CK - 1);
  ssmkit_conv1d_args a = {.struct_size = sizeof a};
  a.x = view(&c.x), a.weight = view(&c.w), a.bias = view(&c.bias);
  a.initial_states = view(&c.init);
  a.activation = SSMKIT_ACT_SILU;
  c.args = a;

  double want_out[CB * CD * CL], want_fin[CB * CD * (CK - 1)];
  for (int b = 0; b < CB; ++b) {
    for (int d = 0; d < CD; ++d) {
      double xpad[CK - 1 + CL];
      for (int k = 0; k < CK - 1; ++k) xpad[k] = c.init.data[(b * CD + d) * (CK - 1) + k];
      for (int l = 0; l < CL; ++l) xpad[CK - 1 + l] = c.x.data[(b * CD + d) * CL + l];
      for (int l = 0; l < CL; ++l) {
        double v = c.bias.data[d];
        for (int k = 0; k < CK; ++k) v += (double)c.w.data[d * CK + k] * xpad[l + k];
        want_out[(b * CD + d) * CL + l] = silu(v);
      }
      for (int k = 0; k < CK - 1; ++k) want_fin[(b * CD + d) * (CK - 1) + k] = xpad[CL + k];
    }
  }
  poison(&c.out), poison(&c.fin);
  conv_loss(&c);
  CHECK(rel_err(c.out.data, want_out, c.out.n) < kFwdTol, "conv1d: out error %g",
        rel_err(c.out.data, want_out, c.out.n));
  CHECK(rel_err(c.fin.data, want_fin, c.fin.n) < kFwdTol, "conv1d: final error %g",
        rel_err(c.fin.data, want_fin, c.fin.n));

  Arr dx = NEW(CB, CD, CL), dw = NEW(CD, CK), db = NEW(CD), dinit = NEW(CB, CD, CK - 1);
  ssmkit_conv1d_grads g = {.struct_size = sizeof g};
  g.dx = view(&dx), g.dweight = view(&dw), g.dbias = view(&db), g.dinitial_states = view(&dinit);
  ssmkit_tensor dout = view(&c.w_out), dfin = view(&c.w_fin);
  CHECK_OK(ssmkit_causal_conv1d_bwd(&c.args, &dout, &dfin, &g));
  const GradCheck checks[] = {
      {"x", &c.x, &dx},
      {"weight", &c.w, &dw},
      {"bias", &c.bias, &db},
      {"initial_states", &c.init, &dinit},
  };
  check_gradients("conv1d", checks, sizeof checks / sizeof *checks, conv_loss, &c);

  /* The decode update: one step against the same definition, the state shifted. */
  Arr state = NORMAL(1, CB, CD, CK), xs = NORMAL(1, CB, CD), o1 = NEW(CB, CD);
  double want1[CB * CD], want_state[CB * CD * CK];
  for (int b = 0; b < CB; ++b) {
    for (int d = 0; d < CD; ++d) {
      const float* st = state.data + (b * CD + d) * CK;
      double v = c.bias.data[d];
      for (int k = 0; k < CK - 1; ++k) v += (double)c.w.data[d * CK + k] * st[k + 1];
      v += (double)c.w.data[d * CK + CK - 1] * xs.data[b * CD + d];
      want1[b * CD + d] = silu(v);
      for (int k = 0; k < CK - 1; ++k) want_state[(b * CD + d) * CK + k] = st[k + 1];
      want_state[(b * CD + d) * CK + CK - 1] = xs.data[b * CD + d];
    }
  }
  ssmkit_conv1d_update_args u = {.struct_size = sizeof u};
  u.x = view(&xs), u.weight = view(&c.w), u.bias = view(&c.bias);
  u.activation = SSMKIT_ACT_SILU;
  ssmkit_tensor s = view(&state), o = view(&o1);
  poison(&o1);
  CHECK_OK(ssmkit_causal_conv1d_update(&u, &s, &o));
  CHECK(rel_err(o1.data, want1, o1.n) < kFwdTol, "conv1d_update: out error %g",
        rel_err(o1.data, want1, o1.n));
  CHECK(rel_err(state.data, want_state, state.n) == 0, "conv1d_update: state not shifted");

  Arr* all[] = {&c.x, &c.w, &c.bias, &c.init, &c.out, &c.fin, &c.w_out, &c.w_fin,
                &dx,  &dw,  &db,     &dinit,  &state, &xs,    &o1};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

/* ------------------------------------------------------------------ RMSNorm */

enum { RM = 5, RE = 8, RS = 4 };

typedef struct {
  Arr x, w, bias, z, residual, out, res_out, w_out, w_res;
  ssmkit_rmsnorm_args args;
  ssmkit_add_rmsnorm_args add_args;
} NormCase;

static double rmsnorm_loss(void* ctx) {
  NormCase* c = (NormCase*)ctx;
  ssmkit_tensor o = view(&c->out);
  CHECK_OK(ssmkit_rmsnorm_fwd(&c->args, &o));
  return dot(&c->out, &c->w_out);
}

static double add_rmsnorm_loss(void* ctx) {
  NormCase* c = (NormCase*)ctx;
  ssmkit_tensor o = view(&c->out), r = view(&c->res_out);
  CHECK_OK(ssmkit_add_rmsnorm_fwd(&c->add_args, &o, &r));
  return dot(&c->out, &c->w_out) + dot(&c->res_out, &c->w_res);
}

static void test_rmsnorm(void) {
  NormCase c;
  c.x = NORMAL(1, RM, RE), c.w = NORMAL(1, RE), c.bias = NORMAL(0.5, RE), c.z = NORMAL(1, RM, RE);
  c.residual = NORMAL(1, RM, RE), c.out = NEW(RM, RE), c.res_out = NEW(RM, RE);
  c.w_out = NORMAL(1, RM, RE), c.w_res = NORMAL(1, RM, RE);
  const float eps = 1e-5f;
  for (int before = 0; before <= 1; ++before) {
    ssmkit_rmsnorm_args a = {.struct_size = sizeof a};
    a.x = view(&c.x), a.weight = view(&c.w), a.bias = view(&c.bias), a.z = view(&c.z);
    a.eps = eps, a.group_size = RS, a.norm_before_gate = before;
    c.args = a;
    double want[RM * RE];
    for (int m = 0; m < RM; ++m) {
      double xg[RE];
      for (int e = 0; e < RE; ++e) {
        xg[e] = c.x.data[m * RE + e];
        if (!before) xg[e] *= silu(c.z.data[m * RE + e]);
      }
      for (int g = 0; g < RE / RS; ++g) {
        double ss = 0;
        for (int e = g * RS; e < (g + 1) * RS; ++e) ss += xg[e] * xg[e];
        const double rstd = 1.0 / sqrt(ss / RS + eps);
        for (int e = g * RS; e < (g + 1) * RS; ++e) {
          double y = xg[e] * rstd * c.w.data[e] + c.bias.data[e];
          if (before) y *= silu(c.z.data[m * RE + e]);
          want[m * RE + e] = y;
        }
      }
    }
    poison(&c.out);
    rmsnorm_loss(&c);
    CHECK(rel_err(c.out.data, want, c.out.n) < kFwdTol, "rmsnorm before=%d: error %g", before,
          rel_err(c.out.data, want, c.out.n));

    Arr dx = NEW(RM, RE), dw = NEW(RE), db = NEW(RE), dz = NEW(RM, RE);
    ssmkit_rmsnorm_grads g = {.struct_size = sizeof g};
    g.dx = view(&dx), g.dweight = view(&dw), g.dbias = view(&db), g.dz = view(&dz);
    ssmkit_tensor dout = view(&c.w_out);
    CHECK_OK(ssmkit_rmsnorm_bwd(&c.args, &dout, &g));
    const GradCheck checks[] = {
        {"x", &c.x, &dx},
        {"weight", &c.w, &dw},
        {"bias", &c.bias, &db},
        {"z", &c.z, &dz},
    };
    check_gradients("rmsnorm", checks, sizeof checks / sizeof *checks, rmsnorm_loss, &c);
    release(&dx), release(&dw), release(&db), release(&dz);
  }

  ssmkit_add_rmsnorm_args a = {.struct_size = sizeof a};
  a.x = view(&c.x), a.residual = view(&c.residual), a.weight = view(&c.w), a.bias = view(&c.bias);
  a.eps = eps;
  c.add_args = a;
  double want_out[RM * RE], want_res[RM * RE];
  for (int m = 0; m < RM; ++m) {
    double ss = 0;
    for (int e = 0; e < RE; ++e) {
      want_res[m * RE + e] = (double)c.x.data[m * RE + e] + c.residual.data[m * RE + e];
      ss += want_res[m * RE + e] * want_res[m * RE + e];
    }
    const double rstd = 1.0 / sqrt(ss / RE + eps);
    for (int e = 0; e < RE; ++e) {
      want_out[m * RE + e] = want_res[m * RE + e] * rstd * c.w.data[e] + c.bias.data[e];
    }
  }
  poison(&c.out), poison(&c.res_out);
  add_rmsnorm_loss(&c);
  CHECK(rel_err(c.out.data, want_out, c.out.n) < kFwdTol, "add_rmsnorm: out error %g",
        rel_err(c.out.data, want_out, c.out.n));
  CHECK(rel_err(c.res_out.data, want_res, c.res_out.n) < kFwdTol, "add_rmsnorm: residual error");

  Arr dx = NEW(RM, RE), dres = NEW(RM, RE), dw = NEW(RE), db = NEW(RE);
  ssmkit_add_rmsnorm_grads g = {.struct_size = sizeof g};
  g.dx = view(&dx), g.dresidual = view(&dres), g.dweight = view(&dw), g.dbias = view(&db);
  ssmkit_tensor dout = view(&c.w_out), dres_out = view(&c.w_res);
  CHECK_OK(ssmkit_add_rmsnorm_bwd(&c.add_args, &dout, &dres_out, &g));
  const GradCheck checks[] = {
      {"x", &c.x, &dx},
      {"residual", &c.residual, &dres},
      {"weight", &c.w, &dw},
      {"bias", &c.bias, &db},
  };
  check_gradients("add_rmsnorm", checks, sizeof checks / sizeof *checks, add_rmsnorm_loss, &c);

  Arr* all[] = {&c.x,     &c.w,     &c.bias, &c.z,  &c.residual, &c.out, &c.res_out,
                &c.w_out, &c.w_res, &dx,     &dres, &dw,         &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

/* ------------------------------------------------------------------ linear */

enum { LT = 6, LK = 7, LM = 5 };

typedef struct {
  Arr x, w, bias, out, w_out;
  ssmkit_linear_args args;
} LinearCase;

static double linear_loss(void* ctx) {
  LinearCase* c = (LinearCase*)ctx;
  ssmkit_tensor o = view(&c->out);
  CHECK_OK(ssmkit_linear_fwd(&c->args, &o));
  return dot(&c->out, &c->w_out);
}

static void test_linear(void) {
  LinearCase c;
  c.x = NORMAL(1, LT, LK), c.w = NORMAL(0.3, LM, LK), c.bias = NORMAL(1, LM);
  c.out = NEW(LT, LM), c.w_out = NORMAL(1, LT, LM);
  ssmkit_linear_args a = {.struct_size = sizeof a};
  a.x = view(&c.x), a.weight = view(&c.w), a.bias = view(&c.bias);
  c.args = a;
  double want[LT * LM];
  for (int t = 0; t < LT; ++t) {
    for (int m = 0; m < LM; ++m) {
      double sum = c.bias.data[m];
      for (int k = 0; k < LK; ++k) sum += (double)c.x.data[t * LK + k] * c.w.data[m * LK + k];
      want[t * LM + m] = sum;
    }
  }
  poison(&c.out);
  linear_loss(&c);
  CHECK(rel_err(c.out.data, want, c.out.n) < kFwdTol, "linear: error %g",
        rel_err(c.out.data, want, c.out.n));

  Arr dx = NEW(LT, LK), dw = NEW(LM, LK), db = NEW(LM);
  poison(&dx), poison(&dw), poison(&db);
  ssmkit_linear_grads g = {.struct_size = sizeof g};
  g.dx = view(&dx), g.dweight = view(&dw), g.dbias = view(&db);
  ssmkit_tensor dout = view(&c.w_out);
  CHECK_OK(ssmkit_linear_bwd(&c.args, &dout, &g));
  const GradCheck checks[] = {
      {"x", &c.x, &dx},
      {"weight", &c.w, &dw},
      {"bias", &c.bias, &db},
  };
  check_gradients("linear", checks, sizeof checks / sizeof *checks, linear_loss, &c);

  /* Bad input: a message naming the argument, nothing written. */
  poison(&dx);
  g.dx.shape[1] = LK + 1;
  CHECK(ssmkit_linear_bwd(&c.args, &dout, &g) == SSMKIT_INVALID_ARGUMENT, "linear: bad dx");
  CHECK(strstr(ssmkit_last_error(), "dx") != NULL, "linear: message %s", ssmkit_last_error());
  CHECK(isnan(dx.data[0]), "linear: dx written on error");

  Arr* all[] = {&c.x, &c.w, &c.bias, &c.out, &c.w_out, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

/* ------------------------------------------------------------------ packed sequences */

/* Positions [l0, l0 + len) of a contiguous (1, ..., L) or (1, L, ...) tensor: time in
 * dimension `dim`, batch 1. */
static ssmkit_tensor time_slice(ssmkit_tensor t, int dim, int64_t l0, int64_t len) {
  t.data = (float*)t.data + l0 * t.strides[dim];
  t.shape[dim] = len;
  return t;
}
/* Row r of a contiguous (R, ...) state tensor, as (1, ...). */
static ssmkit_tensor row(ssmkit_tensor t, int64_t r) {
  t.data = (float*)t.data + r * t.strides[0];
  t.shape[0] = 1;
  return t;
}
/* A NaN on either side is an infinite difference (fmax would drop it; its reduction also
 * crashed Debian 12's aarch64 gcc). */
static double max_abs_diff(const Arr* a, const Arr* b) {
  double m = 0;
  for (int64_t i = 0; i < a->n; ++i) {
    const double d = fabs((double)a->data[i] - b->data[i]);
    if (isnan(d)) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

enum { VD = 3, VN = 2, VS = 3, VL = 9, VK = 3 };
static const int64_t kVarlenCu[VS + 1] = {0, 1, 4, 9};
static const int32_t kVarlenSeqIdx[VL] = {0, 1, 1, 1, 2, 2, 2, 2, 2};

/* cu_seqlens and seq_idx through the ABI: a packed call equals one call per sequence; a
 * struct of the 0.1.0 size (which ends before the packed-sequence fields) still works. */
static void test_varlen(void) {
  int64_t cu[VS + 1];
  int32_t seq_idx[VL];
  memcpy(cu, kVarlenCu, sizeof cu);
  memcpy(seq_idx, kVarlenSeqIdx, sizeof seq_idx);
  ssmkit_tensor cu_t, seq_t;
  CHECK_OK(ssmkit_tensor_contiguous(&cu_t, cu, SSMKIT_I64, 1, SHAPE(VS + 1)));
  CHECK_OK(ssmkit_tensor_contiguous(&seq_t, seq_idx, SSMKIT_I32, 2, SHAPE(1, VL)));

  /* Selective scan: per-sequence initial states, varlen states, their gradients. */
  Arr u = NORMAL(1, 1, VD, VL), delta = UNIFORM(-1.5, 0.5, 1, VD, VL),
      A = UNIFORM(-2, -0.3, VD, VN);
  Arr B = NORMAL(1, 1, VN, VL), C = NORMAL(1, 1, VN, VL), h0 = NORMAL(1, VS, VD, VN);
  Arr out = NEW(1, VD, VL), fin = NEW(1, VD, VN), var = NEW(VS, VD, VN);
  Arr out1 = NEW(1, VD, VL), var1 = NEW(VS, VD, VN);
  ssmkit_selective_scan_args a = {.struct_size = sizeof a};
  a.u = view(&u), a.delta = view(&delta), a.A = view(&A), a.B = view(&B), a.C = view(&C);
  a.initial_state = view(&h0), a.cu_seqlens = cu_t, a.seq_idx = seq_t, a.delta_softplus = 1;
  ssmkit_tensor o = view(&out), f = view(&fin), v = view(&var);
  poison(&out), poison(&fin), poison(&var);
  CHECK_OK(ssmkit_selective_scan_fwd_varlen(&a, &o, &f, &v));
  Arr dout = NORMAL(1, 1, VD, VL), dvar = NORMAL(1, VS, VD, VN);
  Arr du = NEW(1, VD, VL), dh0 = NEW(VS, VD, VN), du1 = NEW(1, VD, VL), dh01 = NEW(VS, VD, VN);
  ssmkit_selective_scan_grads g = {.struct_size = sizeof g};
  g.du = view(&du), g.dinitial_state = view(&dh0);
  ssmkit_tensor dout_t = view(&dout), dvar_t = view(&dvar);
  poison(&du), poison(&dh0);
  CHECK_OK(ssmkit_selective_scan_bwd_varlen(&a, &dout_t, NULL, &dvar_t, &g));
  for (int k = 0; k < VS; ++k) {
    const int64_t l0 = cu[k], len = cu[k + 1] - cu[k];
    ssmkit_selective_scan_args one = a;
    one.cu_seqlens.data = NULL, one.seq_idx.data = NULL;
    one.u = time_slice(a.u, 2, l0, len), one.delta = time_slice(a.delta, 2, l0, len);
    one.B = time_slice(a.B, 2, l0, len), one.C = time_slice(a.C, 2, l0, len);
    one.initial_state = row(a.initial_state, k);
    ssmkit_tensor o1 = time_slice(view(&out1), 2, l0, len), f1 = row(view(&var1), k);
    CHECK_OK(ssmkit_selective_scan_fwd(&one, &o1, &f1));
    ssmkit_selective_scan_grads g1 = {.struct_size = sizeof g1};
    g1.du = time_slice(view(&du1), 2, l0, len), g1.dinitial_state = row(view(&dh01), k);
    ssmkit_tensor d1 = time_slice(dout_t, 2, l0, len), df1 = row(dvar_t, k);
    CHECK_OK(ssmkit_selective_scan_bwd(&one, &d1, &df1, &g1));
  }
  CHECK(max_abs_diff(&out, &out1) < 1e-5, "scan varlen: out %g", max_abs_diff(&out, &out1));
  CHECK(max_abs_diff(&var, &var1) < 1e-5, "scan varlen: varlen states %g",
        max_abs_diff(&var, &var1));
  CHECK(memcmp(fin.data, var.data + (VS - 1) * VD * VN, sizeof(float) * VD * VN) == 0,
        "scan varlen: final_state is not the last sequence's state");
  CHECK(max_abs_diff(&du, &du1) < 1e-5, "scan varlen: du %g", max_abs_diff(&du, &du1));
  CHECK(max_abs_diff(&dh0, &dh01) < 1e-5, "scan varlen: dinitial_state %g",
        max_abs_diff(&dh0, &dh01));

  /* The 0.1.0 struct: its size ends before seq_idx; whatever lies after it is not read. */
  ssmkit_selective_scan_args old = a;
  old.struct_size = offsetof(ssmkit_selective_scan_args, seq_idx);
  old.seq_idx.data = (void*)1, old.cu_seqlens.dtype = 99; /* not read */
  old.initial_state = row(a.initial_state, 0);
  ssmkit_selective_scan_args plain = old;
  plain.struct_size = sizeof plain;
  plain.seq_idx.data = NULL, plain.cu_seqlens.data = NULL;
  ssmkit_tensor o_old = view(&out), o_plain = view(&out1);
  CHECK_OK(ssmkit_selective_scan_fwd(&old, &o_old, NULL));
  CHECK_OK(ssmkit_selective_scan_fwd(&plain, &o_plain, NULL));
  CHECK(memcmp(out.data, out1.data, sizeof(float) * (size_t)out.n) == 0,
        "a 0.1.0-sized args struct gives another result");
  CHECK_FAILS(ssmkit_selective_scan_fwd_varlen(&plain, &o, NULL, &v), SSMKIT_INVALID_ARGUMENT,
              "varlen_states: expected no tensor without cu_seqlens");

  /* SSD: (1, L, H, P) with cu_seqlens and varlen states. */
  enum { H = 2, P = 2, G = 1, N = 3 };
  Arr x = NORMAL(1, 1, VL, H, P), dt = UNIFORM(-3.0, -1.0, 1, VL, H), sA = UNIFORM(-4, -1, H);
  Arr sB = NORMAL(1, 1, VL, G, N), sC = NORMAL(1, 1, VL, G, N), sh0 = NORMAL(1, VS, H, P, N);
  Arr sout = NEW(1, VL, H, P), svar = NEW(VS, H, P, N), sout1 = NEW(1, VL, H, P);
  Arr svar1 = NEW(VS, H, P, N);
  ssmkit_ssd_args s = {.struct_size = sizeof s};
  s.x = view(&x), s.dt = view(&dt), s.A = view(&sA), s.B = view(&sB), s.C = view(&sC);
  s.initial_states = view(&sh0), s.dt_softplus = 1, s.cu_seqlens = cu_t;
  ssmkit_tensor so = view(&sout), sv = view(&svar);
  CHECK_OK(ssmkit_ssd_fwd_varlen(&s, &so, NULL, &sv));
  for (int k = 0; k < VS; ++k) {
    const int64_t l0 = cu[k], len = cu[k + 1] - cu[k];
    ssmkit_ssd_args one = s;
    one.cu_seqlens.data = NULL;
    one.x = time_slice(s.x, 1, l0, len), one.dt = time_slice(s.dt, 1, l0, len);
    one.B = time_slice(s.B, 1, l0, len), one.C = time_slice(s.C, 1, l0, len);
    one.initial_states = row(s.initial_states, k);
    ssmkit_tensor o1 = time_slice(view(&sout1), 1, l0, len), f1 = row(view(&svar1), k);
    CHECK_OK(ssmkit_ssd_fwd(&one, &o1, &f1));
  }
  CHECK(max_abs_diff(&sout, &sout1) < 1e-5, "ssd varlen: out %g", max_abs_diff(&sout, &sout1));
  CHECK(max_abs_diff(&svar, &svar1) < 1e-5, "ssd varlen: states %g", max_abs_diff(&svar, &svar1));
  Arr sdout = NORMAL(1, 1, VL, H, P), sdvar = NORMAL(1, VS, H, P, N), sdx = NEW(1, VL, H, P);
  ssmkit_ssd_grads sg = {.struct_size = sizeof sg};
  sg.dx = view(&sdx);
  ssmkit_tensor sdout_t = view(&sdout), sdvar_t = view(&sdvar);
  poison(&sdx);
  CHECK_OK(ssmkit_ssd_bwd_varlen(&s, &sdout_t, NULL, &sdvar_t, &sg));
  int finite = 1;
  for (int64_t i = 0; i < sdx.n; ++i) finite &= isfinite(sdx.data[i]) != 0;
  CHECK(finite, "ssd varlen backward: dx not written");

  /* causal conv1d: seq_idx; each sequence sees only its own inputs. */
  Arr cx = NORMAL(1, 1, VD, VL), cw = NORMAL(0.5, VD, VK), cout = NEW(1, VD, VL);
  Arr cout1 = NEW(1, VD, VL);
  ssmkit_conv1d_args c = {.struct_size = sizeof c};
  c.x = view(&cx), c.weight = view(&cw), c.seq_idx = seq_t, c.activation = SSMKIT_ACT_SILU;
  ssmkit_tensor co = view(&cout);
  CHECK_OK(ssmkit_causal_conv1d_fwd(&c, &co, NULL));
  for (int k = 0; k < VS; ++k) {
    const int64_t l0 = cu[k], len = cu[k + 1] - cu[k];
    ssmkit_conv1d_args one = c;
    one.seq_idx.data = NULL;
    one.x = time_slice(c.x, 2, l0, len);
    ssmkit_tensor o1 = time_slice(view(&cout1), 2, l0, len);
    CHECK_OK(ssmkit_causal_conv1d_fwd(&one, &o1, NULL));
  }
  CHECK(max_abs_diff(&cout, &cout1) < 1e-6, "conv1d seq_idx: out %g", max_abs_diff(&cout, &cout1));

  Arr* all[] = {&u,    &delta, &A,     &B,     &C,     &h0,  &out, &fin, &var,  &out1, &var1, &dout,
                &dvar, &du,    &dh0,   &du1,   &dh01,  &x,   &dt,  &sA,  &sB,   &sC,   &sh0,  &sout,
                &svar, &sout1, &svar1, &sdout, &sdvar, &sdx, &cx,  &cw,  &cout, &cout1};
  for (size_t i = 0; i < sizeof all / sizeof *all; ++i) release(all[i]);
}

int main(void) {
  harness_start("capi_c11_test");
  test_versions();
  test_errors();
  test_selective_scan();
  test_ssd();
  test_state_update();
  test_conv1d();
  test_rmsnorm();
  test_linear();
  test_varlen();
  return harness_finish();
}

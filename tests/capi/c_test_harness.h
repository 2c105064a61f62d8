/* The checks, seeded random numbers and comparisons shared by the C ABI's C11 test programs
 * (capi_c11_test.c, capi_model_test.c). A failed CHECK prints its place and the seed; the
 * program ends with harness_finish(), which prints "N passed, N failed" and gives the exit
 * status. SSMKIT_TEST_SEED pins the seed. Header-only: one test program per executable. */
#ifndef SSMKIT_TESTS_CAPI_C_TEST_HARNESS_H_
#define SSMKIT_TESTS_CAPI_C_TEST_HARNESS_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssmkit/ssmkit.h"

static int g_passed, g_failed;
static uint64_t g_seed, g_rng;

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (cond) {                                                          \
      ++g_passed;                                                        \
    } else {                                                             \
      ++g_failed;                                                        \
      fprintf(stderr, "%s:%d: FAILED (seed %llu): ", __FILE__, __LINE__, \
              (unsigned long long)g_seed);                               \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
    }                                                                    \
  } while (0)

#define CHECK_OK(call)                                                                          \
  do {                                                                                          \
    ssmkit_status s_ = (call);                                                                  \
    CHECK(s_ == SSMKIT_OK, "%s -> %s: %s", #call, ssmkit_status_name(s_), ssmkit_last_error()); \
  } while (0)

/* A call that must fail with `status` and a last error containing `part`. */
#define CHECK_FAILS(call, status, part)                                               \
  do {                                                                                \
    ssmkit_status s_ = (call);                                                        \
    CHECK(s_ == (status) && strstr(ssmkit_last_error(), (part)) != NULL,              \
          "%s -> %s: \"%s\", expected %s with \"%s\"", #call, ssmkit_status_name(s_), \
          ssmkit_last_error(), ssmkit_status_name(status), (part));                   \
  } while (0)

static inline void harness_start(const char* program) {
  const char* env = getenv("SSMKIT_TEST_SEED");
  g_seed = env ? strtoull(env, NULL, 10) : ((uint64_t)time(NULL) * 2654435761u) ^ (uint64_t)clock();
  g_rng = g_seed;
  printf("%s: seed %llu (rerun with SSMKIT_TEST_SEED=%llu)\n", program, (unsigned long long)g_seed,
         (unsigned long long)g_seed);
}

static inline int harness_finish(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

static inline uint64_t next_u64(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static inline double uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(next_u64() >> 11) / 9007199254740992.0);
}
static inline double normal(void) {
  const double u1 = uniform(1e-12, 1.0), u2 = uniform(0.0, 1.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline int contains(const char* s, const char* part) { return strstr(s, part) != NULL; }

/* ||got - want|| / ||want||, +inf on a NaN or inf in got. */
static inline double rel_err(const float* got, const double* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

#endif /* SSMKIT_TESTS_CAPI_C_TEST_HARNESS_H_ */

/* A C11 consumer of an installed libssmkit.so: the header's version matches the library's,
 * and one causal conv1d forward matches its definition. Exits non-zero on any mismatch. */
#include <math.h>
#include <ssmkit/ssmkit.h>
#include <stdio.h>

int main(void) {
  if (ssmkit_version() != SSMKIT_VERSION || ssmkit_abi_version() != SSMKIT_ABI_VERSION) {
    fprintf(stderr, "header %d / library %u\n", SSMKIT_VERSION, (unsigned)ssmkit_version());
    return 1;
  }
  /* x (1, 2, 5), weight (2, 3), bias (2): out[d,l] = bias[d] + sum_k w[d,k] x[d, l + k - 2] */
  float x[10] = {1, 2, 3, 4, 5, -1, 0.5f, 2, -3, 1};
  float w[6] = {0.5f, -1, 2, 1, 1, -0.25f};
  float bias[2] = {0.1f, -0.2f};
  float out[10];
  int64_t xs[3] = {1, 2, 5}, ws[2] = {2, 3}, bs[1] = {2};
  ssmkit_conv1d_args args = {.struct_size = sizeof args};
  ssmkit_tensor o;
  if (ssmkit_tensor_contiguous(&args.x, x, SSMKIT_F32, 3, xs) != SSMKIT_OK ||
      ssmkit_tensor_contiguous(&args.weight, w, SSMKIT_F32, 2, ws) != SSMKIT_OK ||
      ssmkit_tensor_contiguous(&args.bias, bias, SSMKIT_F32, 1, bs) != SSMKIT_OK ||
      ssmkit_tensor_contiguous(&o, out, SSMKIT_F32, 3, xs) != SSMKIT_OK) {
    fprintf(stderr, "%s\n", ssmkit_last_error());
    return 1;
  }
  if (ssmkit_causal_conv1d_fwd(&args, &o, NULL) != SSMKIT_OK) {
    fprintf(stderr, "%s\n", ssmkit_last_error());
    return 1;
  }
  for (int d = 0; d < 2; ++d) {
    for (int l = 0; l < 5; ++l) {
      double want = bias[d];
      for (int k = 0; k < 3; ++k) {
        const int t = l + k - 2;
        if (t >= 0) want += (double)w[d * 3 + k] * x[d * 5 + t];
      }
      if (fabs(out[d * 5 + l] - want) > 1e-5) {
        fprintf(stderr, "out[%d,%d] = %g, want %g\n", d, l, out[d * 5 + l], want);
        return 1;
      }
    }
  }
  printf("consumer: ssmkit %s ok\n", ssmkit_version_string());
  return 0;
}

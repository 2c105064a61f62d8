// Selective-scan inputs distributed as a Mamba-1 layer sees them, shared by `ssmkit bench scan`
// and `ssmkit check scan` so that the timed and the error-measured inputs are the same kind.
// Dimension legend: B batch, D channels (d_inner), L length, N state size.
//
//   u, z, B, C ~ N(0, 1)            B and C variable, (B, N, L)
//   A[d, n] = -(n + 1)              S4D-real init (A_log = log(n + 1))
//   D[d] ~ 1 + 0.1 N(0, 1)          around its init value 1
//   dt[b, d, l] ~ logU(dt_min, dt_max), delta_bias[d] = softplus^-1(dt0_d), dt0_d ~ logU too,
//   delta = softplus^-1(dt) - delta_bias, so softplus(delta + delta_bias) = dt (up to f32)
//   initial_state (B, D, N) ~ N(0, 1) when asked for (a decode step reads the previous state)
#pragma once

#include <cstdint>
#include <vector>

#include "ssmkit/selective_scan.hpp"

namespace ssmkit::scan_inputs {

struct Shape {
  int64_t batch = 1, dim = 1, seqlen = 1, dstate = 16;
};

struct Options {
  double dt_min = 1e-3, dt_max = 1e-1;
  bool with_initial_state = false;
};

// f32 values; the check converts them to double for the oracle, so both see the same numbers.
struct LayerData {
  Shape shape;
  std::vector<float> u, delta, z;    // (B, D, L)
  std::vector<float> A;              // (D, N)
  std::vector<float> B, C;           // (B, N, L)
  std::vector<float> D, delta_bias;  // (D)
  std::vector<float> initial_state;  // (B, D, N), empty when absent

  // f32 views over the vectors above, delta_softplus on.
  SelectiveScanInputs Inputs() const;
  // sum_{k<=l} dt_k * min_n A[d, n] in double, for each step l of row (b, d): the log of the
  // fastest decay, which the log-space algorithm must invert (exp(-sum) in f32).
  std::vector<double> CumulativeLogDecay(int64_t b, int64_t d) const;
};

LayerData MakeLayerData(const Shape& shape, const Options& options, uint64_t seed);

double Softplus(double x);  // log(1 + e^x), as the oracle applies it (identity above 20)

}  // namespace ssmkit::scan_inputs

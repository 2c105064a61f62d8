// The fp64 oracle of the selective scan: the definition in include/ssmkit/selective_scan.hpp
// written as plainly as possible, forward and analytic backward. Contiguous arrays only.
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct ScanShape {
  int64_t batch = 1, dim = 1, seqlen = 1, dstate = 1;
  bool b_variable = true, c_variable = true;  // false: constant (D, N)
  int64_t b_groups = 1, c_groups = 1;         // G of the variable form (B, G, N, L)
  bool delta_softplus = false;
};

struct ScanInputs {                    // nullptr marks an absent optional input
  const double* u = nullptr;           // (B, D, L)
  const double* delta = nullptr;       // (B, D, L)
  const double* A = nullptr;           // (D, N)
  const double* B = nullptr;           // (D, N) or (B, G, N, L)
  const double* C = nullptr;           // (D, N) or (B, G, N, L)
  const double* D = nullptr;           // (D)
  const double* z = nullptr;           // (B, D, L)
  const double* delta_bias = nullptr;  // (D)
  const double* h0 = nullptr;          // (B, D, N)
};

struct ScanGrads {  // each the shape of its input; nullptr where the input is absent
  double* du = nullptr;
  double* ddelta = nullptr;
  double* dA = nullptr;
  double* dB = nullptr;
  double* dC = nullptr;
  double* dD = nullptr;
  double* dz = nullptr;
  double* ddelta_bias = nullptr;
  double* dh0 = nullptr;
};

// out: (B, D, L). final_state: (B, D, N) or nullptr.
void SelectiveScanForward(const ScanShape& s, const ScanInputs& in, double* out,
                          double* final_state);

// dout: (B, D, L). dfinal_state: (B, D, N) or nullptr (treated as zero).
void SelectiveScanBackward(const ScanShape& s, const ScanInputs& in, const double* dout,
                           const double* dfinal_state, const ScanGrads& grads);

}  // namespace ssmkit::ref

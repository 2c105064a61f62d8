// The fp64 oracle of the SSD scan (include/ssmkit/ssd.hpp): the plain per-step recurrence,
// forward and analytic backward, written as plainly as possible. Contiguous arrays only.
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size.
#pragma once

#include <cstdint>
#include <limits>

namespace ssmkit::ref {

struct SsdShape {
  int64_t batch = 1, seqlen = 1, nheads = 1, headdim = 1, ngroups = 1, dstate = 1;
  bool d_per_channel = false;  // D is (H, P) rather than (H)
  bool dt_softplus = false;
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();
};

struct SsdInputs {                   // nullptr marks an absent optional input
  const double* x = nullptr;         // (B, L, H, P)
  const double* dt = nullptr;        // (B, L, H)
  const double* A = nullptr;         // (H)
  const double* B = nullptr;         // (B, L, G, N)
  const double* C = nullptr;         // (B, L, G, N)
  const double* D = nullptr;         // (H) or (H, P)
  const double* z = nullptr;         // (B, L, H, P)
  const double* dt_bias = nullptr;   // (H)
  const double* h0 = nullptr;        // (B, H, P, N)
  const int32_t* seq_idx = nullptr;  // (B, L)
};

struct SsdGrads {  // each the shape of its input; nullptr where not wanted
  double* dx = nullptr;
  double* ddt = nullptr;
  double* dA = nullptr;
  double* dB = nullptr;
  double* dC = nullptr;
  double* dD = nullptr;
  double* dz = nullptr;
  double* ddt_bias = nullptr;
  double* dh0 = nullptr;
};

// out: (B, L, H, P). final_states: (B, H, P, N) or nullptr.
void SsdForward(const SsdShape& s, const SsdInputs& in, double* out, double* final_states);

// dout: (B, L, H, P). dfinal_states: (B, H, P, N) or nullptr (treated as zero).
void SsdBackward(const SsdShape& s, const SsdInputs& in, const double* dout,
                 const double* dfinal_states, const SsdGrads& grads);

}  // namespace ssmkit::ref

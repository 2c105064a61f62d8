// The fp64 oracle of the SSD scan (include/ssmkit/ssd.hpp): the plain per-step recurrence,
// forward and analytic backward, written as plainly as possible. Contiguous arrays only.
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size, S packed
// sequences.
#pragma once

#include <cstdint>
#include <limits>

namespace ssmkit::ref {

struct SsdShape {
  int64_t batch = 1, seqlen = 1, nheads = 1, headdim = 1, ngroups = 1, dstate = 1;
  bool d_per_channel = false;  // D is (H, P) rather than (H)
  bool dt_softplus = false;
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();
  // Packed sequences: with cu_seqlens (batch 1), S = nseqs; h0 is then (S, H, P, N), one
  // state per sequence, when h0_per_sequence (else (B, H, P, N): the first sequence's).
  int64_t nseqs = 0;
  bool h0_per_sequence = false;
};

struct SsdInputs {                      // nullptr marks an absent optional input
  const double* x = nullptr;            // (B, L, H, P)
  const double* dt = nullptr;           // (B, L, H)
  const double* A = nullptr;            // (H)
  const double* B = nullptr;            // (B, L, G, N)
  const double* C = nullptr;            // (B, L, G, N)
  const double* D = nullptr;            // (H) or (H, P)
  const double* z = nullptr;            // (B, L, H, P)
  const double* dt_bias = nullptr;      // (H)
  const double* h0 = nullptr;           // (B, H, P, N), or (S, H, P, N) when h0_per_sequence
  const int32_t* seq_idx = nullptr;     // (B, L): a new sequence starts where it changes
  const int64_t* cu_seqlens = nullptr;  // (S + 1): sequence k is [cu[k], cu[k+1]) (batch 1)
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

// out: (B, L, H, P). final_states: (B, H, P, N) or nullptr. varlen_states: (S, H, P, N) or
// nullptr, each packed sequence's last state (with cu_seqlens).
void SsdForward(const SsdShape& s, const SsdInputs& in, double* out, double* final_states,
                double* varlen_states = nullptr);

// dout: (B, L, H, P). dfinal_states: (B, H, P, N) or nullptr (treated as zero).
// dvarlen_states: (S, H, P, N) or nullptr, the gradient reaching varlen_states.
void SsdBackward(const SsdShape& s, const SsdInputs& in, const double* dout,
                 const double* dfinal_states, const SsdGrads& grads,
                 const double* dvarlen_states = nullptr);

}  // namespace ssmkit::ref

// The fp64 oracle of the selective scan: the definition in include/ssmkit/selective_scan.hpp
// written as plainly as possible, forward and analytic backward. Contiguous arrays only.
// Dimension legend: B batch, D channels, L length, N state size, G groups of B/C, S packed
// sequences.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct ScanShape {
  int64_t batch = 1, dim = 1, seqlen = 1, dstate = 1;
  bool b_variable = true, c_variable = true;  // false: constant (D, N)
  int64_t b_groups = 1, c_groups = 1;         // G of the variable form (B, G, N, L)
  bool delta_softplus = false;
  // Packed sequences: with cu_seqlens (batch 1), S = nseqs; h0 is then (S, D, N), one state
  // per sequence, when h0_per_sequence (else (B, D, N): the first sequence's).
  int64_t nseqs = 0;
  bool h0_per_sequence = false;
};

struct ScanInputs {                     // nullptr marks an absent optional input
  const double* u = nullptr;            // (B, D, L)
  const double* delta = nullptr;        // (B, D, L)
  const double* A = nullptr;            // (D, N)
  const double* B = nullptr;            // (D, N) or (B, G, N, L)
  const double* C = nullptr;            // (D, N) or (B, G, N, L)
  const double* D = nullptr;            // (D)
  const double* z = nullptr;            // (B, D, L)
  const double* delta_bias = nullptr;   // (D)
  const double* h0 = nullptr;           // (B, D, N), or (S, D, N) when h0_per_sequence
  const int32_t* seq_idx = nullptr;     // (B, L): a new sequence starts where it changes
  const int64_t* cu_seqlens = nullptr;  // (S + 1): sequence k is [cu[k], cu[k+1]) (batch 1)
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

// out: (B, D, L). final_state: (B, D, N) or nullptr. varlen_states: (S, D, N) or nullptr,
// each packed sequence's last state (with cu_seqlens).
void SelectiveScanForward(const ScanShape& s, const ScanInputs& in, double* out,
                          double* final_state, double* varlen_states = nullptr);

// dout: (B, D, L). dfinal_state: (B, D, N) or nullptr (treated as zero). dvarlen_states:
// (S, D, N) or nullptr, the gradient reaching varlen_states.
void SelectiveScanBackward(const ScanShape& s, const ScanInputs& in, const double* dout,
                           const double* dfinal_state, const ScanGrads& grads,
                           const double* dvarlen_states = nullptr);

}  // namespace ssmkit::ref

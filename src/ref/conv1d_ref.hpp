// The fp64 oracle of the causal conv1d (include/ssmkit/conv1d.hpp): forward, analytic
// backward and the decode update, written as plainly as possible. Contiguous arrays only.
// Dimension legend: B batch, D channels, L length, K conv width, T update steps, S state length.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct Conv1dShape {
  int64_t batch = 1, dim = 1, seqlen = 1, width = 4;
  bool silu = false;
};

struct Conv1dInputs {                      // nullptr marks an absent optional input
  const double* x = nullptr;               // (B, D, L)
  const double* weight = nullptr;          // (D, K)
  const double* bias = nullptr;            // (D)
  const double* initial_states = nullptr;  // (B, D, K-1)
  const int32_t* seq_idx = nullptr;        // (B, L): packed sequences
};

struct Conv1dGrads {                  // nullptr: not wanted
  double* dx = nullptr;               // (B, D, L)
  double* dweight = nullptr;          // (D, K)
  double* dbias = nullptr;            // (D)
  double* dinitial_states = nullptr;  // (B, D, K-1)
};

// out: (B, D, L). final_states: (B, D, K-1) or nullptr.
void CausalConv1dForward(const Conv1dShape& s, const Conv1dInputs& in, double* out,
                         double* final_states);

// dout: (B, D, L). dfinal_states: (B, D, K-1) or nullptr (zeros).
void CausalConv1dBackward(const Conv1dShape& s, const Conv1dInputs& in, const double* dout,
                          const double* dfinal_states, const Conv1dGrads& grads);

// s.seqlen is T. x: (B, D, T); conv_state: (B, D, S) updated in place, S >= K-1; out: (B, D, T).
void CausalConv1dUpdate(const Conv1dShape& s, int64_t state_len, const double* x,
                        const double* weight, const double* bias, double* conv_state, double* out);

}  // namespace ssmkit::ref

// The fp64 oracle of selective_state_update (include/ssmkit/state_update.hpp), one function
// per form, written as plainly as possible. Contiguous arrays only.
// Dimension legend: B batch, Bs the state's batch, D channels, H heads, P head dim, N state
// size, G groups of B/C.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct StateUpdateShape {
  int64_t batch = 1;        // B
  int64_t state_batch = 1;  // Bs
  int64_t dim = 1;          // D (Mamba-1) or H (Mamba-2)
  int64_t headdim = 1;      // P (Mamba-2 only)
  int64_t dstate = 1;       // N
  int64_t b_groups = 1, c_groups = 1;
  bool d_per_p = false;  // Mamba-2: D is (H, P) rather than (H)
  bool dt_softplus = false;
};

struct StateUpdateInputs {                       // nullptr marks an absent optional input
  const double* x = nullptr;                     // (B, D) | (B, H, P)
  const double* dt = nullptr;                    // (B, D) | (B, H)
  const double* A = nullptr;                     // (D, N) | (H)
  const double* B = nullptr;                     // (B, G, N)
  const double* C = nullptr;                     // (B, G, N)
  const double* D = nullptr;                     // (D) | (H) or (H, P)
  const double* z = nullptr;                     // like x
  const double* dt_bias = nullptr;               // (D) | (H)
  const int32_t* state_batch_indices = nullptr;  // (B); negative = skip the row
};

// Mamba-1: state (Bs, D, N) in place, out (B, D).
void SelectiveStateUpdate1(const StateUpdateShape& s, const StateUpdateInputs& in, double* state,
                           double* out);

// Mamba-2: state (Bs, H, P, N) in place, out (B, H, P).
void SelectiveStateUpdate2(const StateUpdateShape& s, const StateUpdateInputs& in, double* state,
                           double* out);

}  // namespace ssmkit::ref

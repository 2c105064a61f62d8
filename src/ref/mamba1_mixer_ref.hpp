// The fp64 oracle of Mamba1MixerForward (include/ssmkit/mamba1_mixer.hpp): the mixer's steps
// through the ops' own oracles, one after another. Contiguous arrays only.
// Dimension legend: B batch, L length, d model width, D channels, N state size, R dt_rank,
// E = R + 2N, K conv width, T = B L rows.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct Mamba1MixerShape {
  int64_t batch = 1, seqlen = 1, d_model = 1, d_inner = 1, d_state = 1, dt_rank = 1, d_conv = 4;
};

struct Mamba1MixerWeights {             // nullptr marks an absent optional input
  const double* in_proj = nullptr;      // (2D, d)
  const double* conv_weight = nullptr;  // (D, K)
  const double* conv_bias = nullptr;    // (D)
  const double* x_proj = nullptr;       // (E, D)
  const double* dt_proj = nullptr;      // (D, R)
  const double* dt_bias = nullptr;      // (D)
  const double* A = nullptr;            // (D, N)
  const double* D = nullptr;            // (D)
  const double* out_proj = nullptr;     // (d, D)
};

// out: (B, L, d) for x (B, L, d).
void Mamba1MixerForward(const Mamba1MixerShape& s, const Mamba1MixerWeights& w, const double* x,
                        double* out);

}  // namespace ssmkit::ref

// The fp64 oracle of rotary position embeddings (include/ssmkit/rope.hpp). The frequencies and
// angles are f32 by definition (as transformers computes them); cos, sin and the rotation are
// fp64. Contiguous arrays only.
// Dimension legend: B batch, L length, Hx heads of the tensor rotated, E head dim, R rotated
// dims.
#pragma once

#include <cstdint>
#include <vector>

namespace ssmkit::ref {

struct RopeShape {
  int64_t batch = 1, len = 1, heads = 1, head_dim = 2;  // B, L, Hx, E
  int64_t rotary_dim = 2;                               // R (resolved: never 0)
  bool interleaved = false;                             // pairs (2f, 2f+1), else (f, f + R/2)
  double theta = 10000.0;
  double attention_scaling = 1.0;
};

// inv_freq (R/2): transformers' default rope frequencies, in f32.
std::vector<float> RopeInvFreq(double theta, int64_t rotary_dim);

// x (B, L, Hx, E) -> out (B, L, Hx, E), rotated by +angle (forward) or -angle (backward, the
// gradient: pass the gradient of out as x). positions (B, L); inv_freq (R/2) or nullptr for
// RopeInvFreq's.
void Rope(const RopeShape& s, const double* x, const int32_t* positions, const float* inv_freq,
          bool backward, double* out);

}  // namespace ssmkit::ref

// The fp64 oracle of the RMS norms: the definitions in include/ssmkit/norm.hpp written as
// plainly as possible, forward and analytic backward. Contiguous (M, E) arrays only.
// Dimension legend: M rows, E features, G groups of S = group_size features.
#pragma once

#include <cstdint>

namespace ssmkit::ref {

struct NormShape {
  int64_t rows = 1, features = 1;
  int64_t group_size = 0;  // S; 0 means E
  double eps = 1e-6;
  bool norm_before_gate = true;
};

struct RmsNormInputs {             // nullptr marks an absent optional input
  const double* x = nullptr;       // (M, E)
  const double* weight = nullptr;  // (E)
  const double* bias = nullptr;    // (E)
  const double* z = nullptr;       // (M, E)
};

struct RmsNormGrads {         // nullptr: not wanted
  double* dx = nullptr;       // (M, E)
  double* dweight = nullptr;  // (E)
  double* dbias = nullptr;    // (E)
  double* dz = nullptr;       // (M, E)
};

// out: (M, E).
void RmsNormForward(const NormShape& s, const RmsNormInputs& in, double* out);
// dout: (M, E).
void RmsNormBackward(const NormShape& s, const RmsNormInputs& in, const double* dout,
                     const RmsNormGrads& grads);

struct AddRmsNormInputs {
  const double* x = nullptr;         // (M, E)
  const double* residual = nullptr;  // (M, E) or nullptr (zeros)
  const double* weight = nullptr;    // (E)
  const double* bias = nullptr;      // (E)
};

struct AddRmsNormGrads {
  double* dx = nullptr;         // (M, E)
  double* dresidual = nullptr;  // (M, E)
  double* dweight = nullptr;    // (E)
  double* dbias = nullptr;      // (E)
};

// The group settings of `s` are ignored (one group per row). out, residual_out: (M, E).
void AddRmsNormForward(const NormShape& s, const AddRmsNormInputs& in, double* out,
                       double* residual_out);
// dout: (M, E). dresidual_out: (M, E) or nullptr (zeros).
void AddRmsNormBackward(const NormShape& s, const AddRmsNormInputs& in, const double* dout,
                        const double* dresidual_out, const AddRmsNormGrads& grads);

}  // namespace ssmkit::ref

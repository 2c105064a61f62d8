// The fp64 oracle of the MLP and MoE ops (include/ssmkit/mlp.hpp): the definitions written as
// plainly as possible, one token at a time, forward and analytic backward. Contiguous arrays.
// Dimension legend: T rows, d model width, F hidden width, E experts, k experts per token.
#pragma once

#include <cstdint>
#include <vector>

#include "ssmkit/mlp.hpp"

namespace ssmkit::ref {

double Activation(MlpActivation act, double v);
double ActivationGrad(MlpActivation act, double v);  // d act / dv

struct MlpShape {
  int64_t d = 1, F = 1;
  bool gated = true;
  MlpActivation activation = MlpActivation::kSilu;
  double gate_multiplier = 1.0, down_multiplier = 1.0;
};

struct MlpWeights {                   // nullptr marks an absent optional input
  const double* gate = nullptr;       // (F, d); nullptr when !gated
  const double* up = nullptr;         // (F, d)
  const double* down = nullptr;       // (d, F)
  const double* gate_bias = nullptr;  // (F)
  const double* up_bias = nullptr;    // (F)
  const double* down_bias = nullptr;  // (d)
};

struct MlpWeightGrads {  // nullptr: not wanted
  double* dgate = nullptr;
  double* dup = nullptr;
  double* ddown = nullptr;
  double* dgate_bias = nullptr;
  double* dup_bias = nullptr;
  double* ddown_bias = nullptr;
};

// out (T, d) from x (T, d); gate_add, up_add (T, F) or nullptr.
void MlpForward(const MlpShape& s, int64_t T, const double* x, const MlpWeights& w,
                const double* gate_add, const double* up_add, double* out);

// dout (T, d). Gradients overwritten: dx (T, d), dgate_add / dup_add (T, F), weights'.
void MlpBackward(const MlpShape& s, int64_t T, const double* x, const MlpWeights& w,
                 const double* gate_add, const double* up_add, const double* dout, double* dx,
                 double* dgate_add, double* dup_add, const MlpWeightGrads& g);

struct MoeShape {
  int64_t d = 1, E = 1, k = 1;
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  bool normalize_top_k = false;
  int64_t groups = 1, top_k_groups = 1;  // kSigmoidGroupTopK
  double routed_scaling = 1.0;           // kSigmoidGroupTopK
  MlpShape expert;                       // F: the routed experts' width; d: d_x with expert_x
  int64_t shared_F = 0;                  // 0: no shared expert
};

struct MoeInputs {
  const double* x = nullptr;              // (T, d)
  const double* expert_x = nullptr;       // (T, d_x) or nullptr (x); forward only
  const double* router_weight = nullptr;  // (E, d)
  const double* router_bias = nullptr;    // (E) or nullptr
  const double* score_bias = nullptr;     // (E): kSigmoidGroupTopK's correction bias
  std::vector<MlpWeights> experts;        // E
  MlpWeights shared;                      // used when shared_F > 0
};

// One token's routing from its E logits: the k selected experts, best first (ties to the
// lower index, NaN first), and their weights. score_bias (E): kSigmoidGroupTopK's.
void MoeRoute(const MoeShape& s, const double* logits, int64_t* index, double* weight,
              const double* score_bias = nullptr);

// out (T, d), or (T, d_x) with expert_x (no shared expert then); router_logits (T, E), counts (E),
// top_index (T, k), top_weight (T, k): each optional (nullptr).
void MoeForward(const MoeShape& s, int64_t T, const MoeInputs& in, double* out,
                double* router_logits, int64_t* counts, int64_t* top_index, double* top_weight);

struct MoeGrads {
  double* dx = nullptr;                 // (T, d)
  double* drouter_weight = nullptr;     // (E, d)
  double* drouter_bias = nullptr;       // (E)
  std::vector<MlpWeightGrads> experts;  // empty or E
  MlpWeightGrads shared;
};

// dout (T, d); drouter_logits (T, E) or nullptr.
void MoeBackward(const MoeShape& s, int64_t T, const MoeInputs& in, const double* dout,
                 const double* drouter_logits, const MoeGrads& g);

}  // namespace ssmkit::ref

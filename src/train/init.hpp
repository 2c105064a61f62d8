// mamba_ssm's initialisation of a fresh language model (mamba_simple.py, mamba2.py and
// MambaLMHeadModel._init_weights in mixer_seq_simple.py), drawn from our own seeded generator:
//
//   embedding                 normal, std 0.02
//   in_proj, x_proj           PyTorch's nn.Linear default: uniform +-1/sqrt(fan_in)
//   (hybrids: q/k/v_proj and the MLP's input_linear alike)
//   out_proj                  the same, then divided by sqrt(the number of residual adds)
//   (hybrids: o_proj and      (rescale_prenorm_residual: one per block, so n_layer for a pure
//   output_linear alike)      Mamba model and 2 n_layer for a hybrid, an MLP after each mixer)
//   conv1d weight and bias    nn.Conv1d's default: uniform +-1/sqrt(K) (fan_in = K, depthwise)
//   dt_proj.weight (Mamba-1)  uniform +-dt_rank^-0.5 (dt_init "random", dt_scale 1)
//   dt bias                   softplus^-1(dt), dt = exp(uniform(log 1e-3, log 1e-1)) floored at
//                             1e-4: inv = dt + log(-expm1(-dt))
//   A_log                     Mamba-1: log(n + 1) for n = 0..N-1 on every channel (S4D-real);
//                             Mamba-2: log(uniform(1, 16)) per head (A_init_range)
//   D                         1
//   norm weights              1 (RMSNorm, the gated norm and norm_f)
//   lm_head (untied only)     normal, std 0.02
#pragma once

#include <cstdint>

#include "ssmkit/model.hpp"
#include "train/param_table.hpp"

namespace ssmkit::train {

// Writes every parameter of `table` into params (table.total() floats). The same seed gives
// the same bits on every machine.
void InitParams(const ModelConfig& config, const ParamTable& table, uint64_t seed, float* params);

}  // namespace ssmkit::train

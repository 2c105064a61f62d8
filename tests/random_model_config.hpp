// A ModelConfig for tests on random weights: d_inner = 2 d_model, conv width 4; Mamba-1 with
// dt_rank d_model / 16, Mamba-2 with heads of P = d_inner / heads.
#pragma once

#include <cstdint>

#include "ssmkit/model.hpp"

namespace ssmkit::testing {

struct RandomModelShape {
  int64_t d_model, n_layer, vocab, d_state;
  int64_t heads = 1, groups = 1, chunk = 8;  // Mamba-2
};

inline ModelConfig RandomModelConfig(ModelArch arch, const RandomModelShape& s) {
  ModelConfig c;
  c.arch = arch;
  c.format = "test";
  c.d_model = s.d_model;
  c.n_layer = s.n_layer;
  c.vocab_size = c.config_vocab_size = s.vocab;
  c.d_inner = 2 * s.d_model;
  c.d_conv = 4;
  c.d_state = s.d_state;
  c.dt_rank = s.d_model / 16;
  if (arch == ModelArch::kMamba2) {
    c.nheads = s.heads;
    c.headdim = c.d_inner / s.heads;
    c.ngroups = s.groups;
    c.chunk_size = s.chunk;
  }
  return c;
}

}  // namespace ssmkit::testing

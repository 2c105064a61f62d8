// A model's block list as one letter per block, for compact expectations in tests:
// m Mamba-1, M Mamba-2, A attention, F MLP, E MoE, P Falcon-H1's parallel block, S Zamba2's
// shared transformer block.
#pragma once

#include <string>
#include <vector>

#include "ssmkit/model.hpp"

namespace ssmkit::testing {

inline std::string BlockLetters(const std::vector<BlockSpec>& blocks) {
  std::string s;
  for (const BlockSpec& b : blocks) s += "mMAFEPS"[static_cast<int>(b.kind) - 1];
  return s;
}

}  // namespace ssmkit::testing

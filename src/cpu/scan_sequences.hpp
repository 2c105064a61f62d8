// Packed sequences in the CPU selective scan: the state rows a sequence starts from and ends
// in (cpu/packed_sequences.hpp finds where the sequences are).
// Dimension legend: B batch, D channels, L length, N state size, S packed sequences.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/packed_sequences.hpp"
#include "params/selective_scan_params.hpp"

namespace ssmkit::cpu {

inline PackedSequences SequencesOf(const SelectiveScanParams& p) {
  return PackedSequences(p.seq_idx, p.cu_seqlens, p.batch, p.seqlen);
}

// A (B, D, N)- or (S, D, N)-shaped state view and the row (b or sequence) to use.
struct StateRow {
  const F32View& view;  // view.data == nullptr: zeros
  int64_t index;
};

// The state sequence k of row b starts from: initial_state's row b for the first, then
// seq_initial_states' entry k (cu_seqlens with per-sequence initial states) or zeros.
inline StateRow InitialStateOf(const SelectiveScanParams& p, int64_t b, int64_t k) {
  return k == 0 ? StateRow{p.initial_state, b} : StateRow{p.seq_initial_states, k};
}
// Where the gradient of that state goes (the backward's dinitial_state, dseq_initial_states).
inline StateRow InitialStateGradOf(const SelectiveScanBwdParams& p, int64_t b, int64_t k) {
  return k == 0 ? StateRow{p.dinitial_state, b} : StateRow{p.dseq_initial_states, k};
}

// The first N floats of h from state row r (zeros where absent), the rest up to Np zero.
inline void LoadStateRow(StateRow r, int64_t d, int64_t N, int64_t Np, float* h) {
  std::fill(h, h + Np, 0.0f);
  if (!r.view.data) return;
  const float* row = r.view.data + r.index * r.view.stride_batch + d * r.view.stride_dim;
  for (int64_t n = 0; n < N; ++n) h[n] = row[n * r.view.stride_state];
}

}  // namespace ssmkit::cpu

// Packed sequences for the fp64 oracles (selective scan, SSD): where the sequences of one
// batch row start, from seq_idx or cu_seqlens, written as plainly as possible.
// Dimension legend: L length, S packed sequences.
#pragma once

#include <cstdint>
#include <vector>

namespace ssmkit::ref {

// seq[l]: the sequence position l belongs to (counted within the row, which with cu_seqlens
// is the sequence number); starts[l]: whether one starts at l.
struct RowSequences {
  std::vector<int64_t> seq;
  std::vector<bool> starts;
  bool EndsAt(int64_t l) const {
    return l + 1 == static_cast<int64_t>(seq.size()) || starts[l + 1];
  }
};

// seq_idx_row: (L) or nullptr; cu_seqlens: (S + 1) or nullptr.
inline RowSequences PackedRow(const int32_t* seq_idx_row, const int64_t* cu_seqlens, int64_t nseqs,
                              int64_t L) {
  RowSequences r;
  r.seq.resize(L);
  r.starts.assign(L, false);
  r.starts[0] = true;
  for (int64_t l = 1; l < L; ++l) {
    if (seq_idx_row && seq_idx_row[l] != seq_idx_row[l - 1]) r.starts[l] = true;
  }
  for (int64_t k = 1; cu_seqlens && k < nseqs; ++k) r.starts[cu_seqlens[k]] = true;
  int64_t k = -1;
  for (int64_t l = 0; l < L; ++l) r.seq[l] = k += r.starts[l] ? 1 : 0;
  return r;
}

}  // namespace ssmkit::ref

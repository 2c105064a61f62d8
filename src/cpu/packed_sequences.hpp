// Packed sequences on the CPU: where each batch row's sequences start, read once per call
// from seq_idx or cu_seqlens (params/varlen_params.hpp, values checked by ops/varlen.cpp).
// Dimension legend: B batch, L length, S packed sequences.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "params/varlen_params.hpp"

namespace ssmkit::cpu {

class PackedSequences {
 public:
  // Reads nothing and allocates nothing for an unpacked call (one sequence per row).
  PackedSequences(const SeqIdxView& seq_idx, const CuSeqlensView& cu_seqlens, int64_t batch,
                  int64_t seqlen)
      : seqlen_(seqlen) {
    if (cu_seqlens.data) {  // batch 1
      row_begin_ = {0, cu_seqlens.nseqs};
      for (int64_t k = 0; k < cu_seqlens.nseqs; ++k) starts_.push_back(CuSeqlensAt(cu_seqlens, k));
    } else if (seq_idx.data) {
      row_begin_.push_back(0);
      for (int64_t b = 0; b < batch; ++b) {
        starts_.push_back(0);
        for (int64_t l = 1; l < seqlen; ++l) {
          if (SeqIdxAt(seq_idx, b, l) != SeqIdxAt(seq_idx, b, l - 1)) starts_.push_back(l);
        }
        row_begin_.push_back(static_cast<int64_t>(starts_.size()));
      }
    }
  }

  bool packed() const { return !row_begin_.empty(); }
  // The number of sequences in row b.
  int64_t Count(int64_t b) const { return packed() ? row_begin_[b + 1] - row_begin_[b] : 1; }
  // Where sequence k of row b starts (0 for k = 0) and ends (exclusive; L for the last).
  int64_t Start(int64_t b, int64_t k) const { return k == 0 ? 0 : starts_[row_begin_[b] + k]; }
  int64_t End(int64_t b, int64_t k) const {
    return k + 1 < Count(b) ? starts_[row_begin_[b] + k + 1] : seqlen_;
  }
  // The sequence position l of row b belongs to.
  int64_t SequenceAt(int64_t b, int64_t l) const {
    if (!packed()) return 0;
    const auto first = starts_.begin() + row_begin_[b], last = starts_.begin() + row_begin_[b + 1];
    return std::upper_bound(first, last, l) - first - 1;
  }
  bool StartsAt(int64_t b, int64_t l) const {
    return l > 0 && packed() && Start(b, SequenceAt(b, l)) == l;
  }

 private:
  int64_t seqlen_;
  std::vector<int64_t> starts_;     // every row's sequence starts, row after row
  std::vector<int64_t> row_begin_;  // (B + 1) offsets into starts_; empty: not packed
};

}  // namespace ssmkit::cpu

// The byte-level corpus: a file read whole, every byte one token (vocab 256), split into a
// training part (the first 1 - val_fraction of the bytes) and a validation part (the rest).
//
// Training batches are random windows of L + 1 bytes drawn from the training part by a
// counter-based hash: row r of micro-batch k of optimizer step s starts at
//   Mix(seed, s * accum + k, r) mod (train_bytes - L)
// so the data position of a run is its step count: a resumed run draws the same batches as an
// uninterrupted one without storing any generator state. Validation reads consecutive
// non-overlapping windows from the start of the validation part, always the same ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"

namespace ssmkit::train {

class ByteCorpus {
 public:
  // Fails when the file cannot be read or either part is shorter than min_part_bytes.
  static Status Load(const std::string& path, double val_fraction, int64_t min_part_bytes,
                     ByteCorpus* corpus);

  int64_t train_bytes() const { return split_; }
  int64_t val_bytes() const { return static_cast<int64_t>(bytes_.size()) - split_; }
  uint64_t fingerprint() const { return fingerprint_; }  // a hash of the contents

  // tokens: (batch, seqlen + 1) ids, the training windows of (step, micro).
  void TrainBatch(uint64_t seed, int64_t step, int64_t accum, int64_t micro, int64_t batch,
                  int64_t seqlen, std::vector<int32_t>* tokens) const;
  // Validation windows [first, first + batch) of seqlen + 1 bytes (consecutive windows share
  // their boundary byte). Returns how many fit (<= batch); tokens holds that many rows.
  int64_t ValBatch(int64_t first, int64_t batch, int64_t seqlen,
                   std::vector<int32_t>* tokens) const;
  int64_t val_windows(int64_t seqlen) const { return (val_bytes() - 1) / seqlen; }

 private:
  std::vector<uint8_t> bytes_;
  int64_t split_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace ssmkit::train

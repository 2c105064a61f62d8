// Chunk bookkeeping shared by the chunked SSD forward and backward: where sequences restart
// inside a chunk and the per-head cumulative log-decay.
//
// Dimension legend: B batch, L length, H heads, P head dim, N state size, Q chunk length.
//
// Within a chunk of positions [c0, c0 + len), with cs_t = sum_{r <= t} dt_r A (t from the
// chunk start) and h_in the state before c0:
//   y_t    = sum_{s <= t, same seq} (C_t . B_s) exp(cs_t - cs_s) dt_s x_s      (intra-chunk)
//          + [t < first_reset] exp(cs_t) C_t . h_in                           (from the state)
//   h_out  = [first_reset == len] exp(cs_end) h_in
//          + sum_{s >= last_start} exp(cs_end - cs_s) dt_s x_s B_s^T           (chunk state)
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/ssd_common.hpp"

namespace ssmkit::cpu::ssd {

struct ChunkInfo {
  int64_t c0 = 0, len = 0;
  int64_t first_reset = 0;         // first index starting a new sequence; len if none
  int64_t last_start = 0;          // index where the chunk's last sequence starts
  std::vector<int64_t> seq_start;  // per index t: where t's sequence starts (>= 0)
};

inline void MakeChunkInfo(const SsdParams& p, int64_t b, int64_t c0, int64_t len, ChunkInfo* ci) {
  ci->c0 = c0;
  ci->len = len;
  ci->first_reset = len;
  ci->seq_start.resize(len);
  int64_t start = 0;
  for (int64_t t = 0; t < len; ++t) {
    if (ResetAt(p, b, c0 + t)) {
      start = t;
      if (ci->first_reset == len) ci->first_reset = t;
    }
    ci->seq_start[t] = start;
  }
  ci->last_start = ci->seq_start[len - 1];
}

// One head's decays over a chunk. cs is split as cs_hi + cs_lo (two floats carrying the f64
// cumulative sum), so that cs_t - cs_s keeps its precision when both are large: the
// difference of the hi parts of nearby positions is exact (Sterbenz), and far-apart ones
// only matter through exp() of a large negative number.
struct ChunkDecay {
  int64_t len = 0;
  std::vector<float> cs_hi, cs_lo;  // (len), zero-padded to a multiple of 64
  std::vector<float> e_in;          // exp(cs_t): decay from the chunk start through t
  std::vector<float> e_out;         // exp(cs_end - cs_s): decay from s to the chunk end
  float e_end = 1.0f;               // exp(cs_end)
};

}  // namespace ssmkit::cpu::ssd

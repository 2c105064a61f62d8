// Argument checks for packed sequences (seq_idx, cu_seqlens), shared by the ops that take
// them. Every rule has a test in the ops' *_errors_test.cpp.
// Dimension legend: B batch, L length, S packed sequences.
#pragma once

#include <cstdint>

#include "ops/check.hpp"
#include "params/varlen_params.hpp"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::check {

// seq_idx: optional (B, L) i32, non-decreasing along L. cu_seqlens: optional (S + 1) i32 |
// i64 with B = 1 and 0 = cu[0] < cu[1] < ... < cu[S] = L. With both, seq_idx must change
// exactly where cu_seqlens starts a sequence. The values are checked on CPU tensors only:
// reading a CUDA tensor's would synchronise the device (docs/ops.md).
Status PackedSequences(const char* op, const ssmkit::Tensor& seq_idx,
                       const ssmkit::Tensor& cu_seqlens, int64_t batch, int64_t seqlen,
                       Device device, SeqIdxView* seq_view, CuSeqlensView* cu_view);

// A per-sequence state output or gradient (varlen_states, dvarlen_states): absent, or of
// `shape` ((S, ...)) f32, and only with cu_seqlens.
Status VarlenStates(const char* op, const char* name, const ssmkit::Tensor& t,
                    const CuSeqlensView& cu, ShapeSpec shape);

// A per-sequence state tensor's leading size: S with cu_seqlens when `per_sequence` allows
// it and the tensor has that many rows, else B. Used for initial states given per sequence.
inline bool PerSequence(const ssmkit::Tensor& t, const CuSeqlensView& cu, int64_t batch) {
  return t.defined() && cu.data && t.rank > 0 && t.shape[0] == cu.nseqs && cu.nseqs != batch;
}

}  // namespace ssmkit::check

#include "ops/varlen.hpp"

#include <string>

#include "ops/check.hpp"

namespace ssmkit::check {
namespace {

std::string At(const char* name, int64_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

// The values of cu_seqlens (host): 0 first, strictly increasing, L last.
Status CuSeqlensValues(const char* op, const CuSeqlensView& cu, int64_t seqlen) {
  const int64_t S = cu.nseqs;
  if (CuSeqlensAt(cu, 0) != 0) {
    return Mismatch(op, "cu_seqlens", "cu_seqlens[0] = 0",
                    At("cu_seqlens", 0) + " = " + std::to_string(CuSeqlensAt(cu, 0)));
  }
  for (int64_t k = 1; k <= S; ++k) {
    const int64_t prev = CuSeqlensAt(cu, k - 1), next = CuSeqlensAt(cu, k);
    if (next <= prev) {
      return Mismatch(op, "cu_seqlens", "strictly increasing offsets (every sequence length >= 1)",
                      At("cu_seqlens", k - 1) + " = " + std::to_string(prev) + ", " +
                          At("cu_seqlens", k) + " = " + std::to_string(next));
    }
  }
  if (CuSeqlensAt(cu, S) != seqlen) {
    return Mismatch(op, "cu_seqlens", "cu_seqlens[S] = L = " + std::to_string(seqlen),
                    At("cu_seqlens", S) + " = " + std::to_string(CuSeqlensAt(cu, S)));
  }
  return Status::Ok();
}

// The values of seq_idx (host): non-decreasing along L; with cu_seqlens, changing exactly
// at its boundaries.
Status SeqIdxValues(const char* op, const SeqIdxView& v, const CuSeqlensView& cu, int64_t batch,
                    int64_t seqlen) {
  for (int64_t b = 0; b < batch; ++b) {
    int64_t next_start = cu.data && cu.nseqs > 1 ? CuSeqlensAt(cu, 1) : -1, k = 1;
    for (int64_t l = 1; l < seqlen; ++l) {
      const int32_t prev = SeqIdxAt(v, b, l - 1), cur = SeqIdxAt(v, b, l);
      auto where = [&] {  // built only on failure: this loop runs over every position
        const std::string row = "seq_idx[" + std::to_string(b) + ", ";
        return row + std::to_string(l - 1) + "] = " + std::to_string(prev) + ", " + row +
               std::to_string(l) + "] = " + std::to_string(cur);
      };
      if (cur < prev) return Mismatch(op, "seq_idx", "values non-decreasing along L", where());
      if (!cu.data) continue;
      const bool starts = l == next_start;
      if (starts) next_start = ++k <= cu.nseqs ? CuSeqlensAt(cu, k) : -1;
      if (starts != (cur != prev)) {
        return Mismatch(op, "seq_idx",
                        "a change exactly where cu_seqlens starts a sequence (position " +
                            std::to_string(l) + (starts ? " starts one)" : " starts none)"),
                        where());
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status PackedSequences(const char* op, const ssmkit::Tensor& seq_idx,
                       const ssmkit::Tensor& cu_seqlens, int64_t batch, int64_t seqlen,
                       Device device, SeqIdxView* seq_view, CuSeqlensView* cu_view) {
  *seq_view = {};
  *cu_view = {};
  SSMKIT_RETURN_IF_ERROR(
      Optional(op, "seq_idx", seq_idx, {"(B, L)", {batch, seqlen}}, {DType::kI32}));
  if (cu_seqlens.defined()) {
    SSMKIT_RETURN_IF_ERROR(RankIn(op, "cu_seqlens", cu_seqlens, {1}));
    if (cu_seqlens.shape[0] < 2) {
      return Mismatch(op, "cu_seqlens", "S + 1 >= 2 offsets (S >= 1 sequences)",
                      cu_seqlens.shape_string());
    }
    SSMKIT_RETURN_IF_ERROR(Tensor(op, "cu_seqlens", cu_seqlens, {"(S + 1)", {cu_seqlens.shape[0]}},
                                  {DType::kI32, DType::kI64}));
    if (batch != 1) {
      return Mismatch(op, "cu_seqlens", "batch B = 1 (the sequences are packed along L)",
                      "B = " + std::to_string(batch));
    }
    *cu_view = {cu_seqlens.data, cu_seqlens.dtype, cu_seqlens.strides[0], cu_seqlens.shape[0] - 1};
    if (device == Device::kCpu) SSMKIT_RETURN_IF_ERROR(CuSeqlensValues(op, *cu_view, seqlen));
  }
  if (seq_idx.defined()) {
    *seq_view = {static_cast<const int32_t*>(seq_idx.data), seq_idx.strides[0], seq_idx.strides[1]};
    if (device == Device::kCpu) {
      SSMKIT_RETURN_IF_ERROR(SeqIdxValues(op, *seq_view, *cu_view, batch, seqlen));
    }
  }
  return Status::Ok();
}

Status VarlenStates(const char* op, const char* name, const ssmkit::Tensor& t,
                    const CuSeqlensView& cu, ShapeSpec shape) {
  if (t.defined() && !cu.data) {
    return Mismatch(op, name, "no tensor without cu_seqlens (one state per sequence)",
                    "a tensor " + t.shape_string());
  }
  return Optional(op, name, t, shape, {DType::kF32});
}

}  // namespace ssmkit::check

// Packed sequences (variable-length batches) as an op received them, checked by
// ops/varlen.cpp: seq_idx (B, L) i32 and cu_seqlens (S + 1) i32 | i64. Host or device
// pointers, like every params field; shared by the selective scan, SSD and causal conv1d.
// Dimension legend: B batch, L length, S packed sequences.
#pragma once

#include <cstdint>

#include "ssmkit/tensor.hpp"

namespace ssmkit {

struct SeqIdxView {
  const int32_t* data = nullptr;  // (B, L); nullptr: absent
  int64_t stride_batch = 0, stride_seq = 0;
};

struct CuSeqlensView {
  const void* data = nullptr;  // (S + 1); nullptr: absent
  DType dtype = DType::kI32;   // kI32 or kI64
  int64_t stride = 0;
  int64_t nseqs = 0;  // S
};

// Host-side reads (the CPU backend's; the CUDA kernels read the device arrays themselves).
inline int32_t SeqIdxAt(const SeqIdxView& v, int64_t b, int64_t l) {
  return v.data[b * v.stride_batch + l * v.stride_seq];
}
inline int64_t CuSeqlensAt(const CuSeqlensView& v, int64_t k) {
  return v.dtype == DType::kI64 ? static_cast<const int64_t*>(v.data)[k * v.stride]
                                : static_cast<const int32_t*>(v.data)[k * v.stride];
}

}  // namespace ssmkit

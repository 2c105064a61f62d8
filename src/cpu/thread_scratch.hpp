// Per-thread f32 scratch for the CPU kernels: one buffer per named slot and thread, grown on
// demand and never shrunk, kept for the thread's next call, so that a warm call allocates and
// page-faults nothing (the decode path's promise, tests/decode_alloc_test.cpp).
//
// Every user has a slot of its own, so buffers in use at the same time on one thread cannot
// clobber each other: an op's workspace taken on the calling thread before its parallel
// region, and a kernel inside that region (run by the calling thread too) or an op nested in
// another. A user gets its slot again on each call; what the buffer held before is undefined.
// A pointer stays valid until its thread grows that slot (asks it for more floats).
#pragma once

#include <cstdint>

namespace ssmkit::cpu {

enum class ScratchSlot : int {
  // Taken on the calling thread before its parallel region, read or carved by the blocks.
  kConv1d,
  kNorm,
  kNormAffine,  // the packed norm weight and bias, read by every block
  kStateUpdate,
  // The selective scan's per-call operands, on the calling thread (scan_packing.hpp).
  kScanPackedA,
  kScanPackedB,
  kScanPackedC,
  kScanPartialB,       // the backward's per-block dB partials
  kScanPartialC,       // the backward's per-block dC partials
  kScanPartialUnused,  // where an unwanted dB or dC goes
  // The channel-tiled selective scan's per-worker buffers (scan_block-inl.h).
  kScanSuperBlock,     // a tile's super-block of steps (forward, and the backward's recompute)
  kScanTileState,      // the forward's tile state, decay rates and D
  kScanChunkSteps,     // the backward's super-block of one chunk
  kScanChunkRows,      // the backward's per-chunk gradient rows
  kScanTileGradients,  // the backward's per-tile gradient state
  // Per-worker buffers of single kernels.
  kLinearPanel,        // a widened weight panel for sgemm (linear.cpp)
  kLinearGemvBlock,    // a widened block of weight rows (linear_gemv.cpp)
  kLinearGemvPairedX,  // x's even and odd elements by blocks (linear_gemv.cpp)
  kLinearBf16Panel,    // a packed bf16 weight panel (linear_bf16.cpp)
  kLinearBf16Decoded,  // a quantized weight panel decoded to bf16 (linear_bf16.cpp)
  kLinearBf16AmxRows,  // the few-rows AMX kernel's rounded x, sums and K tail
  kQuantLinearAcc,     // accumulators of the quantized few-rows product (quant_linear.cpp)
  kPagedKvRow,         // one row converted between dtypes (paged_kv_append.cpp)
  kRope,               // a token's multipliers and one head's row (rope.cpp)
  kSsdPrepRow,         // rows of the SSD's per-head preparation (ssd_prep.cpp)
  kCount
};

// `floats` floats of this thread's buffer for `slot`. May throw std::bad_alloc when it grows.
float* ThreadScratch(ScratchSlot slot, int64_t floats);

}  // namespace ssmkit::cpu

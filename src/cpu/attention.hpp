// CPU attention: the flash-attention forward (dense and paged, with a flash-decoding split of
// long key ranges), its two-pass deterministic backward, and the paged KV append. SIMD by
// Highway (run-time dispatch), work split over threads by ParallelFor.
#pragma once

#include "params/attention_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status AttentionForward(const AttentionParams& p);  // dense or paged (p.paged)
Status AttentionBackward(const AttentionBwdParams& p);
Status PagedKvAppend(const PagedAppendParams& p);

}  // namespace ssmkit::cpu

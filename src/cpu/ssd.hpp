// CPU SSD scan: the sequential (SIMD over the state) and chunked (GEMM) algorithms, forward
// and backward, both multithreaded with ParallelFor.
#pragma once

#include "params/ssd_params.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

// `algorithm` is kChunked or kSequential (kAuto is resolved by the caller).
Status SsdForward(const SsdParams& p, SsdAlgorithm algorithm);
Status SsdBackward(const SsdBwdParams& p, SsdAlgorithm algorithm);

}  // namespace ssmkit::cpu

// CPU SSD entry points: run the algorithm the op layer resolved, denormals flushed
// (core/float_mode.hpp).
#include "cpu/ssd.hpp"

#include "core/float_mode.hpp"
#include "cpu/ssd_common.hpp"

namespace ssmkit::cpu {

Status SsdForward(const SsdParams& p, SsdAlgorithm algorithm) {
  FlushDenormals flush;
  if (p.cu_seqlens.data) {
    ssd::VarlenForward(p, algorithm);
  } else if (algorithm == SsdAlgorithm::kChunked) {
    ssd::ChunkedForward(p);
  } else {
    ssd::SequentialForward(p);
  }
  return Status::Ok();
}

Status SsdBackward(const SsdBwdParams& p, SsdAlgorithm algorithm) {
  FlushDenormals flush;
  if (p.cu_seqlens.data) {
    ssd::VarlenBackward(p, algorithm);
  } else if (algorithm == SsdAlgorithm::kChunked) {
    ssd::ChunkedBackward(p);
  } else {
    ssd::SequentialBackward(p);
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu

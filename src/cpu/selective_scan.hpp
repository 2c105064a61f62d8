// CPU selective scan: SIMD (Highway, run-time dispatch) and multithreaded (ParallelFor).
#pragma once

#include "params/selective_scan_params.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status SelectiveScanForward(const SelectiveScanParams& p, const SelectiveScanOptions& options);
Status SelectiveScanBackward(const SelectiveScanBwdParams& p, const SelectiveScanOptions& options);

}  // namespace ssmkit::cpu

// The channel-tiled selective-scan backward (scan_backward_tiles.cpp): variable B and C whose
// groupings nest (TilesApply in scan_packing.hpp).
#pragma once

#include "params/selective_scan_params.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::cpu {

Status SelectiveScanBackwardTiles(const SelectiveScanBwdParams& p,
                                  const SelectiveScanOptions& options);

}  // namespace ssmkit::cpu

// The CUDA backend's entry points, one per op and direction, called by src/ops/ once the
// arguments are checked. Plain C++ (no CUDA types): src/ops/ is compiled by the host compiler.
// Built from src/cuda/*.cu, or src/cuda/stubs.cpp (each answering Unsupported) without CUDA.
#pragma once

#include <string>

#include "params/conv1d_params.hpp"
#include "params/linear_params.hpp"
#include "params/norm_params.hpp"
#include "params/selective_scan_params.hpp"
#include "params/ssd_params.hpp"
#include "params/state_update_params.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit {

inline Status NotBuilt(const char* op) {
  return Status::Unsupported(std::string(op) +
                             ": CUDA tensors need the CUDA backend, and this build has none "
                             "(configure with SSMKIT_CUDA=ON where nvcc is installed)");
}

namespace cuda {

Status SelectiveScanForward(const SelectiveScanParams& p);
Status SelectiveScanBackward(const SelectiveScanBwdParams& p);
Status SsdForward(const SsdParams& p);
Status SsdBackward(const SsdBwdParams& p);
Status SelectiveStateUpdate(const StateUpdateParams& p);
Status CausalConv1dForward(const CausalConv1dParams& p);
Status CausalConv1dBackward(const CausalConv1dBwdParams& p);
Status CausalConv1dUpdate(const CausalConv1dUpdateParams& p);
// Both RMS norms (gated, and add + norm) share one params struct, as on the CPU; `op` names
// the public op in messages ("rmsnorm" or "add_rmsnorm").
Status RmsNormForward(const char* op, const NormParams& p);
Status RmsNormBackward(const char* op, const NormBwdParams& p);
// out = x W^T (+ bias) by cuBLAS (f32 accumulation), on the calling thread's stream.
Status LinearForward(const LinearCudaParams& p);

}  // namespace cuda
}  // namespace ssmkit

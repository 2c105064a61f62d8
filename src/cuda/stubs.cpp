// The CUDA entry points of a build without the CUDA backend (SSMKIT_CUDA=OFF or no nvcc):
// each answers Unsupported, so a CUDA tensor gets a clear Status and nothing else.
#include "cuda/backend.hpp"
#include "ssmkit/cuda.hpp"

namespace ssmkit {

bool CudaBuilt() { return false; }
int CudaDeviceCount() { return 0; }
void SetCudaStream(void*) {}
void* GetCudaStream() { return nullptr; }
Status CudaSynchronize() { return NotBuilt("CudaSynchronize"); }

namespace cuda {

Status SelectiveScanForward(const SelectiveScanParams&) { return NotBuilt("selective_scan"); }
Status SelectiveScanBackward(const SelectiveScanBwdParams&) { return NotBuilt("selective_scan"); }
Status SsdForward(const SsdParams&) { return NotBuilt("ssd"); }
Status SsdBackward(const SsdBwdParams&) { return NotBuilt("ssd"); }
Status SelectiveStateUpdate(const StateUpdateParams&) { return NotBuilt("selective_state_update"); }
Status CausalConv1dForward(const CausalConv1dParams&) { return NotBuilt("causal_conv1d"); }
Status CausalConv1dBackward(const CausalConv1dBwdParams&) { return NotBuilt("causal_conv1d"); }
Status CausalConv1dUpdate(const CausalConv1dUpdateParams&) {
  return NotBuilt("causal_conv1d_update");
}
Status RmsNormForward(const char* op, const NormParams&) { return NotBuilt(op); }
Status RmsNormBackward(const char* op, const NormBwdParams&) { return NotBuilt(op); }

}  // namespace cuda
}  // namespace ssmkit

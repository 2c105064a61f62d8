// The CUDA entry points of a build without the CUDA backend (SSMKIT_CUDA=OFF or no nvcc):
// each answers Unsupported, so a CUDA tensor gets a clear Status and nothing else.
#include "cuda/backend.hpp"
#include "cuda/decode_kernels.hpp"
#include "cuda/device_runtime.hpp"
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
Status LinearForward(const LinearCudaParams&) { return NotBuilt("linear"); }

Status EmbedRows(const EmbedParams&) { return NotBuilt("embed_rows"); }
Status ArgmaxRows(const ArgmaxParams&) { return NotBuilt("argmax_rows"); }

// Nothing is ever allocated or created here, so there is nothing to free.
DeviceMemory::DeviceMemory(DeviceMemory&&) noexcept {}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&&) noexcept { return *this; }
DeviceMemory::~DeviceMemory() = default;
Status DeviceMemory::Allocate(const char* what, int64_t) { return NotBuilt(what); }
PinnedMemory::PinnedMemory(PinnedMemory&&) noexcept {}
PinnedMemory& PinnedMemory::operator=(PinnedMemory&&) noexcept { return *this; }
PinnedMemory::~PinnedMemory() = default;
Status PinnedMemory::Allocate(const char* what, int64_t) { return NotBuilt(what); }
Stream::~Stream() = default;
Status Stream::Create() { return NotBuilt("cuda stream"); }
Graph::Graph(Graph&&) noexcept {}
Graph& Graph::operator=(Graph&&) noexcept { return *this; }
Graph::~Graph() = default;
Status Graph::BeginCapture(void*) { return NotBuilt("cuda graph"); }
Status Graph::EndCapture(void*) { return NotBuilt("cuda graph"); }
Status Graph::Launch(void*) const { return NotBuilt("cuda graph"); }
Status CopyToDevice(void*, const void*, int64_t, void*) { return NotBuilt("cuda copy"); }
Status CopyToHost(void*, const void*, int64_t, void*) { return NotBuilt("cuda copy"); }
Status CopyOnDevice(void*, const void*, int64_t, void*) { return NotBuilt("cuda copy"); }
Status ZeroOnDevice(void*, int64_t, void*) { return NotBuilt("cuda memset"); }
Status SynchronizeStream(void*) { return NotBuilt("cuda synchronize"); }

}  // namespace cuda
}  // namespace ssmkit

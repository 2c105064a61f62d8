// The CUDA backend's few host-side controls. Every op runs on the GPU when its tensors live
// there (Tensor::device == Device::kCuda, data a device pointer); the op validates its
// arguments on the host, launches its kernels on the calling thread's stream and returns
// without waiting. Launch errors come back as the op's Status; errors during execution (a bad
// pointer, say) surface at the next synchronisation, e.g. CudaSynchronize().
//
// Workspaces come from the device's stream-ordered memory pool (cudaMallocAsync), kept cached
// between calls: after the first call at a given size nothing is allocated from the driver,
// and calls can be captured in a CUDA graph.
#pragma once

#include "ssmkit/status.hpp"

namespace ssmkit {

// True when the library was compiled with the CUDA backend.
bool CudaBuilt();

// The number of usable CUDA devices: 0 without the backend, a driver or a GPU.
int CudaDeviceCount();

// The stream (a cudaStream_t) the calling thread's ops launch on; nullptr, the default, is
// the legacy default stream.
void SetCudaStream(void* stream);
void* GetCudaStream();

// Waits for the calling thread's stream; returns the first error the kernels raised.
Status CudaSynchronize();

}  // namespace ssmkit

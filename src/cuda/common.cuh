// Shared pieces of the CUDA kernels: status conversion, the calling thread's stream, stream-
// ordered workspaces, dtype loads and stores, activation math, deterministic reductions.
//
// Dimension legend (all kernel files): B batch, L sequence length, D channels (d_inner for
// Mamba-1), N state size, H heads, P head dim, G groups of B/C, K conv width, Q chunk length,
// M rows, E features.
//
// Indexing: every offset into a tensor is int64 (products of dimensions exceed 2^31 in real
// workloads: mamba_ssm issue #1015); only per-thread loop counters inside a tile are int.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/round_up.hpp"  // CeilDiv, RoundUp
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::cuda {

// ---- host side --------------------------------------------------------------------------------

// The calling thread's stream (ssmkit::SetCudaStream; the legacy default stream unless set).
cudaStream_t CurrentStream();

// "<op>: <what>: <CUDA's message>" for a failed CUDA call; Ok for cudaSuccess.
Status FromCuda(cudaError_t error, const char* op, const char* what);

// The error of the kernel launch just made (bad configuration, no device, ...).
inline Status CheckLaunch(const char* op, const char* kernel) {
  return FromCuda(cudaGetLastError(), op, kernel);
}

#define SSMKIT_CUDA_RETURN_IF_ERROR(op, what, expr) \
  SSMKIT_RETURN_IF_ERROR(::ssmkit::cuda::FromCuda((expr), (op), (what)))

// The dynamic shared memory the current device grants one block (the opt-in limit).
Status MaxSharedMemoryPerBlock(const char* op, int* bytes);

// Raises a kernel's dynamic shared-memory limit to `bytes` when above the 48 KB default.
Status AllowSharedMemory(const char* op, const void* kernel, int bytes);

// A device buffer from the stream-ordered pool, freed in stream order when it goes out of
// scope: kernels launched before the free still see it. The pool keeps freed memory cached
// (release threshold raised once per device), so warm calls allocate nothing from the driver.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  // Allocates `bytes` (rounded up to 256) on the current stream; a previous buffer is freed.
  Status Allocate(const char* op, int64_t bytes);
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Consecutive pieces of one f32 workspace: Take(want, n) is the next n floats, nullptr (and no
// space) when not wanted. The first piece starts where the workspace does (256-byte aligned).
class FloatCarver {
 public:
  explicit FloatCarver(float* base) : next_(base) {}
  float* Take(bool want, int64_t count) {
    if (!want) return nullptr;
    float* piece = next_;
    next_ += count;
    return piece;
  }

 private:
  float* next_;
};

// ---- device side ------------------------------------------------------------------------------

// Element i of a buffer of `dtype` as f32. The switch is uniform across a launch, so it costs a
// predicted branch, and spares one template instantiation per dtype combination.
__device__ __forceinline__ float LoadF32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(data)[i]);
    case DType::kI32:
      return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// Bytes per element of the dtypes the kernels read (f32, bf16, f16, i32).
__device__ __forceinline__ int DTypeSizeOnDevice(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 ? 2 : 4;
}

// Stores v rounded to `dtype` (round to nearest even).
__device__ __forceinline__ void StoreF32(void* data, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
      return;
    case DType::kF16:
      static_cast<__half*>(data)[i] = __float2half_rn(v);
      return;
    default:
      static_cast<float*>(data)[i] = v;
      return;
  }
}

// The same conversions for a storage type known at compile time (the templated fast kernels).
template <class E>
__device__ __forceinline__ float ToF32(E v);
template <>
__device__ __forceinline__ float ToF32(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToF32(__half v) {
  return __half2float(v);
}
template <class E>
__device__ __forceinline__ E FromF32(float v);
template <>
__device__ __forceinline__ float FromF32(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromF32(float v) {
  return __float2half_rn(v);
}

// 2^v by the special-function unit, results below 2^-126 flushed to 0. exp2f adds a rescale
// around the same instruction to keep such results; the scans' decay factors need none.
__device__ __forceinline__ float Exp2Ftz(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + __expf(-v)); }
__device__ __forceinline__ float Silu(float v) { return v * Sigmoid(v); }
// d silu(v) / dv = sigmoid(v) (1 + v (1 - sigmoid(v))).
__device__ __forceinline__ float SiluGrad(float v) {
  const float s = Sigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}
// softplus(v) = log(1 + e^v), the identity above 20 (mamba_ssm's threshold).
__device__ __forceinline__ float Softplus(float v) { return v > 20.0f ? v : log1pf(__expf(v)); }

// Sum over the 32 lanes, every lane gets the total. A fixed butterfly: deterministic.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
// `scratch` holds 32 floats of shared memory; the block must reach the call together.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];  // same order in every thread
  return total;
}

// ---- deterministic sums of partial results ----------------------------------------------------

// An output of up to three dimensions: element (i0, i1, i2) at i0*s0 + i1*s1 + i2*s2, in any
// storage dtype. Unused leading dimensions have size 1.
struct StridedOut {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t dims[3] = {1, 1, 1};
  int64_t strides[3] = {0, 0, 0};
  __host__ __device__ int64_t count() const { return dims[0] * dims[1] * dims[2]; }
};

// out[i] = sum_{p < parts} partial[p * count + i] for i < out.count(), in order of p: the
// reduction of per-block partial gradients without float atomics.
Status SumPartials(const char* op, const float* partial, int64_t parts, const StridedOut& out);

// The same per group: group g's output (out's element (i0, i1, i2) plus g * group_stride) is
// sum_{p < parts} partial[(g * parts + p) * count + i], in order of p, for g < groups. Sums the
// per-block partials of a grouped gradient (B/C of the scans) when a group's blocks are
// consecutive.
Status SumGroupedPartials(const char* op, const float* partial, int64_t groups, int64_t parts,
                          int64_t group_stride, const StridedOut& out);

}  // namespace ssmkit::cuda

// LinearForward on CUDA: out = x W^T (+ bias) by cuBLAS's GemmEx, 16-bit inputs (bf16 or f16,
// x and W alike) with f32 accumulation, out in f32 or the inputs' dtype. Semantics:
// include/ssmkit/linear.hpp. Dimension legend: T rows, K input features, M output features.
//
// Layout: cuBLAS is column-major, so the row-major out (T, M) is the column-major (M, T) product
// W' x' of the column-major views W' = (K, M) (that is W (M, K) row-major) transposed and
// x' = (K, T): one GEMM with op(A) = transpose, no copies.
//
// Each thread keeps one cuBLAS handle per device, with a workspace of its own set on every call
// (cublasSetStream resets it): cuBLAS then allocates nothing while it runs, so calls can be
// captured in a CUDA graph once a first call outside the capture has created the handle.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend.hpp"
#include "cuda/common.cuh"

namespace ssmkit::cuda {
namespace {

constexpr const char* kOp = "linear";
// cuBLAS's recommendation for Hopper (tuned for speed, does not affect the result).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kBiasThreads = 256;

Status FromCublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  const std::string message = std::string(kOp) + ": " + what + ": " + cublasGetStatusName(status) +
                              " (" + cublasGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return Status::OutOfMemory(message);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    return Status::Unsupported(message);
  }
  return Status::Internal(message);
}

// A thread's handle and workspace on one device, released when the thread ends.
struct Handle {
  int device = -1;
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (handle) cublasDestroy(handle);
    if (workspace) cudaFree(workspace);
  }
};

Status ThreadHandle(Handle** out) {
  thread_local std::vector<std::unique_ptr<Handle>> handles;
  int device = 0;
  SSMKIT_CUDA_RETURN_IF_ERROR(kOp, "cudaGetDevice", cudaGetDevice(&device));
  for (auto& h : handles) {
    if (h->device == device) {
      *out = h.get();
      return Status::Ok();
    }
  }
  auto h = std::make_unique<Handle>();
  h->device = device;
  SSMKIT_RETURN_IF_ERROR(FromCublas(cublasCreate(&h->handle), "cublasCreate"));
  const cudaError_t error = cudaMalloc(&h->workspace, kWorkspaceBytes);
  if (error != cudaSuccess) {
    h->workspace = nullptr;
    return FromCuda(error, kOp, "cuBLAS workspace (cudaMalloc)");
  }
  *out = h.get();
  handles.push_back(std::move(h));
  return Status::Ok();
}

// out[t, m] += bias[m], one thread per element of a row tile.
__global__ void __launch_bounds__(kBiasThreads) AddBiasKernel(LinearCudaParams p) {
  const int64_t t = blockIdx.y;
  for (int64_t m = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; m < p.out_features;
       m += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t * p.out_stride_row + m;
    StoreF32(p.out, p.out_dtype, i, LoadF32(p.out, p.out_dtype, i) + p.bias[m]);
  }
}

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace

Status LinearForward(const LinearCudaParams& p) {
  const int64_t T = p.rows, K = p.in_features, M = p.out_features;
  for (int64_t v : {T, K, M, p.x_stride_row, p.out_stride_row}) {
    if (v > INT_MAX) {
      return Status::Unsupported(std::string(kOp) +
                                 ": a dimension or row stride above 2^31 - 1 on CUDA (cuBLAS's "
                                 "int arguments)");
    }
  }
  if (T > 65535 && p.bias) {
    return Status::Unsupported(std::string(kOp) + ": more than 65535 rows with a bias on CUDA");
  }
  Handle* h = nullptr;
  SSMKIT_RETURN_IF_ERROR(ThreadHandle(&h));
  SSMKIT_RETURN_IF_ERROR(
      FromCublas(cublasSetStream(h->handle, CurrentStream()), "cublasSetStream"));
  SSMKIT_RETURN_IF_ERROR(FromCublas(cublasSetWorkspace(h->handle, h->workspace, kWorkspaceBytes),
                                    "cublasSetWorkspace"));
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t in_type = CudaType(p.dtype);
  SSMKIT_RETURN_IF_ERROR(FromCublas(
      cublasGemmEx(h->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(M), static_cast<int>(T),
                   static_cast<int>(K), &alpha, p.weight, in_type, static_cast<int>(K), p.x,
                   in_type, static_cast<int>(p.x_stride_row), &beta, p.out, CudaType(p.out_dtype),
                   static_cast<int>(p.out_stride_row), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx"));
  if (!p.bias) return Status::Ok();
  const int64_t tiles = std::min<int64_t>(CeilDiv(M, kBiasThreads), 1024);
  AddBiasKernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(T)), kBiasThreads, 0,
                  CurrentStream()>>>(p);
  return CheckLaunch(kOp, "AddBiasKernel");
}

}  // namespace ssmkit::cuda

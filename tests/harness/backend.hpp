// The backends a harness case runs on: each CPU SIMD target libssmkit was compiled for and this
// CPU runs (dispatch forced to it), and on a CUDA build each combination of the op's CUDA kernel
// variants (src/cuda/variant.hpp), skipped where no GPU is usable.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda/variant.hpp"
#include "harness/problem.hpp"

namespace ssmkit::testing::harness {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;  // "AVX2", "CUDA", "CUDA_original_vector"
  virtual bool cuda() const = 0;
  virtual std::string SkipReason() const { return ""; }  // non-empty: cannot run here
  virtual void Enter() = 0;  // makes the op's calls run on this backend until Leave()
  virtual void Leave() = 0;
  virtual std::unique_ptr<Placement> Place() = 0;
};

// The host tensors themselves.
class HostPlacement : public Placement {
 public:
  Tensor In(const Tensor& host) override { return host; }
  Tensor Out(const Tensor& host) override { return host; }
  Status Sync() override { return Status::Ok(); }
  Status Finish() override { return Status::Ok(); }
};

std::vector<std::unique_ptr<Backend>> CpuBackends();
// Empty without the CUDA backend (backend_cuda_absent.cpp).
std::vector<std::unique_ptr<Backend>> CudaBackends(
    const std::vector<const cuda::OpVariants*>& variants);

}  // namespace ssmkit::testing::harness

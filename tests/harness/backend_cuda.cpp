// The GPU backend: a case's host tensors mirrored to device memory (gpu_test_util.hpp's Mirrors,
// strides and padding included) and copied back, so the host-side checks run unchanged; one
// backend per combination of the op's kernel variants.
#include <cuda_runtime.h>

#include <utility>

#include "gpu_test_util.hpp"
#include "harness/backend.hpp"

namespace ssmkit::testing::harness {
namespace {

class MirrorPlacement : public Placement {
 public:
  Tensor In(const Tensor& host) override { return mirrors_.In(host); }
  Tensor Out(const Tensor& host) override { return mirrors_.Out(host); }
  Status Sync() override { return CudaSynchronize(); }
  Status Finish() override {
    const cudaError_t err = mirrors_.CopyBack();
    return err == cudaSuccess ? Status::Ok() : Status::Internal(cudaGetErrorString(err));
  }

 private:
  Mirrors mirrors_;
};

// `pick[i]` names the variant of `variants[i]` this backend runs.
class CudaBackend : public Backend {
 public:
  CudaBackend(const std::vector<const cuda::OpVariants*>& variants, std::vector<int> pick)
      : variants_(variants), pick_(std::move(pick)) {}
  std::string Name() const override {
    std::string name = "CUDA";
    for (size_t i = 0; i < variants_.size(); ++i)
      name += std::string("_") + variants_[i]->names[pick_[i]];
    return name;
  }
  bool cuda() const override { return true; }
  std::string SkipReason() const override {
    return CudaDeviceCount() == 0 ? "no CUDA GPU here: the CUDA cases need one" : "";
  }
  void Enter() override {
    for (size_t i = 0; i < variants_.size(); ++i) {
      set_.push_back(
          std::make_unique<ScopedVariant>(variants_[i]->env, variants_[i]->names[pick_[i]]));
    }
  }
  void Leave() override { set_.clear(); }
  std::unique_ptr<Placement> Place() override { return std::make_unique<MirrorPlacement>(); }

 private:
  std::vector<const cuda::OpVariants*> variants_;
  std::vector<int> pick_;
  std::vector<std::unique_ptr<ScopedVariant>> set_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> CudaBackends(
    const std::vector<const cuda::OpVariants*>& variants) {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<int> pick(variants.size(), 0);
  while (true) {
    backends.push_back(std::make_unique<CudaBackend>(variants, pick));
    size_t i = 0;  // the next combination, first op fastest (as ForEachVariant)
    while (i < variants.size() && ++pick[i] == variants[i]->count) pick[i++] = 0;
    if (i == variants.size()) return backends;
  }
}

}  // namespace ssmkit::testing::harness

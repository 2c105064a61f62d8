#include "core/simd_targets.hpp"
#include "harness/backend.hpp"

namespace ssmkit::testing::harness {
namespace {

class SimdTargetBackend : public Backend {
 public:
  explicit SimdTargetBackend(int64_t target) : target_(target) {}
  std::string Name() const override { return SimdTargetName(target_); }
  bool cuda() const override { return false; }
  void Enter() override { ForceSimdTarget(target_); }
  void Leave() override { ForceSimdTarget(0); }
  std::unique_ptr<Placement> Place() override { return std::make_unique<HostPlacement>(); }

 private:
  int64_t target_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> CpuBackends() {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int64_t target : CompiledSimdTargets())
    backends.push_back(std::make_unique<SimdTargetBackend>(target));
  return backends;
}

}  // namespace ssmkit::testing::harness

// Built without the CUDA backend: no GPU backends to register.
#include "harness/backend.hpp"

namespace ssmkit::testing::harness {

std::vector<std::unique_ptr<Backend>> CudaBackends(const std::vector<const cuda::OpVariants*>&) {
  return {};
}

}  // namespace ssmkit::testing::harness

// `ssmkit bench generate --device cuda`: the engine on the GPU (bench_generate_cuda.cpp).
#pragma once

#include "bench_harness.hpp"

namespace ssmkit::bench {

int RunCudaGenerateBench(const Options& options);

}  // namespace ssmkit::bench

// Kernel variants. An op whose CUDA kernels are being replaced keeps the verified kernel as its
// default and offers the new one beside it, picked per call by an environment variable
// (SSMKIT_CUDA_SCAN, SSMKIT_CUDA_SSD, SSMKIT_CUDA_CONV1D: docs/cuda.md lists the names). The
// GPU tests run every variant and bench/device/run.sh times every variant; once a GPU run shows
// a new kernel correct and faster, it becomes the default and the loser is deleted.
#pragma once

#include <initializer_list>

#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// The index in `names` of the variant the environment variable `env` names; 0 (the default)
// when it is unset or empty. Any other value is an InvalidArgument naming the variable, the
// value given and the names accepted.
Status PickVariant(const char* op, const char* env, std::initializer_list<const char*> names,
                   int* index);

}  // namespace ssmkit::cuda

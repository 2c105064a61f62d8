// Kernel variants. An op whose CUDA kernels are being replaced keeps the verified kernel as its
// default and offers the new one beside it, picked per call by an environment variable. The
// GPU tests run every variant and bench/device/run.sh times every variant; once a GPU run shows
// a new kernel correct and faster, it becomes the default and the loser is deleted.
//
// A new kernel may cover only some arguments (dtypes, layouts, options) and leave the rest to
// the verified one. A name followed by '!' (SSMKIT_CUDA_SCAN=parallel!) requires the variant:
// a call it does not cover fails with Unsupported instead of falling back, so a test can prove
// which kernel ran.
//
// Plain C++ (no CUDA types): the GPU tests and the device benchmark read the lists below.
#pragma once

#include "ssmkit/status.hpp"

namespace ssmkit::cuda {

// An op's variants: the environment variable that picks one and the names it accepts, the
// verified kernel's first.
struct OpVariants {
  const char* op;
  const char* env;
  const char* const* names;
  int count;
};

inline constexpr const char* kScanVariantNames[] = {"verified", "parallel", "parallel8"};
inline constexpr OpVariants kScanVariants{"selective_scan", "SSMKIT_CUDA_SCAN", kScanVariantNames,
                                          3};
inline constexpr const char* kSsdVariantNames[] = {"verified"};
inline constexpr OpVariants kSsdVariants{"ssd", "SSMKIT_CUDA_SSD", kSsdVariantNames, 1};
inline constexpr const char* kConv1dVariantNames[] = {"verified", "vector"};
inline constexpr OpVariants kConv1dVariants{"causal_conv1d", "SSMKIT_CUDA_CONV1D",
                                            kConv1dVariantNames, 2};

struct Variant {
  int index = 0;          // in OpVariants::names; 0 is the verified kernel
  bool required = false;  // the name ended in '!'
};

// The variant the op's environment variable names; index 0 when it is unset or empty. Any other
// value is an InvalidArgument naming the variable, the value given and the names accepted.
Status PickVariant(const OpVariants& op, Variant* variant);

// The Unsupported status of a required variant that does not cover a call.
Status VariantDoesNotApply(const OpVariants& op, int index);

}  // namespace ssmkit::cuda

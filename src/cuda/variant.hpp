// Kernel variants. An op whose CUDA kernels are being replaced keeps the verified kernel as its
// default and offers the new one beside it, picked per call by an environment variable. The
// GPU tests run every variant and bench/device/run.sh times every variant; once a GPU run shows
// a new kernel correct and faster, it becomes the default, and the old one is deleted once the
// new one covers every call the old one did (until then the old one runs the rest).
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

// An op's variants: the environment variable that picks one, the names it accepts (the first
// kernel written, "original", first) and the one that runs when the variable is unset.
struct OpVariants {
  const char* op;
  const char* env;
  const char* const* names;
  int count;
  int default_index;
};

// Selective scan forward: "parallel" (selective_scan_fwd_parallel.cu) replaced "original" where
// it applies after the H200 run of 2026-11-28 (docs/cuda.md).
inline constexpr const char* kScanVariantNames[] = {"original", "parallel"};
inline constexpr OpVariants kScanVariants{"selective_scan", "SSMKIT_CUDA_SCAN", kScanVariantNames,
                                          2, 1};
// Selective scan backward: "parallel" (selective_scan_bwd_parallel.cu) replaced "original" where
// it applies (H200, 2026-11-28: forward + backward 5.32 ms against 33.2 at m1-2.8b).
inline constexpr const char* kScanBackwardVariantNames[] = {"original", "parallel"};
inline constexpr OpVariants kScanBackwardVariants{"selective_scan", "SSMKIT_CUDA_SCAN_BWD",
                                                  kScanBackwardVariantNames, 2, 1};
// SSD: "mma" (ssd_mma*.cu) replaced "original" where it applies (H200, 2026-11-28: m2-130m
// forward 0.607 ms against 4.45, forward + backward 2.53 against 16.4).
inline constexpr const char* kSsdVariantNames[] = {"original", "mma"};
inline constexpr OpVariants kSsdVariants{"ssd", "SSMKIT_CUDA_SSD", kSsdVariantNames, 2, 1};
// Causal conv1d, forward and backward: "unrolled" (conv1d_vector.cu) replaced "original" where it
// applies (H200, 2026-11-30: forward 0.091 ms against 1.07, forward + backward 0.389 against
// 6.94), and "vector", its predecessor with the width read at run time (0.172 and 0.870).
inline constexpr const char* kConv1dVariantNames[] = {"original", "unrolled"};
inline constexpr OpVariants kConv1dVariants{"causal_conv1d", "SSMKIT_CUDA_CONV1D",
                                            kConv1dVariantNames, 2, 1};
inline constexpr OpVariants kConv1dBackwardVariants{"causal_conv1d", "SSMKIT_CUDA_CONV1D_BWD",
                                                    kConv1dVariantNames, 2, 1};

struct Variant {
  int index = 0;          // in OpVariants::names
  bool required = false;  // the name ended in '!'
};

// The variant the op's environment variable names; the default when it is unset or empty. Any other
// value is an InvalidArgument naming the variable, the value given and the names accepted.
Status PickVariant(const OpVariants& op, Variant* variant);

// The Unsupported status of a required variant that does not cover a call.
Status VariantDoesNotApply(const OpVariants& op, int index);

}  // namespace ssmkit::cuda

// Helpers of the GPU tests: skip without a GPU, mirror host tensors (the CPU tests' fixtures,
// strides and padding included) to device memory, copy outputs back so the host-side checks
// (oracle comparison, NaN poisoning, untouched padding) run unchanged.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda/variant.hpp"
#include "ssmkit/cuda.hpp"
#include "ssmkit/tensor.hpp"

// Skips the calling test, with the reason, where no CUDA device is usable (CI has none).
#define SSMKIT_REQUIRE_GPU()                                                              \
  do {                                                                                    \
    if (::ssmkit::CudaDeviceCount() == 0) {                                               \
      GTEST_SKIP() << "no CUDA GPU here: the 'gpu' tests need one (bench/device/run.sh)"; \
    }                                                                                     \
  } while (0)

#define SSMKIT_CUDA_OK(expr)                                                \
  do {                                                                      \
    const cudaError_t ssmkit_err_ = (expr);                                 \
    ASSERT_EQ(ssmkit_err_, cudaSuccess) << cudaGetErrorString(ssmkit_err_); \
  } while (0)

namespace ssmkit::testing {

// The kernel variants of an op with a new kernel beside the verified one (cuda::OpVariants in
// src/cuda/variant.hpp): each GPU test of such an op runs its body once per variant.
using cuda::kConv1dBackwardVariants;
using cuda::kConv1dVariants;
using cuda::kScanBackwardVariants;
using cuda::kScanVariants;
using cuda::kSsdVariants;
using cuda::OpVariants;

// Sets a variant's environment variable for the scope, then restores what was there.
class ScopedVariant {
 public:
  ScopedVariant(const char* env, const char* name) : env_(env) {
    const char* old = std::getenv(env);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(env, name, 1);
  }
  ScopedVariant(const ScopedVariant&) = delete;
  ScopedVariant& operator=(const ScopedVariant&) = delete;
  ~ScopedVariant() {
    if (had_) {
      setenv(env_, old_.c_str(), 1);
    } else {
      unsetenv(env_);
    }
  }

 private:
  const char* env_;
  bool had_ = false;
  std::string old_;
};

// Runs body() once under each combination of the ops' variants (each op's variable set to one
// of its names), the combination named in failure messages.
template <class Fn>
void ForEachVariant(std::initializer_list<const OpVariants*> ops, Fn&& body) {
  std::vector<const OpVariants*> list(ops);
  std::vector<int> pick(list.size(), 0);
  while (true) {
    std::string names;
    std::vector<std::unique_ptr<ScopedVariant>> set;
    for (size_t i = 0; i < list.size(); ++i) {
      const char* name = list[i]->names[pick[i]];
      names += std::string(names.empty() ? "" : " ") + list[i]->env + "=" + name;
      set.push_back(std::make_unique<ScopedVariant>(list[i]->env, name));
    }
    SCOPED_TRACE(names);
    body();
    size_t i = 0;  // the next combination, first op fastest
    while (i < list.size() && ++pick[i] == list[i]->count) pick[i++] = 0;
    if (i == list.size()) return;
  }
}
template <class Fn>
void ForEachVariant(const OpVariants& op, Fn&& body) {
  ForEachVariant({&op}, std::forward<Fn>(body));
}

// Elements from a view's first element to its last, inclusive: what a kernel may touch.
inline int64_t Extent(const Tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
  return last + 1;
}

// Device copies of host tensors for one call. Outputs are copied back by CopyBack(), which
// also waits for the stream and returns the first error the kernels raised.
class Mirrors {
 public:
  Mirrors() = default;
  Mirrors(const Mirrors&) = delete;
  Mirrors& operator=(const Mirrors&) = delete;
  ~Mirrors() {
    for (auto& m : list_) cudaFree(m.device);
  }

  // The device twin of `host` (same shape and strides, device = kCuda); absent stays absent.
  Tensor In(const Tensor& host) { return Add(host, false); }
  // The same for an output: its host memory receives the device result in CopyBack().
  Tensor Out(const Tensor& host) { return Add(host, true); }
  // `host` with the device twin of every tensor `list` names (an op's inputs in
  // ssmkit/op_tensors.hpp); its other members copied.
  template <class S, class Entry, size_t N>
  S In(const S& host, const Entry (&list)[N]) {
    S device = host;
    for (const Entry& e : list) device.*e.member = In(host.*e.member);
    return device;
  }

  cudaError_t CopyBack() {
    cudaError_t err = cudaDeviceSynchronize();
    for (auto& m : list_) {
      if (err != cudaSuccess) break;
      if (m.output) err = cudaMemcpy(m.host, m.device, m.bytes, cudaMemcpyDeviceToHost);
    }
    return err;
  }

  // Bytes held on the device by all mirrors.
  int64_t bytes() const {
    int64_t total = 0;
    for (const auto& m : list_) total += m.bytes;
    return total;
  }

 private:
  struct Mirror {
    void* host;
    void* device;
    size_t bytes;
    bool output;
  };
  Tensor Add(const Tensor& host, bool output) {
    if (!host.defined()) return host;
    Tensor t = host;
    Mirror m{host.data, nullptr, static_cast<size_t>(Extent(host) * DTypeSize(host.dtype)), output};
    if (cudaMalloc(&m.device, m.bytes) != cudaSuccess ||
        cudaMemcpy(m.device, host.data, m.bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
      ADD_FAILURE() << "could not mirror a tensor of " << m.bytes << " bytes to the GPU";
      cudaFree(m.device);
      return Tensor{};
    }
    list_.push_back(m);
    t.data = m.device;
    t.device = Device::kCuda;
    return t;
  }
  std::vector<Mirror> list_;
};

}  // namespace ssmkit::testing

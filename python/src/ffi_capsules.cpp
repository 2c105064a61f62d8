// The XLA FFI handlers (ffi_handlers.cpp) as PyCapsules for jax.ffi.register_ffi_target.
#include <initializer_list>
#include <utility>

#include "ffi_handlers.hpp"
#include "ffi_targets.hpp"

namespace ssmkit::python {
namespace {

using HandlerFn = XLA_FFI_Error* (*)(XLA_FFI_CallFrame*);

nanobind::dict Capsules(std::initializer_list<std::pair<const char*, HandlerFn>> handlers) {
  nanobind::dict targets;
  for (const auto& [name, handler] : handlers) {
    targets[name] = nanobind::capsule(reinterpret_cast<void*>(handler));
  }
  return targets;
}

}  // namespace

#define SSMKIT_CPU_ENTRY(name, Body, Binding) {name, Ssmkit##Body},
nanobind::dict FfiTargets() { return Capsules({SSMKIT_FFI_TARGETS(SSMKIT_CPU_ENTRY)}); }

#ifdef SSMKIT_HAS_CUDA
#define SSMKIT_CUDA_ENTRY(name, Body, Binding) {name, Ssmkit##Body##Cuda},
nanobind::dict CudaFfiTargets() { return Capsules({SSMKIT_FFI_TARGETS(SSMKIT_CUDA_ENTRY)}); }
#endif

}  // namespace ssmkit::python

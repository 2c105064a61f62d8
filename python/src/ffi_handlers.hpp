// The XLA FFI handlers of ssmkit.jax (ffi_handlers.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace ssmkit::python {

// {target name: PyCapsule of the handler} for jax.ffi.register_ffi_target(..., platform="cpu").
nanobind::dict FfiTargets();

#ifdef SSMKIT_HAS_CUDA
// The same targets for platform="CUDA": operands and results are device buffers, the ops run
// on XLA's stream.
nanobind::dict CudaFfiTargets();
#endif

}  // namespace ssmkit::python

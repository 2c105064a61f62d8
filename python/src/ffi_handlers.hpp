// The XLA FFI handlers of ssmkit.jax (ffi_handlers.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace ssmkit::python {

// {target name: PyCapsule of the handler} for jax.ffi.register_ffi_target(..., platform="cpu").
nanobind::dict FfiTargets();

}  // namespace ssmkit::python

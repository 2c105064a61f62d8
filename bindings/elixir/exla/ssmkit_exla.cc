// Registers ssmkit's XLA FFI handlers with the XLA inside EXLA. The handlers are the ones
// ssmkit.jax registers with JAX and its tests exercise (python/src/ffi_handlers.cpp: every op,
// forward and backward, operands in the orders of include/ssmkit/op_tensors.hpp); this file only
// names them to the process's FFI registry under the same target names, for the "Host" platform
// (and "CUDA" when the library has the CUDA backend).
//
// The registrations run when the library is loaded: EXLA.NIF.load_dylib/1 (EXLA 0.12 and 0.13,
// an undocumented function of a private module) or EXLA.load_dylib/1 (elixir-nx/nx PR #1826,
// after 0.13.1) dlopens it with RTLD_NOW | RTLD_GLOBAL. Compiled against the headers of EXLA's
// xla_extension and linked with -lxla_extension, which defines xla::ffi::GetXlaFfiApi: the one
// registry of the process, the one EXLA's compiled programs look targets up in. Ssmkit.EXLA
// (lib/ssmkit/exla.ex) emits the custom calls. Built by exla/Makefile; see docs/integrations.md
// for what of this route has and has not been run.
#include "ffi_targets.hpp"
#include "xla/ffi/api/ffi.h"
#if __has_include("xla/ffi/ffi_api.h")
#include "xla/ffi/ffi_api.h"  // GetXlaFfiApi's declaration in XLA versions whose api/ffi.h lacks it
#endif

#define SSMKIT_EXLA_HOST(name, Body, Binding) \
  XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), name, "Host", Ssmkit##Body);
SSMKIT_FFI_TARGETS(SSMKIT_EXLA_HOST)

#ifdef SSMKIT_HAS_CUDA
#define SSMKIT_EXLA_CUDA(name, Body, Binding) \
  XLA_FFI_REGISTER_HANDLER(xla::ffi::GetXlaFfiApi(), name, "CUDA", Ssmkit##Body##Cuda);
SSMKIT_FFI_TARGETS(SSMKIT_EXLA_CUDA)
#endif

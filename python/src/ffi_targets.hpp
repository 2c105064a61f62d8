// The XLA FFI targets of ffi_handlers.cpp: each name, the body behind it and its binding, and
// the C symbols of the handlers. The handler of body X is SsmkitX on the CPU and SsmkitXCuda on
// CUDA; ffi_capsules.cpp hands them to JAX, bindings/elixir/exla/ssmkit_exla.cc registers them
// with EXLA's XLA.
#pragma once

#include "xla/ffi/api/ffi.h"

#define SSMKIT_FFI_TARGETS(TARGET)                                     \
  TARGET("ssmkit_selective_scan_fwd", ScanFwd, ScanFwdBind)            \
  TARGET("ssmkit_selective_scan_bwd", ScanBwd, ScanBwdBind)            \
  TARGET("ssmkit_ssd_fwd", SsdFwd, SsdBind)                            \
  TARGET("ssmkit_ssd_bwd", SsdBwd, SsdBind)                            \
  TARGET("ssmkit_selective_state_update", StateUpdate, DtSoftplusBind) \
  TARGET("ssmkit_causal_conv1d_fwd", ConvFwd, SiluBind)                \
  TARGET("ssmkit_causal_conv1d_bwd", ConvBwd, SiluBind)                \
  TARGET("ssmkit_causal_conv1d_update", ConvUpdate, SiluBind)          \
  TARGET("ssmkit_rmsnorm_fwd", RmsNormFwd, RmsNormBind)                \
  TARGET("ssmkit_rmsnorm_bwd", RmsNormBwd, RmsNormBind)                \
  TARGET("ssmkit_add_rmsnorm_fwd", AddRmsNormFwd, EpsBind)             \
  TARGET("ssmkit_add_rmsnorm_bwd", AddRmsNormBwd, EpsBind)

#define SSMKIT_FFI_DECLARE_CPU(name, Body, Binding) XLA_FFI_DECLARE_HANDLER_SYMBOL(Ssmkit##Body);
SSMKIT_FFI_TARGETS(SSMKIT_FFI_DECLARE_CPU)
#ifdef SSMKIT_HAS_CUDA
#define SSMKIT_FFI_DECLARE_CUDA(name, Body, Binding) \
  XLA_FFI_DECLARE_HANDLER_SYMBOL(Ssmkit##Body##Cuda);
SSMKIT_FFI_TARGETS(SSMKIT_FFI_DECLARE_CUDA)
#endif

// ssmkit._ssmkit: the extension behind the ssmkit package (numpy ops, error classes, threads,
// the inference engine's models, sessions, tokenizers and generation) and ssmkit.jax (the XLA
// FFI handlers, as capsules for jax.ffi.register_ffi_target).
#include <nanobind/nanobind.h>

#include "array_args.hpp"
#include "model_bindings.hpp"
#include "numpy_ops.hpp"
#include "quant_bindings.hpp"
#include "ssmkit/cuda.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/ssmkit.h"
#include "ssmkit/threads.hpp"

#ifdef SSMKIT_WITH_XLA_FFI
#include "ffi_handlers.hpp"
#endif

namespace nb = nanobind;

NB_MODULE(_ssmkit, m) {
  m.doc() = "ssmkit's C++ kernels: numpy binding and XLA FFI handlers";
  m.attr("__version__") =
      nb::str((std::to_string(SSMKIT_VERSION_MAJOR) + "." + std::to_string(SSMKIT_VERSION_MINOR) +
               "." + std::to_string(SSMKIT_VERSION_PATCH))
                  .c_str());
  ssmkit::python::RegisterErrors(m);
  ssmkit::python::RegisterNumpyOps(m);
  ssmkit::python::RegisterQuant(m);
  ssmkit::python::RegisterModel(m);
  ssmkit::python::RegisterGeneration(m);
  m.def("set_num_threads", &ssmkit::SetNumThreads, nb::arg("n"),
        "Threads used by every op; n <= 0 restores the default (SSMKIT_NUM_THREADS, else all "
        "cores). Results are bit-identical for a given count.");
  m.def("num_threads", &ssmkit::NumThreads);
  m.def("set_bf16_products", &ssmkit::SetBf16Products, nb::arg("enable"),
        "Opt-in (default: SSMKIT_BF16_PRODUCTS=1, else off): a bf16 weight's products with 2 or "
        "more rows (prefill, decode batches) round x to bf16 and multiply with AVX-512 BF16, as "
        "llama.cpp does, or with AMX's bf16 tiles where the CPU has them. Returns "
        "whether they are now in use (False on a CPU without AVX-512 "
        "BF16).");
  m.def("bf16_products", &ssmkit::Bf16Products);
  // Whether the library has the CUDA backend; the extension then has the CUDA FFI handlers.
  m.attr("built_with_cuda") = ssmkit::CudaBuilt();
#ifdef SSMKIT_WITH_XLA_FFI
  m.attr("has_xla_ffi") = true;
  m.def("ffi_targets", &ssmkit::python::FfiTargets,
        "{target name: PyCapsule of its XLA FFI handler}, for jax.ffi.register_ffi_target");
#ifdef SSMKIT_HAS_CUDA
  m.def("cuda_ffi_targets", &ssmkit::python::CudaFfiTargets,
        "The same targets' handlers for platform=\"CUDA\" (device buffers, XLA's stream)");
#endif
#else
  m.attr("has_xla_ffi") = false;
#endif
}

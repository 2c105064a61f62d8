// The quantized weight formats on numpy arrays (quant_bindings.cpp), registered on the
// extension module.
#pragma once

#include <nanobind/nanobind.h>

namespace ssmkit::python {

void RegisterQuant(nanobind::module_& m);

}  // namespace ssmkit::python

// The numpy binding's functions (numpy_ops.cpp), registered on the extension module.
#pragma once

#include <nanobind/nanobind.h>

namespace ssmkit::python {

void RegisterNumpyOps(nanobind::module_& m);

}  // namespace ssmkit::python

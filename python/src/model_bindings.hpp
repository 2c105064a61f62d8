// The inference engine for Python: models and sessions (model_bindings.cpp), tokenizers and
// generation (generation_bindings.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace ssmkit::python {

namespace nb = nanobind;

void RegisterModel(nb::module_& m);
void RegisterGeneration(nb::module_& m);

}  // namespace ssmkit::python

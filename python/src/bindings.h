// offgen._core: the parts of the nanobind module (each binds one area of the C++ API) and the
// translation of offgen::Error into the Python classes of offgen.errors.
#pragma once

#include <nanobind/nanobind.h>

namespace offgen::python {

void bind_policy(nanobind::module_& m);  // Policy, PolicyOverrides, SamplingParams, plan()
void bind_engine(nanobind::module_& m);  // Engine, Output

}  // namespace offgen::python

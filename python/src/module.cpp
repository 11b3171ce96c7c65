// The module's entry point: registers the bindings and maps offgen::Error categories onto the
// exception classes of offgen/errors.py (ConfigError, InputError, IoError, ResourceError, ...).
#include <nanobind/nanobind.h>

#include "python/src/bindings.h"
#include "runtime/core/error.h"

namespace nb = nanobind;

namespace {

const char* error_class(offgen::ErrorCategory c) {
  switch (c) {
    case offgen::ErrorCategory::kConfig:
      return "ConfigError";
    case offgen::ErrorCategory::kInput:
      return "InputError";
    case offgen::ErrorCategory::kResource:
      return "ResourceError";
    case offgen::ErrorCategory::kIo:
      return "IoError";
    case offgen::ErrorCategory::kInternal:
      return "InternalError";
  }
  return "Error";
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "offgen's C++ Engine API (use the offgen package, not this module)";
  // An interpreter that exits while a daemon thread is inside generate() still holds that call's
  // objects: nanobind's leak report then alarms users about what is no leak of theirs.
  nb::set_leak_warnings(false);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const offgen::Error& e) {
      PyObject* cls = PyExc_RuntimeError;
      nb::object errors;
      try {
        errors = nb::module_::import_("offgen.errors");
        cls = errors.attr(error_class(e.category())).ptr();
      } catch (const nb::python_error&) {
        // offgen.errors cannot be imported (a broken install): a plain RuntimeError then.
      }
      PyErr_SetString(cls, e.what());
    }
  });
  offgen::python::bind_policy(m);
  offgen::python::bind_engine(m);
}
